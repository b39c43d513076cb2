-- Guarantee: how an attempt ends, on 0.3.0's positions. A completion moves its lane's cursor
-- only over contiguous finished positions and writes nothing when nothing took effect (no new
-- lane row version); a token holds while its lane has its epoch and lists its position (a
-- window pick, claims 0) or its retry (its exception row's claims), so a stale, repeated or
-- forged token changes nothing; fail charges an attempt (backoff base * 2^(n-1), capped; dead
-- at max_attempts; or retry_at), bury dead-letters, release gives the delivery back uncharged
-- and due at once while its token dies; a completion inside a transaction that rolls back
-- leaves the position in flight, and a concurrent end of the same attempt waits for it;
-- relinquish hands back only the caller's lanes that run nothing; a malformed token is 22023.
--
-- The lanes are put directly in the state a claim leaves them in (owner, holder, epoch in the
-- lane's lease row; in_flight, retrying in a new lane_progress row; exception rows), and the
-- tokens are built in the r3 format, so this suite depends on no claim. Exact lane states,
-- exception rows, intervals, return values and row versions (the lease row's xmin and ctid,
-- and the lane's newest progress seq) are compared, so a broken rule shows as a differing
-- value.
SET relaybus.max_delay = '2147483647s';  -- a retry_at in 2090 is part of what is checked
SELECT rb_reset();
SELECT plan(150);

-- Deliveries at positions 1..n of (handler, lane), due a minute ago; event ids h/lane/position.
CREATE FUNCTION pg_temp.put(h text, l int, n int, k text DEFAULT NULL) RETURNS void
  LANGUAGE sql AS $$
  SELECT relaybus_internal.lane_changed(h, l::smallint);  -- as a publish notes its lane
  INSERT INTO relaybus.events (id, type, payload, key, handlers)
  SELECT format('%s/%s/%s', h, l, p), 't', '{}', k, ARRAY[h] FROM generate_series(1, n) p;
  INSERT INTO relaybus.deliveries (handler, lane, position, event_id, key, available_at, created_at)
  SELECT h, l, p, format('%s/%s/%s', h, l, p), k, now() - interval '1 minute',
         now() - interval '1 minute'
    FROM generate_series(1, n) p;
$$;
-- The lane as a claim leaves it: held by (worker, holder) under epoch ep (its lease row), and
-- its progress the lane's next lane_progress row (seq = the newest + 1).
CREATE FUNCTION pg_temp.hold(h text, l int, ep bigint, flight bigint[],
                             retry bigint[] DEFAULT '{}', acked bigint DEFAULT 0,
                             w text DEFAULT 'w', hd text DEFAULT 'hx') RETURNS void
  LANGUAGE sql AS $$
  UPDATE relaybus.lanes
     SET lease_owner = w, lease_expires_at = now() + interval '1 hour', holder = hd,
         holder_pid = NULL, holder_started = NULL, epoch = ep
   WHERE handler = h AND lane = l;
  INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
  SELECT s.handler, s.lane, s.progress_seq + 1, acked, '{}', flight, retry
    FROM relaybus.lane_state s WHERE s.handler = h AND s.lane = l;
$$;
-- A claim of position p's exception row as a retry: the lane's next progress row.
CREATE FUNCTION pg_temp.retry(h text, l int, p bigint) RETURNS void LANGUAGE sql AS $$
  INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
  SELECT s.handler, s.lane, s.progress_seq + 1, s.acked_upto, s.done, s.in_flight, s.retrying || p
    FROM relaybus.lane_state s WHERE s.handler = h AND s.lane = l;
$$;
CREATE FUNCTION pg_temp.tok(h text, l int, ep bigint, p bigint, c int DEFAULT 0) RETURNS text
  LANGUAGE sql AS $$
  SELECT format('r3.%s.%s.%s.%s.%s.%s', l, ep, p, c, octet_length(h), h)
$$;
-- "acked_upto done in_flight retrying"
CREATE FUNCTION pg_temp.state(h text, l int) RETURNS text LANGUAGE sql AS $$
  SELECT format('%s %s %s %s', acked_upto, done, in_flight, retrying)
    FROM relaybus.lane_state WHERE handler = h AND lane = l
$$;
-- The lane's version: its lease row's (xmin, ctid) and its newest progress seq. A write of
-- any kind makes a new one: a lease write a new row version, a progress write a new row.
CREATE FUNCTION pg_temp.version(h text, l int) RETURNS text LANGUAGE sql AS $$
  SELECT l.xmin::text || l.ctid::text || ' seq ' || s.progress_seq
    FROM relaybus.lanes l JOIN relaybus.lane_state s USING (handler, lane)
   WHERE l.handler = h AND l.lane = version.l
$$;
-- "status attempts claims last_error" of position p's exception row
CREATE FUNCTION pg_temp.row_of(h text, l int, p bigint) RETURNS text LANGUAGE sql AS $$
  SELECT format('%s %s %s %s', status, attempts, claims, coalesce(last_error, '-'))
    FROM relaybus.exceptions WHERE handler = h AND lane = l AND position = p
$$;
CREATE FUNCTION pg_temp.delay(h text, l int, p bigint) RETURNS interval LANGUAGE sql AS $$
  SELECT available_at - updated_at FROM relaybus.exceptions
   WHERE handler = h AND lane = l AND position = p
$$;
-- The result of one call (a query of one value), or 'waited' when it had to wait longer than
-- lock_timeout for a lock.
CREATE FUNCTION pg_temp.or_wait(call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  EXECUTE call INTO result;
  RETURN result;
EXCEPTION WHEN lock_not_available THEN
  RETURN 'waited';
END
$$;
CREATE FUNCTION pg_temp.counter(n text) RETURNS bigint LANGUAGE sql AS $$
  SELECT value FROM relaybus.counters() WHERE name = n
$$;

SELECT relaybus.subscribe('oo', ARRAY['t']);
SELECT relaybus.subscribe('flaky', ARRAY['t'], 4, '50 ms', '150 ms');

------------------------------------------------------------------ out-of-order completion
SELECT pg_temp.put('oo', 5, 8);
SELECT pg_temp.hold('oo', 5, 1, '{1,2,3,4,5,6}');
SELECT pg_temp.counter('completed') AS completed_before \gset

SELECT ok(relaybus.complete(pg_temp.tok('oo', 5, 1, 3)), 'position 3 completes out of order');
SELECT is(pg_temp.state('oo', 5), '0 {3} {1,2,4,5,6} {}',
          'the cursor stays below 1 and 2; 3 is done above it and out of flight');
SELECT ok(relaybus.complete(pg_temp.tok('oo', 5, 1, 1)), 'position 1 completes');
SELECT is(pg_temp.state('oo', 5), '1 {3} {2,4,5,6} {}', 'the cursor moves over 1 only: 2 is still running');
SELECT ok(relaybus.complete(pg_temp.tok('oo', 5, 1, 2)), 'position 2 completes');
SELECT is(pg_temp.state('oo', 5), '3 {} {4,5,6} {}',
          'the cursor moves over 2 and the done 3, contiguous finished positions');
SELECT is(relaybus.complete_many(ARRAY[pg_temp.tok('oo', 5, 1, 6), pg_temp.tok('oo', 5, 1, 4)]), 2,
          'complete_many of 6 and 4 completes two');
SELECT is(pg_temp.state('oo', 5), '4 {6} {5} {}', 'the cursor stops at the gap left by 5');
SELECT is(pg_temp.counter('completed') - :completed_before, 5::bigint,
          'the completed counter moved by the five completions');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries WHERE handler = 'oo'), 8,
          'a completion deletes no delivery row: the lane row says what finished');

------------------------------------------------------------------ repeated and stale completions
SELECT pg_temp.version('oo', 5) AS v_oo \gset
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 5, 1, 3)), 'completing 3 again returns false');
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 5, 1, 1)),
          'completing a position below the cursor again returns false');
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 5, 1, 7)),
          'a position that was never picked (a forged token) completes nothing');
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 6, 1, 5)),
          'a token naming another lane completes nothing');
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 5, 1, 5, 1)),
          'a window pick''s token carries claims 0: claims 1 completes nothing');
