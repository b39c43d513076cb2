-- Guarantee: attempts and poison messages (test/pgtap/07_attempts.sql on 0.3.0). A claim
-- charges nothing (it writes no delivery or exception row); an attempt is charged when it
-- ends badly: fail +1, bury +1, and a takeover +1 for each delivery that was in the lost
-- lane's in-flight list (not for the lane's other pending deliveries), without moving
-- available_at (no backoff: a crash is retried at once). A poison delivery whose workers
-- keep dying is therefore dead-lettered after max_attempts takeovers. Exact attempt
-- counts, due times and the final 'dead' status are asserted, so charging at claim, double
-- charging, missing charges or a crash loop that never ends would all fail here.
--
-- How 0.3.0 stores it: a charged attempt is an exception row (status, attempts,
-- available_at, last_error), where 0.2 updated the delivery row; a delivery without one
-- has 0 attempts. Delivery rows are never updated.
SELECT rb_reset();
SELECT plan(30);

SELECT relaybus.subscribe('att', ARRAY['t']);

-- (event, status, attempts) of every delivery not finished yet.
CREATE FUNCTION pg_temp.unfinished()
  RETURNS TABLE(event_id text, status text, attempts int, available_at timestamptz) LANGUAGE sql AS $$
  SELECT event_id, CASE status WHEN 'processing' THEN 'pending' ELSE status END, attempts, available_at
    FROM relaybus.list_deliveries(NULL, NULL, 1000000)
$$;

-- Claim charges nothing and does not touch the delivery row.
SELECT relaybus.publish('t', '{}', NULL, 'a1');
CREATE TEMP TABLE before_claim AS SELECT * FROM relaybus.deliveries;
CREATE TEMP TABLE c1 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['att']);
SELECT results_eq('SELECT event_id, attempts FROM c1', $$VALUES ('a1', 0)$$,
                  'the first claim reports 0 attempts');
SELECT set_eq('SELECT * FROM relaybus.deliveries', 'SELECT * FROM before_claim',
              'the claim left the delivery row exactly as it was');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions), 0,
          'and wrote no exception row (0.3.0: where attempts and claims live)');

-- fail charges one.
SELECT is(relaybus.fail((SELECT lease_token FROM c1), 'e', now()), 'retry', 'fail');
SELECT is((SELECT attempts FROM relaybus.exceptions WHERE event_id = 'a1'), 1, 'fail charged one attempt');
CREATE TEMP TABLE c2 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['att']);
SELECT is((SELECT attempts FROM c2), 1, 'the next claim reports the one attempt and charges none');
SELECT is((SELECT attempts FROM relaybus.exceptions WHERE event_id = 'a1'), 1, 'still one attempt after the claim');

-- release charges nothing.
SELECT ok(relaybus.release((SELECT lease_token FROM c2)), 'release');
SELECT is((SELECT attempts FROM relaybus.exceptions WHERE event_id = 'a1'), 1, 'release charged nothing');

-- bury charges one.
SELECT ok(relaybus.bury((SELECT lease_token FROM relaybus.claim('w', 10, '30 seconds', ARRAY['att']))), 'bury');
SELECT results_eq($$SELECT status, attempts FROM relaybus.exceptions WHERE event_id = 'a1'$$,
                  $$VALUES ('dead', 2)$$, 'bury charged one attempt and dead-lettered');
SELECT relaybus.relinquish('w');

-- Takeover charges each in-flight delivery one attempt, no backoff, and nothing else.
-- Four unkeyed events in one lane; the doomed worker takes three of them.
CREATE TEMP TABLE same_lane AS
  SELECT id FROM (SELECT 'x' || g AS id FROM generate_series(1, 5000) AS g) s
   WHERE relaybus.lane_of(id) = relaybus.lane_of('x1') ORDER BY id LIMIT 4;
SELECT relaybus.publish('t', '{}', NULL, id) FROM same_lane;
CREATE TEMP TABLE due_before AS SELECT event_id, available_at FROM pg_temp.unfinished() WHERE status = 'pending';
CREATE TEMP TABLE doomed AS SELECT * FROM relaybus.claim('doomed', 3, '150 ms', ARRAY['att']);
SELECT is((SELECT count(*)::int FROM doomed), 3, 'the doomed worker has three deliveries of one lane in flight');
SELECT pg_sleep(0.3);  -- past the lease: a claim leases for up to 1.5 x lease
SELECT relaybus.take_over_expired();
SELECT set_eq($$SELECT d.event_id, d.attempts, d.status FROM pg_temp.unfinished() d JOIN doomed USING (event_id)$$,
              $$SELECT event_id, 1 AS attempts, 'pending' AS status FROM doomed$$,
              'each in-flight delivery of the lost lane was charged exactly one attempt');
SELECT set_eq($$SELECT event_id, attempts FROM pg_temp.unfinished()
                 WHERE status = 'pending' AND event_id NOT IN (SELECT event_id FROM doomed)$$,
              $$SELECT id, 0 FROM same_lane WHERE id NOT IN (SELECT event_id FROM doomed)$$,
              'the lane''s delivery that was not in flight was not charged');
