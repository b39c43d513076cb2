-- 0.3.0's claim and takeover on the real store (docs/design.md, "0.3.0: the store"): what
-- each guarantee means in lanes, positions and exception rows. Per-key order (a key's next
-- delivery is not handed out while an earlier one is in flight or waits in a pending
-- exception row); at most 32 in flight per lane and one delivery per key per batch; a
-- delivery not yet due deferred into an exception row and picked from it once due; a key
-- parked behind its exception row; due exception rows picked before the window; takeover
-- charges (attempts, dead at max_attempts, the old epoch's tokens no longer hold) by a
-- claim and by take_over_expired; holders and incarnations as in 0.2; a paused handler
-- skipped; oldest work first across lanes; idle lanes handed back; tokens that decode to
-- what was claimed. Argument checks as 0.2.1's.
--
-- Deliveries are inserted directly (pg_temp.put, at the next position of their lane), so
-- that a test sets their lanes, positions and due times (publish takes a due time in the
-- past for now).
SELECT rb_reset();
SELECT plan(85);

-- A delivery of event `id` (made if new) to handler `h`, at the next position of its lane
-- (lane_of its key, or of its id), due at `due`. Returns the position.
-- A delivery written by hand, as a publish writes it, and noted as a change of its lane as a
-- publish notes it (lane_changes.hpp): a claim passes over a lane it found idle until then.
CREATE FUNCTION pg_temp.put(h text, id text, k text DEFAULT NULL, due timestamptz DEFAULT now())
  RETURNS bigint LANGUAGE sql AS $$
  SELECT relaybus_internal.lane_changed($1, relaybus.lane_of(coalesce($3, $2)));
  INSERT INTO relaybus.events (id, type, key, payload, handlers)
  VALUES ($2, 'thing.happened', $3, jsonb_build_object('id', $2), ARRAY[$1])
  ON CONFLICT (id) DO UPDATE SET handlers = relaybus.events.handlers || EXCLUDED.handlers;
  INSERT INTO relaybus.deliveries (handler, lane, position, event_id, key, available_at, created_at)
  SELECT $1, relaybus.lane_of(coalesce($3, $2)), coalesce(max(d.position), 0) + 1, $2, $3, $4, now()
    FROM relaybus.deliveries d WHERE d.handler = $1 AND d.lane = relaybus.lane_of(coalesce($3, $2))
  RETURNING position;
$$;

-- A token's fields: r3.<lane>.<epoch>.<position>.<claims>.<handler length>.<handler>, then
-- .<publish time> (microseconds since 1970) when the claim knew it.
CREATE FUNCTION pg_temp.tok(token text)
  RETURNS TABLE(lane smallint, epoch bigint, lane_position bigint, claims int, handler text,
                published_us bigint)
  LANGUAGE sql AS $$
  SELECT m[1]::smallint, m[2]::bigint, m[3]::bigint, m[4]::int, left(m[6], m[5]::int),
         nullif(substr(m[6], m[5]::int + 2), '')::bigint
    FROM regexp_match($1, '^r3\.(\d+)\.(\d+)\.(\d+)\.(\d+)\.(\d+)\.(.*)$') m
   WHERE length(m[6]) = m[5]::int OR substr(m[6], m[5]::int + 1) ~ '^\.[1-9][0-9]*$'
$$;

-- Whether a token holds (the contract's fence): its lane has its epoch and lists its
-- position in in_flight (a window pick, claims 0), or in retrying with the exception row's
-- claims equal to the token's.
CREATE FUNCTION pg_temp.holds(token text) RETURNS boolean LANGUAGE sql AS $$
  SELECT coalesce((
    SELECT l.epoch = t.epoch AND (
             (t.lane_position = ANY (l.in_flight) AND t.claims = 0)
          OR (t.lane_position = ANY (l.retrying) AND EXISTS (
               SELECT 1 FROM relaybus.exceptions x
                WHERE x.handler = l.handler AND x.lane = l.lane AND x.position = t.lane_position
                  AND x.status = 'pending' AND x.claims = t.claims)))
      FROM pg_temp.tok($1) t JOIN relaybus.lane_state l ON l.handler = t.handler AND l.lane = t.lane), false)
$$;

-- A completion that must take effect (relaybus.complete).
CREATE FUNCTION pg_temp.complete(token text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF NOT relaybus.complete(token) THEN
    RAISE EXCEPTION 'complete(%) did not take effect', token;
  END IF;
END
$$;

-- n event ids starting with `prefix` whose lane is `lane`.
CREATE FUNCTION pg_temp.ids_in_lane(prefix text, lane int, n int) RETURNS SETOF text
  LANGUAGE sql AS $$
  SELECT id FROM (SELECT $1 || g AS id, g FROM generate_series(1, 200000) g) s
   WHERE relaybus.lane_of(s.id) = $2 ORDER BY s.g LIMIT $3
$$;

CREATE TEMP TABLE mark (name text PRIMARY KEY, value bigint);
CREATE FUNCTION pg_temp.mark() RETURNS void LANGUAGE sql AS $$
  DELETE FROM mark; INSERT INTO mark SELECT c.name, c.value FROM relaybus.counters() c;
$$;
CREATE FUNCTION pg_temp.moved(counter text) RETURNS bigint LANGUAGE sql AS $$
  SELECT c.value - m.value FROM relaybus.counters() c JOIN mark m USING (name) WHERE c.name = $1
$$;

--------------------------------------------------------------------------------
-- Arguments: as 0.2.1's claim, and nothing is written.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('h', ARRAY['thing.happened']);
SELECT pg_temp.put('h', 'bad-1');
SELECT throws_ok($$SELECT * FROM relaybus.claim(NULL)$$, '22004', NULL, 'NULL worker -> 22004');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', NULL)$$, '22004', NULL, 'NULL batch_size -> 22004');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 0)$$, '22023', NULL, 'batch_size 0 -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '0 seconds')$$, '22023', NULL, 'zero lease -> 22023');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['nobody'])$$, '42704',
                 'handler "nobody" is not subscribed', 'unknown handler -> 42704');
