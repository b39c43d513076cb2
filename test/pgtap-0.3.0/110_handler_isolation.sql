-- Guarantee: handler isolation, lanes are leased per handler
-- (test/pgtap/10_handler_isolation.sql on 0.3.0). Many services share one database: a
-- worker of handler A holding lane L (with work in flight, under a long lease) must never
-- stall handler B's deliveries in the same lane L, and per-key ordering is per (handler,
-- key), so A's in-flight delivery of key k does not hold back B's deliveries of k. The
-- keys below are chosen to share one lane (relaybus.lane_of); with a global lane, B's
-- claims here would return nothing.
--
-- How 0.3.0 stores it: each (handler, lane) has its own positions and cursor; a lane lists
-- the positions it runs (0.2: event ids), and a completed delivery is finished, not
-- deleted (list_deliveries no longer lists it).
SELECT rb_reset();
SELECT plan(18);

SELECT relaybus.subscribe('svc_a', ARRAY['user.created']);
SELECT relaybus.subscribe('svc_b', ARRAY['user.created']);

SELECT k AS mate FROM (SELECT 'user-' || g AS k FROM generate_series(1, 5000) AS g) s
 WHERE k <> 'user-0' AND relaybus.lane_of(k) = relaybus.lane_of('user-0') LIMIT 1 \gset
SELECT relaybus.lane_of('user-0') AS lane \gset
SELECT is(relaybus.lane_of(:'mate'), relaybus.lane_of('user-0'), 'two keys in one lane');

SELECT relaybus.publish('user.created', '{}', 'user-0', 'e1');
SELECT relaybus.publish('user.created', '{}', :'mate', 'e2');
SELECT is((SELECT count(DISTINCT lane)::int FROM relaybus.deliveries), 1, 'all four deliveries are in one lane number');

-- A's worker takes lane L for svc_a and sits on it.
CREATE TEMP TABLE ca AS SELECT * FROM relaybus.claim('wa', 10, '30 seconds', ARRAY['svc_a']);
SELECT bag_eq('SELECT event_id, handler FROM ca', $$VALUES ('e1', 'svc_a'), ('e2', 'svc_a')$$,
              'A''s worker claims both svc_a deliveries of lane L');
SELECT is((SELECT array_agg(DISTINCT handler) FROM relaybus.lanes WHERE lease_owner = 'wa'), ARRAY['svc_a'],
          'A''s worker leased only svc_a lanes');
SELECT is((SELECT lease_owner FROM relaybus.lanes WHERE handler = 'svc_b' AND lane = :lane), NULL,
          'svc_b''s lane L is still free');

-- B's worker is not stalled.
CREATE TEMP TABLE cb AS SELECT * FROM relaybus.claim('wb', 10, '30 seconds', ARRAY['svc_b']);
SELECT bag_eq('SELECT event_id, handler, attempts FROM cb', $$VALUES ('e1', 'svc_b', 0), ('e2', 'svc_b', 0)$$,
              'B''s worker gets svc_b''s deliveries of lane L at once');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM cb)), 2, 'and completes them');
SELECT bag_eq('SELECT event_id, handler, status FROM relaybus.list_deliveries()',
              $$VALUES ('e1', 'svc_a', 'processing'), ('e2', 'svc_a', 'processing')$$,
              'A''s deliveries are untouched, still in flight with A');
SELECT is((SELECT in_flight FROM relaybus.lane_state WHERE handler = 'svc_a' AND lane = :lane),
          ARRAY(SELECT position FROM relaybus.deliveries WHERE handler = 'svc_a' AND event_id IN ('e1', 'e2')
                 ORDER BY position),
          'A''s lane still lists its in-flight deliveries (their positions)');
SELECT is((SELECT acked_upto FROM relaybus.lane_state WHERE handler = 'svc_a' AND lane = :lane), 0::bigint,
          'and its cursor did not move with B''s completions');

-- Per-key ordering is per handler: svc_a's e1 (key user-0) in flight does not block
-- svc_b's next delivery of user-0; a worker claiming for every handler gets svc_b's only.
SELECT relaybus.publish('user.created', '{}', 'user-0', 'e3');
SELECT is(relaybus.relinquish('wb'), 1, 'B''s worker hands its idle lane back');
CREATE TEMP TABLE cany AS SELECT * FROM relaybus.claim('wany', 10, '30 seconds', NULL);
SELECT results_eq('SELECT event_id, handler FROM cany', $$VALUES ('e3', 'svc_b')$$,
                  'an all-handler worker gets svc_b''s e3, and nothing of svc_a (lane held, key busy)');
SELECT ok(relaybus.complete((SELECT lease_token FROM cany)), 'e3 for svc_b completed');

-- A's own work was never disturbed.
SELECT is((SELECT epoch FROM relaybus.lanes WHERE handler = 'svc_a' AND lane = :lane), 1::bigint,
          'A''s lane never changed hands');
SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM ca)), 2, 'A completes its deliveries');
CREATE TEMP TABLE ca2 AS SELECT * FROM relaybus.claim('wa', 10, '30 seconds', ARRAY['svc_a']);
SELECT results_eq('SELECT event_id, handler FROM ca2', $$VALUES ('e3', 'svc_a')$$,
                  'then A gets its e3');
SELECT ok(relaybus.complete((SELECT lease_token FROM ca2)), 'and completes it');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()), 0, 'every delivery of both handlers handled once');

SELECT * FROM finish();