SELECT is((SELECT count(*)::int FROM relaybus.exceptions x JOIN same_lane s ON s.id = x.event_id
            WHERE x.event_id NOT IN (SELECT event_id FROM doomed)), 0,
          'and has no exception row');
-- 0.3.0 by design: a charged position's exception row is due at the takeover's time
-- (core::takeover_of_positions: now plus after_lost_attempt's delay, which is 0), where 0.2
-- left the delivery's available_at as it was. Either way no backoff: due at once, and no
-- later than the takeover. The delivery that was not in flight keeps its due time.
SELECT ok((SELECT bool_and(u.available_at >= b.available_at AND u.available_at <= now())
             FROM pg_temp.unfinished() u JOIN due_before b USING (event_id)
            WHERE u.event_id IN (SELECT event_id FROM doomed)),
          'the takeover put no backoff on the charged deliveries: due at once');
SELECT set_eq($$SELECT event_id, available_at FROM pg_temp.unfinished()
                 WHERE status = 'pending' AND event_id NOT IN (SELECT event_id FROM doomed)$$,
              'SELECT event_id, available_at FROM due_before WHERE event_id NOT IN (SELECT event_id FROM doomed)',
              'the takeover moved no due time of the lane''s delivery that was not in flight');
SELECT ok((SELECT bool_and(x.last_error LIKE 'lease lost%') FROM relaybus.exceptions x JOIN doomed USING (event_id)),
          'the charged deliveries record why');
SELECT bag_eq($$SELECT event_id, attempts FROM relaybus.claim('next', 10, '30 seconds', ARRAY['att'])$$,
              $$SELECT id, CASE WHEN id IN (SELECT event_id FROM doomed) THEN 1 ELSE 0 END FROM same_lane$$,
              'all four are claimable again at once, reporting their charged attempts');

-- A poison delivery whose workers keep dying ends dead after max_attempts takeovers.
SELECT rb_reset();
SELECT relaybus.subscribe('poison', ARRAY['p'], 3);
SELECT relaybus.publish('p', '{}', NULL, 'bad');

CREATE TEMP TABLE d1 AS SELECT * FROM relaybus.claim('dying-1', 10, '100 ms', ARRAY['poison']);
SELECT results_eq('SELECT event_id, attempts FROM d1', $$VALUES ('bad', 0)$$, 'worker 1 claims it, then dies');
SELECT pg_sleep(0.2);  -- past the lease: a claim leases for up to 1.5 x lease
-- takeover by the next claim
CREATE TEMP TABLE d2 AS SELECT * FROM relaybus.claim('dying-2', 10, '100 ms', ARRAY['poison']);
SELECT results_eq('SELECT event_id, attempts FROM d2', $$VALUES ('bad', 1)$$,
                  'worker 2 takes the lane over: the crash cost attempt 1');
SELECT results_eq($$SELECT status, attempts FROM relaybus.exceptions$$, $$VALUES ('pending', 1)$$,
                  'after takeover 1: pending, 1 attempt');
SELECT pg_sleep(0.2);  -- past the lease: a claim leases for up to 1.5 x lease
-- takeover by take_over_expired (the background worker's path)
SELECT relaybus.take_over_expired();
SELECT results_eq($$SELECT status, attempts FROM relaybus.exceptions$$, $$VALUES ('pending', 2)$$,
                  'after takeover 2: pending, 2 attempts');
CREATE TEMP TABLE d3 AS SELECT * FROM relaybus.claim('dying-3', 10, '100 ms', ARRAY['poison']);
SELECT results_eq('SELECT event_id, attempts FROM d3', $$VALUES ('bad', 2)$$, 'worker 3 claims it, then dies');
SELECT pg_sleep(0.2);  -- past the lease: a claim leases for up to 1.5 x lease
CREATE TEMP TABLE d4 AS SELECT * FROM relaybus.claim('survivor', 10, '30 seconds', ARRAY['poison']);
SELECT is((SELECT count(*)::int FROM d4), 0, 'the third takeover does not hand it out again');
SELECT results_eq($$SELECT status, attempts FROM relaybus.exceptions$$, $$VALUES ('dead', 3)$$,
                  'after takeover 3 = max_attempts it is dead');
SELECT is((SELECT count(*)::int FROM relaybus.lane_state WHERE handler = 'poison'
             AND (cardinality(in_flight) > 0 OR cardinality(retrying) > 0)), 0,
          'no lane lists it in flight');
SELECT is((SELECT count(*)::int FROM relaybus.claim('anyone', 10, '30 seconds', NULL)), 0,
          'the dead poison delivery is never claimed again');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM d3)), 'the last dying worker''s token is fenced');
SELECT results_eq($$SELECT pending, processing, dead FROM relaybus.statistics() WHERE handler = 'poison'$$,
                  $$VALUES (0::bigint, 0::bigint, 1::bigint)$$, 'statistics: one dead letter');

SELECT * FROM finish();