SELECT throws_ok($$SELECT * FROM relaybus.claim('w', 10, '30 seconds', NULL, '')$$, '22023', NULL,
                 'empty holder -> 22023');
SELECT is((SELECT count(*)::int FROM relaybus.lane_state WHERE lease_owner IS NOT NULL OR epoch <> 0 OR progress_seq <> 0), 0,
          'a refused claim wrote no lane');

--------------------------------------------------------------------------------
-- Window picks and their tokens.
--------------------------------------------------------------------------------
SELECT rb_reset();
SELECT relaybus.subscribe('h', ARRAY['thing.happened']);
SELECT pg_temp.put('h', 'a' || n) FROM generate_series(1, 3) n;
CREATE TEMP TABLE c1 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['h']);
SELECT results_eq($$SELECT event_id, handler, type, key, payload, attempts FROM c1 ORDER BY event_id$$,
                  $$VALUES ('a1', 'h', 'thing.happened', NULL::text, '{"id": "a1"}'::jsonb, 0),
                           ('a2', 'h', 'thing.happened', NULL, '{"id": "a2"}', 0),
                           ('a3', 'h', 'thing.happened', NULL, '{"id": "a3"}', 0)$$,
                  'the due deliveries, with their events');
SELECT is((SELECT count(*)::int FROM c1 JOIN relaybus.events e ON e.id = c1.event_id
            WHERE c1.published_at = e.published_at), 3, 'published_at is the event''s');
SELECT is((SELECT count(*)::int FROM c1 CROSS JOIN LATERAL pg_temp.tok(c1.lease_token) t
             JOIN relaybus.deliveries d ON d.handler = t.handler AND d.lane = t.lane
                                       AND d.position = t.lane_position
             JOIN relaybus.lanes l ON l.handler = t.handler AND l.lane = t.lane
            WHERE d.event_id = c1.event_id AND t.handler = c1.handler AND t.claims = 0
              AND t.epoch = l.epoch AND l.epoch = 1),
          3, 'each token decodes to its delivery''s lane and position, claims 0, the lane''s new epoch');
SELECT ok((SELECT bool_and(pg_temp.holds(lease_token)) FROM c1), 'every token holds');
SELECT is((SELECT count(*)::int FROM relaybus.lane_state l JOIN relaybus.deliveries d
             ON d.handler = l.handler AND d.lane = l.lane AND d.position = ANY (l.in_flight)
            WHERE l.lease_owner = 'w' AND l.lease_expires_at > now() AND l.acked_upto = 0), 3,
          'their lanes are leased to w and list their positions in flight');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['h'])), 0,
          'nothing is handed out twice');