SELECT is(relaybus.complete_many(ARRAY[pg_temp.tok('oo', 5, 1, 1), pg_temp.tok('oo', 5, 1, 2),
                                       pg_temp.tok('oo', 5, 1, 4), pg_temp.tok('oo', 5, 1, 6)]), 0,
          'complete_many of completed positions completes nothing');
SELECT is(pg_temp.version('oo', 5), :'v_oo',
          'none of them wrote the lane: same lease row version (xmin, ctid), same progress seq');
SELECT is(pg_temp.state('oo', 5), '4 {6} {5} {}', 'and the lane''s progress is as it was');
SELECT is(pg_temp.counter('completed') - :completed_before, 5::bigint,
          'the completed counter did not move');
SELECT ok(relaybus.complete(pg_temp.tok('oo', 5, 1, 5)), 'the last one in flight completes');
SELECT is(pg_temp.state('oo', 5), '6 {} {} {}', 'the cursor passes 5 and 6');
SELECT is(pg_temp.version('oo', 5),
          split_part(:'v_oo', ' seq ', 1) || ' seq ' || (split_part(:'v_oo', ' seq ', 2)::bigint + 1),
          'a completion that took effect wrote one new progress row (seq + 1), not the lease row');

------------------------------------------------------------------ the epoch fence
-- Lane 9 was taken over: epoch 2 now, 1 and 2 in flight again for the new holder.
SELECT pg_temp.put('oo', 9, 3);
SELECT pg_temp.hold('oo', 9, 2, '{1,2}', '{}', 0, 'w-new', 'hy');
SELECT pg_temp.version('oo', 9) AS v_fence \gset
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 9, 1, 1)), 'the old epoch''s complete returns false');
SELECT is(relaybus.complete_many(ARRAY[pg_temp.tok('oo', 9, 1, 1), pg_temp.tok('oo', 9, 1, 2)]), 0,
          'the old epoch''s complete_many completes nothing');
