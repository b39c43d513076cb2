-- Port of test/pgtap/24_holders.sql to relaybus 0.3.0. Every guarantee is 0.2's (holders
-- and incarnations are unchanged in 0.3.0's lanes); what changes is how the tests look:
-- a charge is an exception row (0.2: deliveries.attempts), a handled delivery stays below
-- its lane's cursor (0.2: deleted), and part 4 puts the lane in its state directly without
-- deleting and publishing again, since 0.3.0's publish is written only at commit (the loop
-- runs in one transaction, which would not see its own delivery) and a delivery's position
-- is never reused.
--
-- Guarantee: a worker's incarnation is explicit (issue 10, the pool trap). A claim that
-- passes a holder binds its lanes to (worker, holder): a pool that closes the connection
-- that claimed (node-postgres' idle timeout, PgBouncer in transaction mode) changes
-- nothing, where a backend-bound lane became an orphan, was taken over, charged an attempt
-- and fenced the token of a handler that had already run. Another holder under the same
-- name neither adopts nor strands the lanes: it takes them over only once their lease has
-- expired. Without a holder, the backend binding and its orphan takeover stay.
-- Over real separate connections (dblink). Every part fails against 8dc7c99, whose claim
-- has no holder.
SELECT rb_reset();
SELECT plan(35);

-- Two event ids of one lane, so a lane holds more than one delivery.
CREATE FUNCTION pg_temp.same_lane(prefix text) RETURNS SETOF text LANGUAGE sql AS $$
  SELECT id FROM (SELECT prefix || g AS id FROM generate_series(1, 5000) g) s
   WHERE relaybus.lane_of(id) = relaybus.lane_of(prefix || '1') ORDER BY id LIMIT 2
$$;

SELECT relaybus.subscribe('hold', ARRAY['t']);

--------------------------------------------------------------------------------
-- 1. The same (worker, holder) across a closed connection keeps the lease.
--------------------------------------------------------------------------------
SELECT relaybus.publish('t', '{}', NULL, id) FROM pg_temp.same_lane('a') id;
SELECT relaybus.lane_of('a1') AS lane, (SELECT max(id) FROM pg_temp.same_lane('a') id) AS a2 \gset
SELECT rb_connect('c1');
SELECT pid AS c1_pid FROM dblink('c1', 'SELECT pg_backend_pid()') AS t(pid int) \gset
CREATE TEMP TABLE first_claim AS SELECT * FROM dblink('c1',
  $$SELECT lease_token, event_id, attempts FROM relaybus.claim('pool', 1, '30 seconds', ARRAY['hold'], 'H1')$$)
  AS t(lease_token text, event_id text, attempts int);
SELECT results_eq('SELECT event_id, attempts FROM first_claim', $$VALUES ('a1', 0)$$,
                  'connection 1 claims a1 as (pool, H1)');
SELECT results_eq(format($$SELECT holder, holder_pid FROM relaybus.lanes WHERE handler = 'hold' AND lane = %s$$, :lane),
                  $$VALUES ('H1'::text, NULL::int)$$, 'the lane is bound to the holder, not to the backend');
SELECT epoch AS epoch1 FROM relaybus.lanes WHERE handler = 'hold' AND lane = :lane \gset
SELECT dblink_disconnect('c1');
SELECT ok(rb_wait_backend_gone(:c1_pid), 'the pool closed connection 1');

SELECT rb_connect('c2');
CREATE TEMP TABLE second_claim AS SELECT * FROM dblink('c2',
  $$SELECT lease_token, event_id, attempts FROM relaybus.claim('pool', 10, '30 seconds', ARRAY['hold'], 'H1')$$)
  AS t(lease_token text, event_id text, attempts int);
SELECT results_eq('SELECT event_id, attempts FROM second_claim', format($$VALUES (%L, 0)$$, :'a2'),
                  'connection 2, same pair: gets the other delivery of the lane, not a1 again');
SELECT is((SELECT epoch FROM relaybus.lanes WHERE handler = 'hold' AND lane = :lane), :epoch1::bigint,
          'the lane did not change hands (same epoch)');
-- (0.3.0: a charge would be an exception row.)
SELECT is((SELECT count(*)::int FROM relaybus.exceptions WHERE event_id = 'a1'), 0, 'a1 was charged nothing');
SELECT results_eq($$SELECT * FROM dblink('c2', 'SELECT relaybus.extend_lease(''pool'', ''30 seconds'', ''H1'')') AS t(n int)$$,
                  $$VALUES (1)$$, 'connection 2 renews the lane for the pair');
SELECT results_eq($$SELECT * FROM dblink('c2', format('SELECT relaybus.complete(%L)',
                      (SELECT lease_token FROM first_claim))) AS t(ok boolean)$$,
                  $$VALUES (true)$$, 'the token connection 1 got completes on connection 2');
SELECT results_eq($$SELECT * FROM dblink('c2', format('SELECT relaybus.complete(%L)',
                      (SELECT lease_token FROM second_claim))) AS t(ok boolean)$$,
                  $$VALUES (true)$$, 'and so does its own');
SELECT results_eq($$SELECT * FROM dblink('c2', 'SELECT relaybus.relinquish(''pool'', ''H1'')') AS t(n int)$$,
                  $$VALUES (1)$$, 'the pair relinquishes the idle lane');
-- 0.2: no delivery left. 0.3.0: both positions are below the lane's cursor, nothing runs, and
-- nothing is left (list_deliveries), with no exception row.
SELECT results_eq(format($$SELECT acked_upto, done, in_flight, retrying FROM relaybus.lane_state
                            WHERE handler = 'hold' AND lane = %s$$, :lane),
                  $$VALUES (2::bigint, '{}'::bigint[], '{}'::bigint[], '{}'::bigint[])$$,
                  'both handled, once each: the lane''s cursor passed both positions');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()) + (SELECT count(*)::int FROM relaybus.exceptions), 0,
          'nothing is left of either');