SELECT is((SELECT count(*)::int FROM relaybus.claim('other', 10, '30 seconds', ARRAY['h'])), 0,
          'nor to another worker');
SELECT is((SELECT count(*)::int FROM relaybus.deliveries), 3, 'a claim writes no delivery row');

--------------------------------------------------------------------------------
-- At most 32 in flight per lane: a batch spreads over other lanes.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('cap', ARRAY['thing.happened']);
SELECT relaybus.lane_of('cap-x') AS full_lane, (relaybus.lane_of('cap-x') + 1) % 256 AS other_lane \gset
SELECT count(pg_temp.put('cap', id)) FROM pg_temp.ids_in_lane('cap-a', :full_lane, 40) id;
SELECT count(pg_temp.put('cap', id)) FROM pg_temp.ids_in_lane('cap-b', :other_lane, 10) id;
CREATE TEMP TABLE c2 AS SELECT * FROM relaybus.claim('cw', 100, '30 seconds', ARRAY['cap']);
SELECT is((SELECT count(*)::int FROM c2 WHERE relaybus.lane_of(event_id) = :full_lane), 32,
          'a claim of 100 takes 32 of the full lane');
SELECT is((SELECT count(*)::int FROM c2 WHERE relaybus.lane_of(event_id) = :other_lane), 10,
          'and the other lane''s 10');
SELECT results_eq(format($$SELECT cardinality(in_flight), acked_upto FROM relaybus.lane_state
                            WHERE handler = 'cap' AND lane = %s$$, :full_lane),
                  $$VALUES (32, 0::bigint)$$, 'the full lane lists 32 in flight');
SELECT is((SELECT count(*)::int FROM relaybus.claim('cw', 100, '30 seconds', ARRAY['cap'])), 0,
          'while 32 are in flight, the lane gives nothing more');
SELECT pg_temp.complete(lease_token) FROM c2 WHERE relaybus.lane_of(event_id) = :full_lane LIMIT 5;
SELECT is((SELECT count(*)::int FROM relaybus.claim('cw', 100, '30 seconds', ARRAY['cap'])), 5,
          'five completed: five more, up to 32 again');

--------------------------------------------------------------------------------
-- Per-key order: one delivery per key per batch, none while an earlier one is in flight.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('ord', ARRAY['thing.happened']);
SELECT pg_temp.put('ord', 'k' || n, 'K') FROM generate_series(1, 3) n;
SELECT pg_temp.put('ord', 'j' || n, 'J') FROM generate_series(1, 2) n;
CREATE TEMP TABLE c3 AS SELECT * FROM relaybus.claim('ow', 10, '30 seconds', ARRAY['ord']);
SELECT bag_eq($$SELECT event_id, key FROM c3$$, $$VALUES ('k1', 'K'), ('j1', 'J')$$,
              'a batch takes the head of each key and nothing behind it');
SELECT is((SELECT count(*)::int FROM relaybus.claim('ow', 10, '30 seconds', ARRAY['ord'])), 0,
          'k2 and j2 are not handed out while k1 and j1 are in flight');
SELECT is((SELECT count(*)::int FROM relaybus.claim('ow2', 10, '30 seconds', ARRAY['ord'])), 0,
          'not to another worker either');
SELECT pg_temp.complete(lease_token) FROM c3 WHERE event_id = 'k1';
CREATE TEMP TABLE c4 AS SELECT * FROM relaybus.claim('ow', 10, '30 seconds', ARRAY['ord']);
SELECT results_eq($$SELECT event_id FROM c4$$, $$VALUES ('k2')$$,
                  'k1 completed: k2 alone (j2 still waits for j1)');
SELECT pg_temp.complete(lease_token) FROM c4;
SELECT results_eq($$SELECT event_id FROM relaybus.claim('ow', 10, '30 seconds', ARRAY['ord'])$$,
                  $$VALUES ('k3')$$, 'then k3: the key in publish order');

