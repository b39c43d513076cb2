-- Guarantee: effectively-once completion inside the handler's transaction
-- (test/pgtap/12_effectively_once.sql on 0.3.0). A handler that writes its side effect and
-- calls complete(token) in one transaction, racing a takeover of its lane, ends in exactly
-- one of two ways: its transaction commits with the completion and the delivery never runs
-- again, or the takeover wins, complete returns false (the handler rolls back) and the
-- delivery runs again with one attempt charged. Every scenario counts the side-effect rows
-- AND the delivery state, so "both commit" (a takeover that ignores the completion's lock
-- on the lane row, or a complete that does not re-check the epoch after waiting) shows up
-- as two side effects, a charged attempt after a successful completion, or a complete
-- returning true after the lane changed hands.
--
-- How 0.3.0 stores it: a completion moves its lane's cursor (the lane row locked FOR NO
-- KEY UPDATE until commit: 0.2 deleted the delivery under FOR KEY SHARE on the lane); a
-- takeover's charge is an exception row. So "the delivery is gone" of 0.2 is "it is
-- finished: list_deliveries no longer lists it", and attempts are list_deliveries' (the
-- exception row's). 0.3.0 by design: a takeover's charge is due at the takeover's time
-- (core::takeover_of_positions), not at the delivery's old available_at; either way no
-- backoff (b below).
--
-- Every handler transaction runs on a real second connection (dblink); leases are 200 ms
-- and each scenario sleeps once, 0.25 s, past the lease.
SELECT rb_reset();
SELECT plan(53);

SET lock_timeout = '10s';
SET statement_timeout = '20s';

SET client_min_messages = warning;
DROP TABLE IF EXISTS public.rbtest_eo_side_effects;
RESET client_min_messages;
CREATE TABLE public.rbtest_eo_side_effects (event_id text NOT NULL, by_worker text NOT NULL);

CREATE TEMP TABLE tokens (scenario text PRIMARY KEY, token text NOT NULL);

-- claim on another connection, for one handler
CREATE FUNCTION pg_temp.rclaim(conn text, worker text, lease text, handler text)
  RETURNS TABLE(token text, event_id text, attempts int) LANGUAGE sql AS $$
  SELECT * FROM dblink(conn, format(
    'SELECT lease_token, event_id, attempts FROM relaybus.claim(%L, 10, %L::interval, ARRAY[%L])',
    worker, lease, handler)) AS t(token text, event_id text, attempts int)
$$;
-- complete(token) on another connection (in whatever transaction it has open)
CREATE FUNCTION pg_temp.rcomplete(conn text, scenario text) RETURNS boolean LANGUAGE sql AS $$
  SELECT b FROM dblink(conn, format('SELECT relaybus.complete(%L)',
    (SELECT t.token FROM tokens t WHERE t.scenario = rcomplete.scenario))) AS r(b boolean)
$$;
CREATE FUNCTION pg_temp.side_effect(conn text, event_id text, worker text) RETURNS text
  LANGUAGE sql AS $$
  SELECT dblink_exec(conn, format('INSERT INTO public.rbtest_eo_side_effects VALUES (%L, %L)',
                                  event_id, worker))
$$;
CREATE FUNCTION pg_temp.effects(event_id text) RETURNS int LANGUAGE sql AS $$
  SELECT count(*)::int FROM public.rbtest_eo_side_effects s WHERE s.event_id = effects.event_id
$$;
-- deliveries not finished yet (0.2: delivery rows), and their attempts
CREATE FUNCTION pg_temp.deliveries(event_id text) RETURNS int LANGUAGE sql AS $$
  SELECT count(*)::int FROM relaybus.list_deliveries(NULL, NULL, 1000000) d WHERE d.event_id = deliveries.event_id
$$;
CREATE FUNCTION pg_temp.attempts(event_id text) RETURNS int LANGUAGE sql AS $$
  SELECT d.attempts FROM relaybus.list_deliveries(NULL, NULL, 1000000) d WHERE d.event_id = attempts.event_id
$$;
CREATE FUNCTION pg_temp.remote_pid(conn text) RETURNS int LANGUAGE sql AS $$
  SELECT p FROM dblink(conn, 'SELECT pg_backend_pid()') AS t(p int)
$$;
-- true once backend pid has exited (polls up to about 5 s)
CREATE FUNCTION pg_temp.gone(pid int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..250 LOOP
    PERFORM pg_stat_clear_snapshot();
    IF NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = gone.pid) THEN
      RETURN true;
    END IF;
    PERFORM pg_sleep(0.02);
  END LOOP;
  RETURN false;