SELECT is(relaybus.fail(pg_temp.tok('oo', 9, 1, 1), 'stale'), 'lost', 'the old epoch''s fail is lost');
SELECT is(relaybus.fail(pg_temp.tok('oo', 9, 1, 1), 'stale', now() + interval '1 day'), 'lost',
          'with a retry_at too');
SELECT ok(NOT relaybus.bury(pg_temp.tok('oo', 9, 1, 2), 'stale'), 'the old epoch''s bury returns false');
SELECT ok(NOT relaybus.release(pg_temp.tok('oo', 9, 1, 2)), 'the old epoch''s release returns false');
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 9, 3, 1)), 'a later epoch than the lane''s is no better');
SELECT is(pg_temp.version('oo', 9), :'v_fence', 'the stale calls wrote no lease row version and no progress row');
SELECT is(pg_temp.state('oo', 9), '0 {} {1,2} {}', 'and left the lane''s progress alone');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE handler = 'oo'), 0,
          'and wrote no exception row');
SELECT ok(relaybus.complete(pg_temp.tok('oo', 9, 2, 1)), 'the current epoch''s token completes');
-- Fencing is about the lane changing hands, not the clock.
UPDATE relaybus.lanes SET lease_expires_at = now() - interval '1 minute' WHERE handler = 'oo' AND lane = 9;
SELECT ok(relaybus.complete(pg_temp.tok('oo', 9, 2, 2)),
          'a completion after the lease expired, before any takeover, still completes');

------------------------------------------------------------------ fail: backoff, dead at max_attempts
-- flaky: max_attempts 4, backoff 50 ms doubling, capped at 150 ms.
SELECT pg_temp.put('flaky', 3, 4);
SELECT pg_temp.hold('flaky', 3, 1, '{1,2}');
SELECT pg_temp.counter('failed') AS failed_before, pg_temp.counter('attempts_charged') AS charged_before,
       pg_temp.counter('dead_lettered') AS dead_before \gset

SELECT is(relaybus.fail(pg_temp.tok('flaky', 3, 1, 1), 'boom 1'), 'retry', 'a window pick''s first failure: retry');
SELECT is(pg_temp.row_of('flaky', 3, 1), 'pending 1 1 boom 1',
          'it moved to an exception row: pending, 1 attempt, claims 1, the error');
SELECT is(pg_temp.delay('flaky', 3, 1), interval '50 ms', 'due after backoff_base');
SELECT results_eq($$SELECT event_id, created_at FROM relaybus.exceptions WHERE handler = 'flaky' AND position = 1$$,
                  $$SELECT event_id, created_at FROM relaybus.deliveries WHERE handler = 'flaky' AND lane = 3 AND position = 1$$,
                  'the row carries its delivery''s event id and creation time');
SELECT is(pg_temp.state('flaky', 3), '1 {} {2} {}', 'the position is finished: the cursor passes it, 2 still runs');
SELECT is(relaybus.fail(pg_temp.tok('flaky', 3, 1, 1), 'again'), 'lost',
          'the window token of the failed attempt no longer holds');

SELECT pg_temp.retry('flaky', 3, 1);
SELECT is(relaybus.fail(pg_temp.tok('flaky', 3, 1, 1, 0), 'stale'), 'lost',
          'retried under the same epoch, the window pick''s token (claims 0) still does not hold');