--------------------------------------------------------------------------------
-- DEFER and PARK: a delivery not due moves to an exception row; its key's later ones park
-- behind it; once due it is picked from its row, and its key follows only after it.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('due', ARRAY['thing.happened']);
SELECT pg_temp.put('due', 'q1', 'Q', now() + interval '1 hour');
SELECT relaybus.lane_of('Q') AS q_lane \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('dw', 10, '30 seconds', ARRAY['due'])), 0,
          'q1 is not due');
SELECT pg_temp.put('due', 'q2', 'Q');
SELECT is((SELECT count(*)::int FROM relaybus.claim('dw', 10, '30 seconds', ARRAY['due'])), 0,
          'q2 is due, but must not overtake q1''s exception row');
SELECT results_eq($$SELECT x.position, x.event_id, x.key, x.status, x.attempts, x.claims,
                           x.available_at = d.available_at, x.created_at = d.created_at
                      FROM relaybus.exceptions x JOIN relaybus.deliveries d USING (handler, lane, position)
                     WHERE x.handler = 'due' ORDER BY x.position$$,
                  $$VALUES (1::bigint, 'q1', 'Q', 'pending', 0, 0, true, true),
                           (2::bigint, 'q2', 'Q', 'pending', 0, 0, true, true)$$,
                  'q1 deferred and q2 parked: pending exception rows from their delivery rows, 0 attempts');
SELECT results_eq(format($$SELECT acked_upto, lease_owner FROM relaybus.lane_state
                            WHERE handler = 'due' AND lane = %s$$, :q_lane),
                  $$VALUES (2::bigint, NULL::text)$$,
                  'the cursor passed both; the lane runs nothing and stays free');
SELECT is((SELECT count(*)::int FROM relaybus.claim('dw', 10, '30 seconds', ARRAY['due'])), 0,
          'q2''s parked row is due, but q1''s, lower in the key, is not: nothing of Q');
UPDATE relaybus.exceptions SET available_at = now() - interval '1 second' WHERE event_id = 'q1';
CREATE TEMP TABLE c5 AS SELECT * FROM relaybus.claim('dw', 10, '30 seconds', ARRAY['due']);
SELECT results_eq($$SELECT c5.event_id, c5.attempts, t.lane_position, t.claims
                      FROM c5 CROSS JOIN LATERAL pg_temp.tok(c5.lease_token) t$$,
                  $$VALUES ('q1', 0, 1::bigint, 0)$$,
                  'once due, q1 is picked from its exception row, alone');
SELECT results_eq(format($$SELECT retrying, in_flight FROM relaybus.lane_state
                            WHERE handler = 'due' AND lane = %s$$, :q_lane),
                  $$VALUES ('{1}'::bigint[], '{}'::bigint[])$$, 'the lane retries its position');
SELECT ok(pg_temp.holds((SELECT lease_token FROM c5)), 'and its token holds');
SELECT is((SELECT count(*)::int FROM relaybus.claim('dw', 10, '30 seconds', ARRAY['due'])), 0,
          'q2 waits while q1 runs');
SELECT pg_temp.complete(lease_token) FROM c5;
SELECT results_eq($$SELECT event_id FROM relaybus.claim('dw', 10, '30 seconds', ARRAY['due'])$$,
                  $$VALUES ('q2')$$, 'q1 completed: q2 follows from its parked row');

-- An unkeyed delivery not due is deferred too; the rest of its lane flows.
SELECT relaybus.lane_of('later-x') AS later_lane \gset
SELECT ids[1] AS later_id, ids[2] AS now_id
  FROM (SELECT array_agg(id) AS ids FROM pg_temp.ids_in_lane('later-', :later_lane, 2) id) s \gset
SELECT pg_temp.put('due', :'later_id', NULL, now() + interval '1 hour');
SELECT pg_temp.put('due', :'now_id');
SELECT results_eq($$SELECT event_id FROM relaybus.claim('dw2', 10, '30 seconds', ARRAY['due'])$$,
                  format('VALUES (%L)', :'now_id'), 'the due one is picked past the deferred one');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE event_id = :'later_id' AND status = 'pending'
            AND available_at > now()), 1, 'the deferred one waits in its exception row');