END
$$;

SELECT relaybus.subscribe('eo_a', ARRAY['eo.a']);
SELECT relaybus.subscribe('eo_b', ARRAY['eo.b']);
SELECT relaybus.subscribe('eo_c', ARRAY['eo.c']);
SELECT relaybus.subscribe('eo_d', ARRAY['eo.d']);
SELECT relaybus.subscribe('eo_e', ARRAY['eo.e']);
SELECT relaybus.subscribe('eo_f', ARRAY['eo.f']);
SELECT rb_connect('conn_a');
SELECT rb_connect('conn_b');
SELECT pg_temp.remote_pid('conn_a') AS a_pid, pg_temp.remote_pid('conn_b') AS b_pid \gset

--------------------------------------------------------------------------------
-- a) The handler's transaction completes and stays open past its lease: no takeover, no
--    other worker gets the delivery; it commits: one side effect, never redelivered.
--------------------------------------------------------------------------------
SELECT relaybus.publish('eo.a', '{}', event_id => 'ev-a');
INSERT INTO tokens SELECT 'a', token FROM pg_temp.rclaim('conn_a', 'worker-a', '200 ms', 'eo_a');
SELECT is((SELECT count(*)::int FROM tokens WHERE scenario = 'a'), 1, 'a: worker A claims the delivery');
SELECT dblink_exec('conn_a', 'BEGIN');
SELECT pg_temp.side_effect('conn_a', 'ev-a', 'worker-a');
SELECT is(pg_temp.rcomplete('conn_a', 'a'), true, 'a: complete in the handler transaction returns true');
SELECT pg_sleep(0.4);  -- past the lease: a claim leases for up to 1.5 x lease
SELECT is(relaybus.take_over_expired(), 0,
          'a: take_over_expired skips the expired lane whose completion is uncommitted');
SELECT is((SELECT epoch || ':' || lease_owner FROM relaybus.lanes
            WHERE handler = 'eo_a' AND lane = relaybus.lane_of('ev-a')), '1:worker-a',
          'a: the lane keeps its epoch and owner while the completion is uncommitted');
SELECT is((SELECT count(*)::int FROM relaybus.claim('worker-other', 10, '30 seconds', ARRAY['eo_a'])), 0,
          'a: a claim by another worker gets nothing of the expired lane');
SELECT is(pg_temp.attempts('ev-a'), 0, 'a: no attempt was charged while the completion was open');
SELECT dblink_exec('conn_a', 'COMMIT');
SELECT is(pg_temp.effects('ev-a'), 1, 'a: after commit exactly one side effect');
SELECT is(pg_temp.deliveries('ev-a'), 0, 'a: after commit the delivery is gone');
SELECT is(relaybus.take_over_expired(), 1, 'a: the expired lane is taken over afterwards');
SELECT is(pg_temp.deliveries('ev-a'), 0, 'a: the later takeover charged (recreated) nothing');
SELECT is((SELECT count(*)::int FROM relaybus.claim('worker-other', 10, '30 seconds', ARRAY['eo_a'])), 0,
          'a: nothing is redelivered');
SELECT is(pg_temp.effects('ev-a'), 1, 'a: still exactly one side effect');

--------------------------------------------------------------------------------
-- b) Same, but the handler rolls back: the takeover then charges one attempt (without
--    moving available_at) and another worker runs the delivery again.
--------------------------------------------------------------------------------
SELECT relaybus.publish('eo.b', '{}', event_id => 'ev-b');
CREATE TEMP TABLE b_due AS SELECT available_at FROM relaybus.deliveries WHERE event_id = 'ev-b';
INSERT INTO tokens SELECT 'b', token FROM pg_temp.rclaim('conn_a', 'worker-a', '200 ms', 'eo_b');
SELECT is((SELECT count(*)::int FROM tokens WHERE scenario = 'b'), 1, 'b: worker A claims the delivery');
SELECT dblink_exec('conn_a', 'BEGIN');
SELECT pg_temp.side_effect('conn_a', 'ev-b', 'worker-a');
SELECT is(pg_temp.rcomplete('conn_a', 'b'), true, 'b: complete in the handler transaction returns true');
SELECT pg_sleep(0.4);  -- past the lease: a claim leases for up to 1.5 x lease
SELECT is(relaybus.take_over_expired(), 0, 'b: no takeover while the completion is uncommitted');
SELECT dblink_exec('conn_a', 'ROLLBACK');
SELECT is(pg_temp.effects('ev-b'), 0, 'b: the rolled-back handler left no side effect');
SELECT is(pg_temp.attempts('ev-b'), 0, 'b: the rollback restored the delivery, uncharged');
SELECT is(relaybus.take_over_expired(), 1, 'b: after the rollback the expired lane is taken over');
SELECT is(pg_temp.attempts('ev-b'), 1, 'b: the takeover charged one attempt');
-- 0.3.0 by design: due at the takeover's time (0.2: available_at unchanged); no backoff.
SELECT ok((SELECT x.available_at >= b.available_at AND x.available_at <= now()
             FROM relaybus.exceptions x, b_due b WHERE x.event_id = 'ev-b'),
          'b: the takeover put no backoff on it: due at once');