SELECT is(relaybus.fail(pg_temp.tok('flaky', 3, 1, 1, 1), 'boom 2'), 'retry', 'the retry fails: retry');
SELECT is(pg_temp.row_of('flaky', 3, 1), 'pending 2 2 boom 2', 'attempts 2, claims 2');
SELECT is(pg_temp.delay('flaky', 3, 1), interval '100 ms', 'backoff doubled (base * 2)');
SELECT is(pg_temp.state('flaky', 3), '1 {} {2} {}', 'the retry left retrying; the progress is unchanged');

SELECT pg_temp.retry('flaky', 3, 1);
SELECT is(relaybus.fail(pg_temp.tok('flaky', 3, 1, 1, 2), 'boom 3'), 'retry', 'third failure: retry');
SELECT is(pg_temp.delay('flaky', 3, 1), interval '150 ms', 'base * 4 = 200 ms, capped at backoff_max 150 ms');
SELECT is(relaybus.fail(pg_temp.tok('flaky', 3, 1, 1, 2), 'again'), 'lost',
          'the token of the third attempt no longer holds');

SELECT pg_temp.retry('flaky', 3, 1);
SELECT is(relaybus.fail(pg_temp.tok('flaky', 3, 1, 1, 3), 'boom 4'), 'dead',
          'the failure that reaches max_attempts dead-letters');
SELECT is(pg_temp.row_of('flaky', 3, 1), 'dead 4 4 boom 4', 'dead: 4 attempts, the last error kept');
SELECT is(pg_temp.state('flaky', 3), '1 {} {2} {}', 'and it left retrying');
SELECT ok(NOT relaybus.complete(pg_temp.tok('flaky', 3, 1, 1, 3)),
          'the token that dead-lettered it cannot complete it');
SELECT is(pg_temp.row_of('flaky', 3, 1), 'dead 4 4 boom 4', 'still dead');
SELECT is(pg_temp.counter('failed') - :failed_before, 4::bigint, 'four fail calls counted');
SELECT is(pg_temp.counter('attempts_charged') - :charged_before, 4::bigint, 'four attempts charged');
SELECT is(pg_temp.counter('dead_lettered') - :dead_before, 1::bigint, 'one dead letter counted');

-- Budget 1: the first failure of a window pick is fatal.
SELECT relaybus.subscribe('once', ARRAY['t'], 1);
SELECT pg_temp.put('once', 0, 1);
SELECT pg_temp.hold('once', 0, 7, '{1}');
SELECT is(relaybus.fail(pg_temp.tok('once', 0, 7, 1)), 'dead', 'max_attempts 1: a window pick''s first failure is dead');
SELECT is(pg_temp.row_of('once', 0, 1), 'dead 1 1 -', 'dead with 1 attempt, no error given');

------------------------------------------------------------------ retry_at
SELECT is(relaybus.fail(pg_temp.tok('flaky', 3, 1, 2), 'later', '2090-01-01 00:00:00+00'), 'retry',
          'fail with retry_at: retry');
SELECT row_eq($$SELECT attempts, available_at FROM relaybus.exceptions WHERE handler = 'flaky' AND lane = 3 AND position = 2$$,
              ROW(1, '2090-01-01 00:00:00+00'::timestamptz), 'retry_at is the new due time exactly, one attempt charged');
SELECT pg_temp.retry('flaky', 3, 2);
SELECT is(relaybus.fail(pg_temp.tok('flaky', 3, 1, 2, 1), 'sooner', '2080-06-01 00:00:00+00'), 'retry',
          'a retry failed with retry_at: retry');
SELECT row_eq($$SELECT attempts, claims, available_at FROM relaybus.exceptions WHERE handler = 'flaky' AND lane = 3 AND position = 2$$,
              ROW(2, 2, '2080-06-01 00:00:00+00'::timestamptz), 'a retry''s row takes the given time too');
SELECT throws_ok(format('SELECT relaybus.fail(%L, NULL, %L)', pg_temp.tok('flaky', 3, 1, 2, 2), 'infinity'),
                 '22023', NULL, 'an infinite retry_at is refused');
SELECT is(pg_temp.row_of('flaky', 3, 2), 'pending 2 2 sooner', 'and the refused call wrote nothing');