--------------------------------------------------------------------------------
-- Due exception rows are picked before the window; the result carries the row's attempts
-- and the token its claims counter.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('exc', ARRAY['thing.happened']);
SELECT relaybus.lane_of('exc-x') AS exc_lane \gset
CREATE TEMP TABLE exc_ids AS SELECT id, row_number() OVER () AS n FROM pg_temp.ids_in_lane('exc-', :exc_lane, 3) id;
SELECT pg_temp.put('exc', (SELECT id FROM exc_ids WHERE n = 1), NULL, now() + interval '1 hour');
SELECT pg_temp.put('exc', (SELECT id FROM exc_ids WHERE n = 2));
-- As fail would leave a retry: two attempts charged, its counter at 3, due now.
SELECT is((SELECT count(*)::int FROM relaybus.claim('ew', 10, '30 seconds', ARRAY['exc'])), 1,
          'the window''s due delivery is claimed, the other deferred');
UPDATE relaybus.exceptions SET available_at = now() - interval '1 second', attempts = 2, claims = 3
 WHERE handler = 'exc';
SELECT pg_temp.put('exc', (SELECT id FROM exc_ids WHERE n = 3));
CREATE TEMP TABLE c6 AS SELECT * FROM relaybus.claim('ew', 1, '30 seconds', ARRAY['exc']);
SELECT results_eq($$SELECT c6.event_id, c6.attempts, t.claims FROM c6 CROSS JOIN LATERAL pg_temp.tok(c6.lease_token) t$$,
                  format('VALUES (%L, 2, 3)', (SELECT id FROM exc_ids WHERE n = 1)),
                  'a batch of one takes the due exception row before the window''s delivery');

--------------------------------------------------------------------------------
-- Takeovers: a claim takes over an expired lane and charges what ran there; then
-- take_over_expired charges the retries, and dead-letters at max_attempts.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('tk', ARRAY['thing.happened'], 2);
SELECT pg_temp.put('tk', 't' || n) FROM generate_series(1, 2) n;
CREATE TEMP TABLE crashed AS SELECT * FROM relaybus.claim('crashy', 10, '1 millisecond', ARRAY['tk']);
SELECT is((SELECT count(*)::int FROM crashed), 2, 'a worker claims two and crashes');
SELECT pg_sleep(0.02);
SELECT pg_temp.mark();
CREATE TEMP TABLE rescued AS SELECT * FROM relaybus.claim('rescuer', 10, '1 millisecond', ARRAY['tk']);
SELECT results_eq($$SELECT r.event_id, r.attempts, t.claims, t.epoch = o.epoch + 1
                      FROM rescued r CROSS JOIN LATERAL pg_temp.tok(r.lease_token) t
                      JOIN crashed c USING (event_id) CROSS JOIN LATERAL pg_temp.tok(c.lease_token) o
                     ORDER BY 1$$,
                  $$VALUES ('t1', 1, 1, true), ('t2', 1, 1, true)$$,
                  'another worker takes the expired lanes over: each lost attempt charged, run again at a new epoch');
SELECT results_eq($$SELECT event_id, status, attempts, claims, last_error LIKE 'lease lost%'
                      FROM relaybus.exceptions WHERE handler = 'tk' ORDER BY event_id$$,
                  $$VALUES ('t1', 'pending', 1, 1, true), ('t2', 'pending', 1, 1, true)$$,
                  'the lost window positions became exception rows (claims 1, lease lost)');
SELECT ok(NOT (SELECT bool_or(pg_temp.holds(lease_token)) FROM crashed),
          'the crashed worker''s tokens no longer hold');
SELECT ok((SELECT bool_and(pg_temp.holds(lease_token)) FROM rescued), 'the new ones do');
SELECT results_eq($$SELECT pg_temp.moved('attempts_charged'), pg_temp.moved('dead_lettered'),
                           pg_temp.moved('claimed')$$,
                  $$VALUES (2::bigint, 0::bigint, 2::bigint)$$, 'counters: 2 charged, 2 claimed');
SELECT ok(pg_temp.moved('taken_over') >= 1, 'counters: the lanes taken over');
SELECT pg_sleep(0.02);
SELECT pg_temp.mark();
SELECT ok(relaybus.take_over_expired() >= 1, 'take_over_expired takes the rescuer''s expired lanes');
SELECT results_eq($$SELECT event_id, status, attempts, claims FROM relaybus.exceptions
                     WHERE handler = 'tk' ORDER BY event_id$$,
                  $$VALUES ('t1', 'dead', 2, 2), ('t2', 'dead', 2, 2)$$,
                  'their retries lost their second attempt: dead at max_attempts 2, claims moved');