INSERT INTO tokens SELECT 'b2', token FROM pg_temp.rclaim('conn_b', 'worker-b', '30 seconds', 'eo_b');
SELECT is(pg_temp.attempts('ev-b'), 1, 'b: the delivery keeps attempts = 1');
SELECT is((SELECT count(*)::int FROM tokens WHERE scenario = 'b2'), 1,
          'b: another worker receives the delivery again');
SELECT is(pg_temp.rcomplete('conn_a', 'b'), false, 'b: the first worker''s token is dead');
SELECT dblink_exec('conn_b', 'BEGIN');
SELECT pg_temp.side_effect('conn_b', 'ev-b', 'worker-b');
SELECT is(pg_temp.rcomplete('conn_b', 'b2'), true, 'b: the new worker completes');
SELECT dblink_exec('conn_b', 'COMMIT');
SELECT is(pg_temp.effects('ev-b'), 1, 'b: exactly one side effect in the end');
SELECT is((SELECT by_worker FROM public.rbtest_eo_side_effects WHERE event_id = 'ev-b'), 'worker-b',
          'b: written by the new worker');
SELECT is(pg_temp.deliveries('ev-b'), 0, 'b: the delivery is gone');

--------------------------------------------------------------------------------
-- c) The takeover commits first while the handler runs: its complete returns false and it
--    rolls back. f) the same for a REPEATABLE READ handler whose snapshot predates the
--    takeover: complete must not succeed (false, or a serialization failure).
--------------------------------------------------------------------------------
SELECT relaybus.publish('eo.c', '{}', event_id => 'ev-c');
SELECT relaybus.publish('eo.f', '{}', event_id => 'ev-f');
INSERT INTO tokens SELECT 'c', token FROM pg_temp.rclaim('conn_a', 'worker-a', '200 ms', 'eo_c');
INSERT INTO tokens SELECT 'f', token FROM pg_temp.rclaim('conn_b', 'worker-f', '200 ms', 'eo_f');
SELECT is((SELECT count(*)::int FROM tokens WHERE scenario IN ('c', 'f')), 2, 'c/f: both deliveries claimed');
SELECT dblink_exec('conn_a', 'BEGIN');
SELECT pg_temp.side_effect('conn_a', 'ev-c', 'worker-a');
SELECT dblink_exec('conn_b', 'BEGIN ISOLATION LEVEL REPEATABLE READ');
SELECT pg_temp.side_effect('conn_b', 'ev-f', 'worker-f');
SELECT pg_sleep(0.4);  -- past the lease: a claim leases for up to 1.5 x lease
SELECT is(relaybus.take_over_expired(), 2, 'c/f: the takeover commits first (two expired lanes)');
SELECT is(pg_temp.rcomplete('conn_a', 'c'), false, 'c: complete after the takeover returns false');
SELECT dblink_exec('conn_a', 'ROLLBACK');
SELECT is(pg_temp.effects('ev-c'), 0, 'c: the handler rolled back its side effect');
SELECT is(pg_temp.deliveries('ev-c'), 1, 'c: the delivery is still there');
SELECT is(pg_temp.attempts('ev-c'), 1, 'c: with one attempt charged');
SELECT is((SELECT attempts FROM pg_temp.rclaim('conn_a', 'worker-c2', '30 seconds', 'eo_c')), 1,
          'c: it is delivered again, attempts = 1');
-- fail_on_error => false: a serialization failure comes back as no row (and a NOTICE)
SELECT is(coalesce((SELECT b FROM dblink('conn_b', format('SELECT relaybus.complete(%L)',
             (SELECT token FROM tokens WHERE scenario = 'f')), false) AS r(b boolean)), false), false,
          'f: a REPEATABLE READ complete after the takeover does not succeed');
SELECT diag('f: the REPEATABLE READ complete reported: ' || dblink_error_message('conn_b'));
SELECT dblink_exec('conn_b', 'ROLLBACK');
SELECT is(pg_temp.effects('ev-f'), 0, 'f: no side effect');
SELECT is(pg_temp.attempts('ev-f'), 1, 'f: the delivery is still there with one attempt charged');