------------------------------------------------------------------ bury
SELECT pg_temp.put('flaky', 4, 2);
SELECT pg_temp.hold('flaky', 4, 3, '{1,2}');
SELECT ok(relaybus.bury(pg_temp.tok('flaky', 4, 3, 2), 'poison'), 'bury of a window pick returns true');
SELECT is(pg_temp.row_of('flaky', 4, 2), 'dead 1 1 poison', 'buried: dead at once, one attempt charged');
SELECT is(pg_temp.state('flaky', 4), '0 {2} {1} {}', 'its position is finished (done above the cursor)');
SELECT ok(NOT relaybus.bury(pg_temp.tok('flaky', 4, 3, 2), 'again'), 'burying it again returns false');
SELECT is(relaybus.fail(pg_temp.tok('flaky', 4, 3, 1)), 'retry', 'position 1 fails');
SELECT pg_temp.retry('flaky', 4, 1);
SELECT ok(relaybus.bury(pg_temp.tok('flaky', 4, 3, 1, 1), 'poison too'), 'bury of a retry returns true');
SELECT is(pg_temp.row_of('flaky', 4, 1), 'dead 2 2 poison too', 'a buried retry: dead, attempts 2, claims 2');
SELECT is(pg_temp.state('flaky', 4), '2 {} {} {}', 'the lane runs nothing and the cursor passed both');

------------------------------------------------------------------ release
SELECT pg_temp.put('oo', 12, 3);
SELECT pg_temp.hold('oo', 12, 4, '{1,2,3}');
SELECT pg_temp.counter('attempts_charged') AS charged_before \gset
SELECT ok(relaybus.release(pg_temp.tok('oo', 12, 4, 2)), 'release of a window pick returns true');
SELECT is(pg_temp.row_of('oo', 12, 2), 'pending 0 1 -', 'released: pending, no attempt charged, claims 1');
SELECT ok((SELECT available_at <= now() FROM relaybus.exceptions WHERE handler = 'oo' AND lane = 12 AND position = 2),
          'and due at once');
SELECT is(pg_temp.state('oo', 12), '0 {2} {1,3} {}', 'its position left the window: finished, out of flight');
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 12, 4, 2)), 'the released attempt''s token cannot complete');
SELECT ok(NOT relaybus.release(pg_temp.tok('oo', 12, 4, 2)), 'nor release again');
SELECT is(relaybus.fail(pg_temp.tok('oo', 12, 4, 2)), 'lost', 'nor fail');
SELECT pg_temp.retry('oo', 12, 2);
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 12, 4, 2)),
          'claimed again under the same epoch, the released attempt''s token still completes nothing');
SELECT ok(relaybus.release(pg_temp.tok('oo', 12, 4, 2, 1)), 'release of the retry returns true');
SELECT is(pg_temp.row_of('oo', 12, 2), 'pending 0 2 -', 'still no attempt charged; claims 2');
SELECT ok((SELECT available_at <= now() FROM relaybus.exceptions WHERE handler = 'oo' AND lane = 12 AND position = 2),
          'still due at once');
SELECT is(pg_temp.counter('attempts_charged') - :charged_before, 0::bigint, 'releases charge no attempt');
SELECT pg_temp.retry('oo', 12, 2);
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 12, 4, 2, 1)), 'the released retry''s token does not hold');

------------------------------------------------------------------ completing a retry
SET relaybus.completion_history = on;
SELECT pg_temp.version('oo', 12) AS v_retry \gset
SELECT ok(NOT relaybus.complete(pg_temp.tok('oo', 12, 4, 2, 3)), 'a retry token with claims ahead of its row does not hold');
SELECT is(pg_temp.version('oo', 12), :'v_retry', 'and wrote nothing');
SELECT ok(relaybus.complete(pg_temp.tok('oo', 12, 4, 2, 2)), 'the retry''s current token completes');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE handler = 'oo' AND lane = 12), 0,
          'its exception row is gone');
SELECT is(pg_temp.state('oo', 12), '0 {2} {1,3} {}', 'it left retrying; the window is untouched');
SELECT is(relaybus.complete_many(ARRAY[pg_temp.tok('oo', 12, 4, 3), pg_temp.tok('oo', 12, 4, 1),
                                       pg_temp.tok('oo', 12, 4, 2, 2)]), 2,
          'complete_many: the two window picks complete, the completed retry does not again');
SELECT is(pg_temp.state('oo', 12), '3 {} {} {}', 'the lane is finished up to 3');
SELECT bag_eq($$SELECT event_id, attempts, outcome FROM relaybus.completions WHERE handler = 'oo' AND event_id LIKE 'oo/12/%'$$,
              $$VALUES ('oo/12/2', 1, 'completed'), ('oo/12/1', 1, 'completed'), ('oo/12/3', 1, 'completed')$$,
              'history: one row per completion, with the attempt that completed it');