SELECT is((SELECT count(*)::int FROM relaybus.lane_state WHERE handler = 'tk'
            AND (lease_owner IS NOT NULL OR in_flight <> '{}' OR retrying <> '{}')), 0,
          'the lanes went back with nothing in flight or retried');
SELECT ok(NOT (SELECT bool_or(pg_temp.holds(lease_token)) FROM rescued), 'the rescuer''s tokens no longer hold');
SELECT results_eq($$SELECT pg_temp.moved('attempts_charged'), pg_temp.moved('dead_lettered')$$,
                  $$VALUES (2::bigint, 2::bigint)$$, 'counters: 2 charged, 2 dead-lettered');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w', 10, '30 seconds', ARRAY['tk'])), 0,
          'dead letters are not claimed');

-- take_over_expired of a window position at the end of its budget.
SELECT relaybus.subscribe('tk1', ARRAY['thing.happened'], 1);
SELECT pg_temp.put('tk1', 'once', 'R');
SELECT relaybus.lane_of('R') AS once_lane \gset
SELECT epoch AS once_epoch FROM relaybus.lanes WHERE handler = 'tk1' AND lane = :once_lane \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('crash1', 10, '1 millisecond', ARRAY['tk1'])), 1,
          'a worker claims and crashes');
SELECT pg_sleep(0.02);
SELECT ok(relaybus.take_over_expired() >= 1, 'take_over_expired takes its lane');
SELECT results_eq($$SELECT status, attempts, claims FROM relaybus.exceptions WHERE event_id = 'once'$$,
                  $$VALUES ('dead', 1, 1)$$, 'one lost attempt of one allowed: a dead exception row');
SELECT results_eq(format($$SELECT epoch, acked_upto, in_flight, lease_owner FROM relaybus.lane_state
                            WHERE handler = 'tk1' AND lane = %s$$, :once_lane),
                  format($$VALUES (%s::bigint, 1::bigint, '{}'::bigint[], NULL::text)$$, :once_epoch + 2),
                  'the lane: a new epoch, the cursor past the position, nobody holding it');
-- A dead row holds its key back no more; requeued, it waits for its key's delivery in flight.
SELECT pg_temp.put('tk1', 'twice', 'R');
CREATE TEMP TABLE c8 AS SELECT * FROM relaybus.claim('rw', 10, '30 seconds', ARRAY['tk1']);
SELECT results_eq($$SELECT event_id FROM c8$$, $$VALUES ('twice')$$,
                  'the key''s next delivery runs past its dead row');
SELECT ok(relaybus.requeue('once', 'tk1'), 'the dead row is requeued');
SELECT is((SELECT count(*)::int FROM relaybus.claim('rw', 10, '30 seconds', ARRAY['tk1'])), 0,
          'the requeued row does not run beside its key''s delivery in flight');
SELECT pg_temp.complete(lease_token) FROM c8;
SELECT results_eq($$SELECT event_id, attempts FROM relaybus.claim('rw', 10, '30 seconds', ARRAY['tk1'])$$,
                  $$VALUES ('once', 0)$$, 'once that one completed, it runs, with a fresh budget');

--------------------------------------------------------------------------------
-- Holders and incarnations, as 0.2.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('hold', ARRAY['thing.happened']);
SELECT relaybus.lane_of('hold-x') AS hold_lane \gset
CREATE TEMP TABLE hold_ids AS SELECT id, row_number() OVER () AS n FROM pg_temp.ids_in_lane('hold-', :hold_lane, 3) id;
SELECT pg_temp.put('hold', id) FROM hold_ids ORDER BY n;
CREATE TEMP TABLE a1 AS SELECT * FROM relaybus.claim('hw', 1, '30 seconds', ARRAY['hold'], 'A');
SELECT results_eq(format($$SELECT holder, holder_pid, epoch FROM relaybus.lanes WHERE handler = 'hold' AND lane = %s$$, :hold_lane),
                  $$VALUES ('A'::text, NULL::int, 1::bigint)$$, 'holder A binds the lane');