SELECT dblink_disconnect('c2');

--------------------------------------------------------------------------------
-- 2. Another holder under the same name neither adopts nor strands the lanes.
--------------------------------------------------------------------------------
SELECT rb_reset();
SELECT relaybus.subscribe('hold', ARRAY['t']);
SELECT relaybus.publish('t', '{}', NULL, id) FROM pg_temp.same_lane('b') id;
SELECT relaybus.lane_of('b1') AS lane, (SELECT max(id) FROM pg_temp.same_lane('b') id) AS b2 \gset
SELECT rb_connect('a');
SELECT rb_connect('b');
CREATE TEMP TABLE a_claim AS SELECT * FROM dblink('a',
  $$SELECT lease_token, event_id FROM relaybus.claim('shared', 1, '400 ms', ARRAY['hold'], 'A')$$)
  AS t(lease_token text, event_id text);
SELECT results_eq('SELECT event_id FROM a_claim', $$VALUES ('b1')$$, 'holder A claims b1');
SELECT epoch AS epoch_a FROM relaybus.lanes WHERE handler = 'hold' AND lane = :lane \gset
SELECT results_eq($$SELECT count(*)::int FROM dblink('b',
                    'SELECT event_id FROM relaybus.claim(''shared'', 10, ''30 seconds'', ARRAY[''hold''], ''B'')')
                    AS t(event_id text)$$,
                  $$VALUES (0)$$, 'holder B, same worker name: gets nothing of A''s lane while its lease is live');
SELECT results_eq($$SELECT * FROM dblink('b', 'SELECT relaybus.extend_lease(''shared'', ''30 seconds'', ''B'')') AS t(n int)$$,
                  $$VALUES (0)$$, 'B does not renew A''s lane');
SELECT results_eq($$SELECT * FROM dblink('b', 'SELECT relaybus.relinquish(''shared'', ''B'')') AS t(n int)$$,
                  $$VALUES (0)$$, 'nor relinquish it');
SELECT is((SELECT count(*)::int FROM relaybus.claim('shared', 10, '30 seconds', ARRAY['hold'])), 0,
          'nor does a claim under the same name without a holder');
SELECT results_eq(format($$SELECT epoch, holder, cardinality(in_flight) FROM relaybus.lane_state
                            WHERE handler = 'hold' AND lane = %s$$, :lane),
                  format($$VALUES (%s::bigint, 'A'::text, 1)$$, :epoch_a),
                  'the lane is still A''s: same epoch, same holder, b1 in flight');
SELECT pg_sleep(0.7);  -- past the lease: a claim leases for up to 1.5 x lease
CREATE TEMP TABLE b_claim AS SELECT * FROM dblink('b',
  $$SELECT lease_token, event_id, attempts FROM relaybus.claim('shared', 10, '30 seconds', ARRAY['hold'], 'B')$$)
  AS t(lease_token text, event_id text, attempts int);
SELECT results_eq('SELECT event_id, attempts FROM b_claim ORDER BY event_id', format($$VALUES ('b1', 1), (%L, 0)$$, :'b2'),
                  'once A''s lease expired, B takes the lane over: b1 again, charged the lost attempt, and b2');
SELECT results_eq(format($$SELECT epoch > %s, holder FROM relaybus.lanes WHERE handler = 'hold' AND lane = %s$$,
                         :epoch_a, :lane),
                  $$VALUES (true, 'B'::text)$$, 'the lane changed hands: newer epoch, holder B');
SELECT results_eq($$SELECT * FROM dblink('a', format('SELECT relaybus.complete(%L)',
                      (SELECT lease_token FROM a_claim))) AS t(ok boolean)$$,
                  $$VALUES (false)$$, 'A''s token is fenced');
SELECT dblink_disconnect('a');
SELECT dblink_disconnect('b');