-- A retry with charged attempts: the history counts the completing attempt too.
SELECT pg_temp.put('flaky', 5, 1);
SELECT pg_temp.hold('flaky', 5, 1, '{1}');
SELECT is(relaybus.fail(pg_temp.tok('flaky', 5, 1, 1), 'x', now()), 'retry', 'a window pick fails, due now');
SELECT pg_temp.retry('flaky', 5, 1);
SELECT ok(relaybus.complete(pg_temp.tok('flaky', 5, 1, 1, 1)), 'its retry completes');
SELECT results_eq($$SELECT attempts FROM relaybus.completions WHERE event_id = 'flaky/5/1'$$, $$VALUES (2)$$,
                  'history: one failed attempt, then the completing one');
RESET relaybus.completion_history;

------------------------------------------------------------------ complete_many across lanes
-- 12 lanes x 3 positions taken over (epoch 2); the previous epoch's tokens, a duplicate and
-- a forged position mixed in, in no lane order.
SELECT relaybus.subscribe('many', ARRAY['t']);
SELECT pg_temp.put('many', l, 4) FROM generate_series(100, 111) l;
SELECT pg_temp.hold('many', l, 2, '{1,2,3}') FROM generate_series(100, 111) l;
SELECT pg_temp.hold('many', 120, 2, '{1}');
SELECT pg_temp.put('many', 120, 1);
SELECT pg_temp.version('many', 120) AS v_many \gset
CREATE TEMP TABLE many_tokens AS
  SELECT pg_temp.tok('many', l, 2, p) AS t FROM generate_series(100, 111) l, generate_series(1, 3) p
  UNION ALL SELECT pg_temp.tok('many', l, 1, p) FROM generate_series(100, 111) l, generate_series(1, 3) p
  UNION ALL SELECT pg_temp.tok('many', 107, 2, 2)
  UNION ALL SELECT pg_temp.tok('many', 104, 2, 4)
  UNION ALL SELECT pg_temp.tok('many', 120, 1, 1);
SELECT is(relaybus.complete_many(ARRAY(SELECT t FROM many_tokens ORDER BY md5(t))), 36,
          'the current tokens complete once each; stale, duplicate and forged ones add nothing');
SELECT is((SELECT count(*)::int FROM relaybus.lane_state WHERE handler = 'many' AND lane BETWEEN 100 AND 111
            AND acked_upto = 3 AND done = '{}' AND in_flight = '{}'), 12,
          'each of the 12 lanes moved its cursor to 3');
SELECT is(pg_temp.version('many', 120), :'v_many', 'the lane with only a stale token was not written');
SELECT is(relaybus.complete_many(ARRAY(SELECT t FROM many_tokens)), 0, 'the same batch again completes nothing');
SELECT is(relaybus.complete_many('{}'), 0, 'an empty batch completes nothing');

------------------------------------------------------------------ effectively once
SELECT pg_temp.put('oo', 20, 2);
SELECT pg_temp.hold('oo', 20, 1, '{1,2}');
SELECT pg_temp.tok('oo', 20, 1, 1) AS t1, pg_temp.tok('oo', 20, 1, 2) AS t2 \gset
SET client_min_messages = warning;
DROP TABLE IF EXISTS public.rbtest_ends_effects;
RESET client_min_messages;
CREATE TABLE public.rbtest_ends_effects (event_id text NOT NULL);
SELECT rb_connect('a');
SELECT rb_connect('b');
SELECT pid AS b_pid FROM dblink('b', 'SELECT pg_backend_pid()') AS t(pid int) \gset

-- The handler's transaction rolls back: nothing of it stays, the position is still in flight.
SELECT dblink_exec('a', 'BEGIN');
SELECT dblink_exec('a', $$INSERT INTO public.rbtest_ends_effects VALUES ('oo/20/1')$$);
SELECT ok((SELECT b FROM dblink('a', format('SELECT relaybus.complete(%L)', :'t1')) AS t(b boolean)),
          'inside the handler''s transaction complete returns true');
SELECT dblink_exec('a', 'ROLLBACK');
SELECT is(pg_temp.state('oo', 20), '0 {} {1,2} {}', 'rolled back: position 1 is still in flight');
SELECT is((SELECT count(*)::int FROM public.rbtest_ends_effects), 0, 'and the side effect is gone with it');

-- Committed: the side effect and the completion together; a concurrent fail of the same
-- attempt waits for the transaction and then finds the attempt over.
SELECT dblink_exec('a', 'BEGIN');
SELECT dblink_exec('a', $$INSERT INTO public.rbtest_ends_effects VALUES ('oo/20/1')$$);
SELECT ok((SELECT b FROM dblink('a', format('SELECT relaybus.complete(%L)', :'t1')) AS t(b boolean)),
          'the handler completes inside its transaction');
SET lock_timeout = '300ms';
SELECT is(pg_temp.or_wait(format('SELECT relaybus.complete(%L)', pg_temp.tok('oo', 20, 0, 1))), 'false',
          'meanwhile a stale token''s complete returns at once: it locks nothing, so it waits for nothing');