--------------------------------------------------------------------------------
-- d) Lock wait: B's takeover holds FOR UPDATE on the expired lane (uncommitted); A's
--    complete blocks on it; B commits; A's complete must re-check the epoch and say false.
--------------------------------------------------------------------------------
SELECT relaybus.publish('eo.d', '{}', event_id => 'ev-d');
INSERT INTO tokens SELECT 'd', token FROM pg_temp.rclaim('conn_a', 'worker-a', '200 ms', 'eo_d');
SELECT is((SELECT count(*)::int FROM tokens WHERE scenario = 'd'), 1, 'd: worker A claims the delivery');
SELECT pg_sleep(0.4);  -- past the lease: a claim leases for up to 1.5 x lease
SELECT dblink_exec('conn_b', 'BEGIN');
SELECT is((SELECT n FROM dblink('conn_b', 'SELECT relaybus.take_over_expired()') AS t(n int)), 1,
          'd: B takes the expired lane over (uncommitted)');
SELECT dblink_exec('conn_a', 'BEGIN');
SELECT pg_temp.side_effect('conn_a', 'ev-d', 'worker-a');
SELECT is(dblink_send_query('conn_a', format('SELECT relaybus.complete(%L)',
            (SELECT token FROM tokens WHERE scenario = 'd'))), 1, 'd: A sends its complete');
SELECT ok(rb_waits_for_lock(:a_pid), 'd: A''s complete waits for B''s lock on the lane');
SELECT dblink_exec('conn_b', 'COMMIT');
SELECT is((SELECT b FROM dblink_get_result('conn_a') AS r(b boolean)), false,
          'd: after B commits, A''s complete returns false');
SELECT is((SELECT count(*)::int FROM dblink_get_result('conn_a') AS r(b boolean)), 0,
          'd: (no further result)');
SELECT dblink_exec('conn_a', 'ROLLBACK');
SELECT is(pg_temp.effects('ev-d'), 0, 'd: A rolled back its side effect');
SELECT is(pg_temp.attempts('ev-d'), 1, 'd: the delivery is still there with one attempt charged');

--------------------------------------------------------------------------------
-- e) The other takeover path: the backend that claimed under worker name "worker-e" is
--    gone (a pooled connection recycled) while the handler's completion runs on another
--    connection. A claim under the same name from a third connection takes the orphaned
--    lane over: it must wait for the completion, and then must not redeliver.
--------------------------------------------------------------------------------
SELECT relaybus.publish('eo.e', '{}', event_id => 'ev-e');
SELECT rb_connect('conn_x');
SELECT pid AS x_pid FROM pg_temp.remote_pid('conn_x') AS pid \gset
INSERT INTO tokens SELECT 'e', token FROM pg_temp.rclaim('conn_x', 'worker-e', '30 seconds', 'eo_e');
SELECT is((SELECT count(*)::int FROM tokens WHERE scenario = 'e'), 1, 'e: worker-e claims the delivery');
SELECT dblink_disconnect('conn_x');
SELECT ok(pg_temp.gone(:x_pid), 'e: the claiming backend is gone');
SELECT dblink_exec('conn_a', 'BEGIN');
SELECT pg_temp.side_effect('conn_a', 'ev-e', 'worker-e');
SELECT is(pg_temp.rcomplete('conn_a', 'e'), true, 'e: the handler''s complete returns true (uncommitted)');
SELECT dblink_send_query('conn_b', $$SELECT count(*)::int FROM relaybus.claim('worker-e', 10,
  '30 seconds', ARRAY['eo_e'])$$);
SELECT ok(rb_waits_for_lock(:b_pid), 'e: the same-name claim waits for the completion in progress');
SELECT dblink_exec('conn_a', 'COMMIT');
SELECT is((SELECT n FROM dblink_get_result('conn_b') AS r(n int)), 0,
          'e: after the completion commits, the takeover claim returns nothing');
SELECT is((SELECT count(*)::int FROM dblink_get_result('conn_b') AS r(n int)), 0, 'e: (no further result)');
SELECT is(pg_temp.effects('ev-e'), 1, 'e: exactly one side effect');
SELECT is(pg_temp.deliveries('ev-e'), 0, 'e: the delivery is gone, nothing was charged');

SELECT dblink_disconnect('conn_a');
SELECT dblink_disconnect('conn_b');
DROP TABLE public.rbtest_eo_side_effects;

SELECT * FROM finish();