--------------------------------------------------------------------------------
-- 3. Without a holder, today's binding: a lane of a closed connection is an orphan, taken
--    over at once by the next claim under the name.
--------------------------------------------------------------------------------
SELECT rb_reset();
SELECT relaybus.subscribe('hold', ARRAY['t']);
SELECT relaybus.publish('t', '{}', NULL, 'n1');
SELECT rb_connect('old');
SELECT pid AS old_pid FROM dblink('old', 'SELECT pg_backend_pid()') AS t(pid int) \gset
CREATE TEMP TABLE old_claim AS SELECT * FROM dblink('old',
  $$SELECT lease_token, event_id FROM relaybus.claim('nul', 1, '30 seconds', ARRAY['hold'])$$)
  AS t(lease_token text, event_id text);
SELECT dblink_disconnect('old');
SELECT ok(rb_wait_backend_gone(:old_pid), 'the holder-less claimer''s connection is gone');
SELECT results_eq($$SELECT event_id, attempts FROM relaybus.claim('nul', 10, '30 seconds', ARRAY['hold'])$$,
                  $$VALUES ('n1', 1)$$, 'the next claim under the name takes the orphan over at once, charging it');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM old_claim)), 'the old token is fenced');

--------------------------------------------------------------------------------
-- 4. Whose lane is it: core::is_callers (through claim) and its SQL copy
--    RELAYBUS_LANE_IS_CALLERS_SQL (through extend_lease) given every binding.
--------------------------------------------------------------------------------
SELECT rb_reset();
SELECT relaybus.subscribe('hold', ARRAY['t']);
-- bind(binding): lane of 'z1' held by worker 'who' with a live lease, bound as said, one
-- delivery pending in it and none in flight.
-- (0.3.0: z1 is published once, committed, before the loop; bind puts its lane back to
-- nothing finished and nothing running, as the lane's next lane_progress row.)
SELECT relaybus.publish('t', '{}', NULL, 'z1');
CREATE FUNCTION pg_temp.bind(binding text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM relaybus.exceptions;
  UPDATE relaybus.lanes SET lease_owner = 'who', lease_expires_at = now() + interval '1 hour',
         holder = CASE binding WHEN 'holder A' THEN 'A' WHEN 'holder B' THEN 'B' END,
         holder_pid = CASE binding WHEN 'this backend' THEN pg_backend_pid() WHEN 'a gone backend' THEN 2147483000 END,
         holder_started = CASE WHEN binding IN ('this backend', 'a gone backend')
                               THEN (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) END
   WHERE handler = 'hold' AND lane = relaybus.lane_of('z1');
  INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
  SELECT s.handler, s.lane, s.progress_seq + 1, 0, '{}', '{}', '{}'
    FROM relaybus.lane_state s WHERE s.handler = 'hold' AND s.lane = relaybus.lane_of('z1');
END
$$;
CREATE TEMP TABLE whose (binding text, caller text, renewed boolean, kept boolean);
DO $$
DECLARE
  b text; c text; renewed boolean; kept boolean; before bigint;
BEGIN
  FOREACH b IN ARRAY ARRAY['holder A', 'holder B', 'this backend', 'a gone backend'] LOOP
    FOREACH c IN ARRAY ARRAY['A', NULL] LOOP
      PERFORM pg_temp.bind(b);
      renewed := relaybus.extend_lease('who', '30 seconds', c) = 1;
      PERFORM pg_temp.bind(b);
      SELECT epoch INTO before FROM relaybus.lanes WHERE handler = 'hold' AND lane = relaybus.lane_of('z1');
      -- kept: the claim ran z1 from the lane without moving it to a new epoch (read in a
      -- statement of its own, to see what the claim wrote)
      kept := EXISTS (SELECT 1 FROM relaybus.claim('who', 10, '30 seconds', ARRAY['hold'], c) WHERE event_id = 'z1');
      kept := kept AND (SELECT epoch FROM relaybus.lanes WHERE handler = 'hold' AND lane = relaybus.lane_of('z1')) = before;
      INSERT INTO whose VALUES (b, coalesce(c, 'none'), renewed, kept);
    END LOOP;
  END LOOP;
END
$$;
SELECT is(renewed, kept, format('lane bound to %s, caller holder %s: the SQL copy and core agree', binding, caller))
  FROM whose ORDER BY binding, caller;
SELECT results_eq($$SELECT binding, caller FROM whose WHERE kept ORDER BY 1, 2$$,
                  $$VALUES ('holder A', 'A'), ('this backend', 'none')$$,
                  'the caller''s lanes are exactly: its own holder''s, or without a holder its live backend''s');

SELECT throws_ok($$SELECT relaybus.claim('w', 1, '30 seconds', NULL, '')$$, '22023', 'holder must not be empty',
                 'an empty holder is refused (22023)');
SELECT throws_ok(format('SELECT relaybus.extend_lease(%L, %L, %L)', 'w', '30 seconds', repeat('h', 1001)), '22023', NULL,
                 'an over-long holder is refused (22023)');

SELECT rb_reset();
SELECT * FROM finish();