SELECT is(pg_temp.or_wait(format('SELECT relaybus.fail(%L)', pg_temp.tok('oo', 20, 0, 1))), 'lost',
          'so does its fail');
SELECT is(pg_temp.or_wait(format('SELECT relaybus.complete(%L)', :'t2')), 'waited',
          'meanwhile another completion of the lane waits for the open transaction''s lane lock');
RESET lock_timeout;
SELECT dblink_send_query('b', format('SELECT relaybus.fail(%L, %L)', :'t1', 'from b'));
SELECT ok(rb_waits_for_lock(:b_pid), 'a fail of the same attempt waits for the completing transaction');
SELECT dblink_exec('a', 'COMMIT');
SELECT is((SELECT r FROM dblink_get_result('b') AS t(r text)), 'lost',
          'once it committed, the fail finds the attempt completed: lost');
SELECT count(*) FROM dblink_get_result('b') AS t(r text);
SELECT is((SELECT count(*)::int FROM public.rbtest_ends_effects), 1, 'one side effect');
SELECT is(pg_temp.state('oo', 20), '1 {} {2} {}', 'and the completion: the cursor passed 1');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE handler = 'oo' AND lane = 20), 0,
          'the waiting fail wrote no exception row');

-- The other way round: the completing transaction rolls back, the waiting fail goes ahead.
SELECT dblink_exec('a', 'BEGIN');
SELECT ok((SELECT b FROM dblink('a', format('SELECT relaybus.complete(%L)', :'t2')) AS t(b boolean)),
          'position 2 is completed inside a transaction');
SELECT dblink_send_query('b', format('SELECT relaybus.fail(%L, %L)', :'t2', 'from b'));
SELECT ok(rb_waits_for_lock(:b_pid), 'its fail waits');
SELECT dblink_exec('a', 'ROLLBACK');
SELECT is((SELECT r FROM dblink_get_result('b') AS t(r text)), 'retry',
          'the completion rolled back, so the fail charges the attempt');
SELECT count(*) FROM dblink_get_result('b') AS t(r text);
SELECT is(pg_temp.row_of('oo', 20, 2), 'pending 1 1 from b', 'exactly one outcome: the failure''s');
SELECT dblink_disconnect('a');
SELECT dblink_disconnect('b');
DROP TABLE public.rbtest_ends_effects;

------------------------------------------------------------------ relinquish
SELECT relaybus.subscribe('rq', ARRAY['t']);
SELECT pg_temp.put('rq', l, 3) FROM generate_series(1, 8) l;
-- Worker rw's lanes (holder hx unless said otherwise).
SELECT pg_temp.hold('rq', 1, 1, '{}', '{}', 0, 'rw');               -- idle
SELECT pg_temp.hold('rq', 2, 1, '{3}', '{}', 2, 'rw');              -- a window pick running
SELECT pg_temp.hold('rq', 3, 1, '{}', '{1}', 3, 'rw');              -- a retry running
SELECT pg_temp.hold('rq', 4, 1, '{1,2}', '{}', 3, 'rw');            -- stale entries: finished
SELECT pg_temp.hold('rq', 5, 1, '{}', '{}', 0, 'rw', 'other');      -- another holder's
SELECT pg_temp.hold('rq', 6, 1, '{}', '{}', 0, 'rw', NULL);         -- bound to a backend
SELECT pg_temp.hold('rq', 7, 1, '{}', '{}', 0, 'rw2');              -- another worker's
SELECT is(relaybus.relinquish('rw', 'hx'), 2, 'relinquish(rw, hx) hands back the two lanes that run nothing');
SELECT results_eq($$SELECT lane::int, lease_owner FROM relaybus.lanes WHERE handler = 'rq' AND lane BETWEEN 1 AND 7 ORDER BY lane$$,
                  $$VALUES (1, NULL::text), (2, 'rw'), (3, 'rw'), (4, NULL), (5, 'rw'), (6, 'rw'), (7, 'rw2')$$,
                  'the idle lane and the one whose list held only finished positions; not a running one, nor another holder''s or worker''s');
SELECT results_eq($$SELECT lease_expires_at, holder, holder_pid, in_flight, retrying FROM relaybus.lane_state WHERE handler = 'rq' AND lane = 4$$,
                  $$VALUES (NULL::timestamptz, NULL::text, NULL::int, '{}'::bigint[], '{}'::bigint[])$$,
                  'a relinquished lane keeps no lease, holder or list');