SELECT is((SELECT count(*)::int FROM relaybus.claim('hw', 10, '30 seconds', ARRAY['hold'], 'B')), 0,
          'holder B under the same name gets nothing of A''s live lane');
SELECT is((SELECT count(*)::int FROM relaybus.claim('hw', 10, '30 seconds', ARRAY['hold'])), 0,
          'nor does a claim without a holder');
SELECT rb_connect('pool');
SELECT is((SELECT n FROM dblink('pool', $$SELECT count(*)::int FROM relaybus.claim('hw', 1, '30 seconds', ARRAY['hold'], 'A')$$) AS t(n int)),
          1, 'holder A on another connection keeps using the lane');
SELECT results_eq(format($$SELECT holder, epoch, cardinality(in_flight) FROM relaybus.lane_state WHERE handler = 'hold' AND lane = %s$$, :hold_lane),
                  $$VALUES ('A'::text, 1::bigint, 2)$$, 'same epoch, two in flight');
UPDATE relaybus.lanes SET lease_expires_at = now() - interval '1 second' WHERE handler = 'hold';
CREATE TEMP TABLE b1 AS SELECT * FROM relaybus.claim('hw', 10, '30 seconds', ARRAY['hold'], 'B');
SELECT results_eq($$SELECT count(*)::int, sum(attempts)::int FROM b1$$, $$VALUES (3, 2)$$,
                  'once A''s lease expired, B takes the lane over: A''s two charged, all three run');
SELECT results_eq(format($$SELECT holder, epoch FROM relaybus.lanes WHERE handler = 'hold' AND lane = %s$$, :hold_lane),
                  $$VALUES ('B'::text, 2::bigint)$$, 'the lane changed hands: holder B, a new epoch');
SELECT ok(NOT (SELECT bool_or(pg_temp.holds(lease_token)) FROM a1), 'A''s tokens no longer hold');

-- Without a holder, the backend: a gone backend's lane is an orphan, taken over at once.
SELECT relaybus.subscribe('orph', ARRAY['thing.happened']);
SELECT pg_temp.put('orph', 'o1');
SELECT rb_connect('gone');
SELECT pid AS gone_pid FROM dblink('gone', 'SELECT pg_backend_pid()') AS t(pid int) \gset
SELECT is((SELECT n FROM dblink('gone', $$SELECT count(*)::int FROM relaybus.claim('ow', 10, '1 hour', ARRAY['orph'])$$) AS t(n int)),
          1, 'a connection claims o1 for an hour');
SELECT dblink_disconnect('gone');
SELECT ok(rb_wait_backend_gone(:gone_pid), 'and closes');
SELECT results_eq($$SELECT event_id, attempts FROM relaybus.claim('ow', 10, '30 seconds', ARRAY['orph'])$$,
                  $$VALUES ('o1', 1)$$, 'the same name on a new connection takes the orphan over at once, charged');

--------------------------------------------------------------------------------
-- A paused handler is skipped.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('pz', ARRAY['thing.happened']);
SELECT pg_temp.put('pz', 'p1');
SELECT relaybus.pause('pz');
SELECT is((SELECT count(*)::int FROM relaybus.claim('pw', 10, '30 seconds', ARRAY['pz'])), 0,
          'a paused handler''s delivery is not handed out');
SELECT is((SELECT count(*)::int FROM relaybus.lane_state WHERE handler = 'pz' AND (epoch <> 0 OR progress_seq <> 0)), 0,
          'and none of its lanes was touched');
SELECT relaybus.resume('pz');
SELECT results_eq($$SELECT event_id FROM relaybus.claim('pw', 10, '30 seconds', ARRAY['pz'])$$,
                  $$VALUES ('p1')$$, 'resumed, it is');

--------------------------------------------------------------------------------
-- Oldest work first across lanes.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('old', ARRAY['thing.happened']);
SELECT pg_temp.put('old', 'younger', NULL, now() - interval '10 minutes');
SELECT pg_temp.put('old', 'older', NULL, now() - interval '20 minutes');
SELECT pg_temp.put('old', 'oldest', NULL, now() - interval '30 minutes');
SELECT ok(relaybus.lane_of('younger') <> relaybus.lane_of('older')
          AND relaybus.lane_of('older') <> relaybus.lane_of('oldest'), 'three lanes');