SELECT is(pg_temp.state('rq', 2), '2 {} {3} {}', 'a running lane is left exactly as it was');
SELECT ok(relaybus.complete(pg_temp.tok('rq', 2, 1, 3)), 'its token still completes');
SELECT is(relaybus.relinquish('rw', 'hx'), 1, 'once it ran nothing, the next relinquish hands it back');
SELECT is(relaybus.relinquish('rw'), 1, 'relinquish(rw) without a holder: only the backend-bound lane');
SELECT is((SELECT lease_owner FROM relaybus.lanes WHERE handler = 'rq' AND lane = 5), 'rw',
          'never another holder''s lane');
SELECT is(relaybus.relinquish('rw', 'other'), 1, 'its own holder hands it back');
SELECT is(relaybus.relinquish('rw', 'hx'), 0, 'the lane with a retry running stays');
SELECT throws_ok($$SELECT relaybus.relinquish(NULL)$$, '22004', NULL, 'relinquish(NULL) raises 22004');
SELECT throws_ok($$SELECT relaybus.relinquish('rw', '')$$, '22023', NULL, 'an empty holder raises 22023');

------------------------------------------------------------------ finish_position (cancel's)
SELECT pg_temp.put('oo', 30, 70);
SELECT pg_temp.hold('oo', 30, 1, '{2}', '{}', 0);
SELECT pg_temp.version('oo', 30) AS v_finish \gset
SELECT ok(NOT relaybus_internal.finish_position('oo', 30::smallint, 2), 'a position in flight is not finished');
SELECT ok(NOT relaybus_internal.finish_position('oo', 30::smallint, 66), 'a position beyond the window is not finished');
SELECT pg_temp.put('oo', 31, 3);
SELECT ok(NOT relaybus_internal.finish_position('oo', 31::smallint, 5),
          'a position in the window without a delivery (yet) is not finished');
SELECT is(pg_temp.state('oo', 31), '0 {} {} {}', 'its lane is untouched');
SELECT is(pg_temp.version('oo', 30), :'v_finish', 'none of them wrote the lane');
SELECT ok(relaybus_internal.finish_position('oo', 30::smallint, 3), 'a waiting position in the window is finished');
SELECT is(pg_temp.state('oo', 30), '0 {3} {2} {}', 'it is done above the cursor');
SELECT ok(NOT relaybus_internal.finish_position('oo', 30::smallint, 3), 'finishing it again does nothing');
SELECT ok(relaybus_internal.finish_position('oo', 30::smallint, 1), 'position 1 is finished');
SELECT is(pg_temp.state('oo', 30), '1 {3} {2} {}', 'the cursor moves over 1, not over the running 2');

------------------------------------------------------------------ bad input
SELECT pg_temp.put('oo', 40, 1);
SELECT pg_temp.hold('oo', 40, 1, '{1}');
SELECT throws_ok($$SELECT relaybus.complete('not-a-token')$$, '22023', NULL, 'a malformed token raises 22023');
SELECT throws_ok($$SELECT relaybus.complete('r1.40.1.0.2.oooo/40/1')$$, '22023', NULL,
                 'a token of relaybus 0.2 raises 22023');
SELECT throws_ok($$SELECT relaybus.fail('r3.40.1.0.0.2.oo')$$, '22023', NULL, 'position 0 raises 22023');
SELECT throws_ok($$SELECT relaybus.bury('r3.256.1.1.0.2.oo')$$, '22023', NULL, 'lane 256 raises 22023');
SELECT throws_ok($$SELECT relaybus.release('r3.40.1.1.0.3.oo')$$, '22023', NULL,
                 'a handler length that does not match raises 22023');
SELECT throws_ok($$SELECT relaybus.complete(NULL)$$, '22004', NULL, 'a NULL token raises 22004');
SELECT throws_ok($$SELECT relaybus.complete_many(NULL)$$, '22004', NULL, 'complete_many(NULL) raises 22004');
SELECT throws_ok($$SELECT relaybus.complete_many(ARRAY['r3.40.1.1.0.2.oo', NULL])$$, '22004', NULL,
                 'a NULL among the tokens raises 22004');
SELECT throws_ok($$SELECT relaybus.complete_many(ARRAY['r3.40.1.1.0.2.oo', 'r3.40.1.x.0.2.oo'])$$, '22023', NULL,
                 'one malformed token fails the whole batch');
SELECT is(pg_temp.state('oo', 40), '0 {} {1} {}', 'so its good token completed nothing');
SELECT ok(relaybus.complete('r3.40.1.1.0.2.oo'), 'which completes on its own');

SELECT * FROM finish();