SELECT results_eq($$SELECT event_id FROM relaybus.claim('yw', 1, '30 seconds', ARRAY['old'])$$,
                  $$VALUES ('oldest')$$, 'a batch of one takes the lane with the oldest work');
SELECT results_eq($$SELECT event_id FROM relaybus.claim('yw2', 1, '30 seconds', ARRAY['old'])$$,
                  $$VALUES ('older')$$, 'then the next oldest');

--------------------------------------------------------------------------------
-- Idle lanes are handed back; a lane with a pending exception row is kept.
--------------------------------------------------------------------------------
SELECT relaybus.subscribe('idle', ARRAY['thing.happened']);
SELECT relaybus.lane_of('idle-x') AS idle_lane, (relaybus.lane_of('idle-x') + 7) % 256 AS kept_lane \gset
SELECT id AS idle_id FROM pg_temp.ids_in_lane('idle-', :idle_lane, 1) id \gset
CREATE TEMP TABLE kept_ids AS SELECT id, row_number() OVER () AS n FROM pg_temp.ids_in_lane('kept-', :kept_lane, 2) id;
SELECT pg_temp.put('idle', :'idle_id');
SELECT pg_temp.put('idle', (SELECT id FROM kept_ids WHERE n = 1));
SELECT pg_temp.put('idle', (SELECT id FROM kept_ids WHERE n = 2), NULL, now() + interval '1 hour');
CREATE TEMP TABLE c7 AS SELECT * FROM relaybus.claim('iw', 10, '30 seconds', ARRAY['idle']);
SELECT is((SELECT count(*)::int FROM c7), 2, 'the two due deliveries are claimed');
SELECT pg_temp.complete(lease_token) FROM c7;
SELECT xmin::text || ctid::text AS idle_version FROM relaybus.lanes WHERE handler = 'idle' AND lane = :idle_lane \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('iw', 10, '30 seconds', ARRAY['idle'])), 0,
          'nothing more is due');
SELECT results_eq(format($$SELECT lease_owner, xmin::text || ctid::text FROM relaybus.lanes WHERE handler = 'idle' AND lane = %s$$, :idle_lane),
                  format($$VALUES ('iw'::text, %L)$$, :'idle_version'),
                  'an idle lane with more than the lease left stays with its holder, unwritten');
-- Less than the claim's lease left: the next claim renews the idle lane while deliveries
-- still come (one was published since about its last renewal, half a lease ago) and hands it
-- back once none did.
UPDATE relaybus.lanes SET lease_expires_at = now() + interval '20 seconds' WHERE handler = 'idle' AND lane = :idle_lane;
SELECT is((SELECT count(*)::int FROM relaybus.claim('iw', 10, '30 seconds', ARRAY['idle'])), 0,
          'nothing due');
SELECT results_eq(format($$SELECT lease_owner, epoch, lease_expires_at > now() + interval '44 seconds' FROM relaybus.lanes WHERE handler = 'idle' AND lane = %s$$, :idle_lane),
                  $$VALUES ('iw'::text, 1::bigint, true)$$,
                  'an idle lane in use is renewed once its lease is due, not handed back (its epoch stays)');
UPDATE relaybus.lanes SET lease_expires_at = now() + interval '20 seconds' WHERE handler = 'idle' AND lane = :idle_lane;
UPDATE relaybus.deliveries SET created_at = now() - interval '15 seconds 1 microsecond'
 WHERE handler = 'idle' AND lane = :idle_lane;
SELECT is((SELECT count(*)::int FROM relaybus.claim('iw', 10, '30 seconds', ARRAY['idle'])), 0,
          'still nothing due');
SELECT results_eq(format($$SELECT lease_owner, epoch, in_flight FROM relaybus.lane_state WHERE handler = 'idle' AND lane = %s$$, :idle_lane),
                  $$VALUES (NULL::text, 1::bigint, '{}'::bigint[])$$,
                  'a lane whose work is all done is handed back once its lease is due for renewal (its epoch stays)');
SELECT results_eq(format($$SELECT lease_owner FROM relaybus.lanes WHERE handler = 'idle' AND lane = %s$$, :kept_lane),
                  $$VALUES ('iw'::text)$$, 'a lane with a pending exception row stays with its holder');

SELECT dblink_disconnect('pool');
SELECT * FROM finish();
