-- Guarantee: graceful release and relinquish (test/pgtap/08_release_relinquish.sql on
-- 0.3.0). release gives a delivery back without charging an attempt, claimable again at
-- once; relinquish(worker) hands back every lane of the worker that runs nothing, so
-- another worker claims its work immediately instead of waiting for the lease to expire,
-- while lanes with work in flight stay with their holder (whose tokens keep working). A
-- graceful shutdown (release everything, then relinquish) lets another worker take the
-- whole batch at once with attempts 0. Charged attempts, a lane kept or dropped wrongly,
-- or a wait for the lease would fail here.
--
-- How 0.3.0 stores it: a released window position moves to an exception row (pending,
-- attempts 0, due at once; its claims counter moved so the released token is dead); a
-- lane lists what it runs as positions, in_flight (window picks) and retrying (exception
-- rows run again), where 0.2 listed event ids.
SELECT rb_reset();
SELECT plan(32);

SELECT relaybus.subscribe('rr', ARRAY['t']);
-- Two unkeyed events in different lanes.
SELECT relaybus.publish('t', '{}', NULL, 'a');
SELECT relaybus.publish('t', '{}', NULL, 'b');
SELECT relaybus.lane_of('a') AS lane_a, relaybus.lane_of('b') AS lane_b \gset
SELECT position AS pos_b FROM relaybus.deliveries WHERE event_id = 'b' \gset
SELECT isnt(:lane_a, :lane_b, 'a and b live in different lanes');

CREATE TEMP TABLE c1 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['rr']);
SELECT bag_eq('SELECT event_id, attempts FROM c1', $$VALUES ('a', 0), ('b', 0)$$, 'w claims a and b');

-- release: no attempt, back at once.
SELECT ok(relaybus.release((SELECT lease_token FROM c1 WHERE event_id = 'a')), 'release returns true');
SELECT results_eq($$SELECT status, attempts, available_at <= now() FROM relaybus.exceptions WHERE event_id = 'a'$$,
                  $$VALUES ('pending', 0, true)$$, 'released: pending, no attempt charged, due now');
SELECT is((SELECT in_flight || retrying FROM relaybus.lane_state WHERE handler = 'rr' AND lane = :lane_a), '{}'::bigint[],
          'the released delivery left its lane''s in-flight lists');
CREATE TEMP TABLE c2 AS SELECT * FROM relaybus.claim('w', 10, '30 seconds', ARRAY['rr']);
SELECT results_eq('SELECT event_id, attempts FROM c2', $$VALUES ('a', 0)$$,
                  'claimable again at once, with attempts still 0');
SELECT ok(relaybus.release((SELECT lease_token FROM c2)), 'released again');
SELECT is((SELECT attempts FROM relaybus.exceptions WHERE event_id = 'a'), 0, 'two releases, still 0 attempts');
SELECT ok(NOT relaybus.complete((SELECT lease_token FROM c2)) AND NOT relaybus.complete((SELECT lease_token FROM c1 WHERE event_id = 'a')),
          'the released tokens are dead');

-- Without relinquish another worker would wait for w's lease on lane a.
SELECT is((SELECT count(*)::int FROM relaybus.claim('w2', 10, '30 seconds', ARRAY['rr'])), 0,
          'while w holds lane a under a live lease, w2 gets nothing');

-- relinquish hands back the idle lane only.
SELECT is(relaybus.relinquish('w'), 1, 'relinquish hands back one lane: the one that runs nothing');
SELECT is((SELECT lease_owner FROM relaybus.lanes WHERE handler = 'rr' AND lane = :lane_a), NULL,
          'lane a is free');
SELECT is((SELECT lease_owner FROM relaybus.lanes WHERE handler = 'rr' AND lane = :lane_b), 'w',
          'lane b (b in flight) is still w''s');
SELECT is((SELECT in_flight FROM relaybus.lane_state WHERE handler = 'rr' AND lane = :lane_b), ARRAY[:pos_b::bigint],
          'lane b still lists b''s position in flight');
CREATE TEMP TABLE c3 AS SELECT * FROM relaybus.claim('w2', 10, '30 seconds', ARRAY['rr']);
SELECT results_eq('SELECT event_id, attempts FROM c3', $$VALUES ('a', 0)$$,
                  'w2 claims a immediately (no lease wait), but not b');
SELECT ok(relaybus.complete((SELECT lease_token FROM c1 WHERE event_id = 'b')),
          'w''s token for b still completes: its lane was kept');
SELECT ok(relaybus.complete((SELECT lease_token FROM c3)), 'w2 completes a');
SELECT is((SELECT count(*)::int FROM relaybus.list_deliveries()), 0, 'both handled once');

-- Once b completed, lane b runs nothing either.
SELECT is(relaybus.relinquish('w'), 1, 'after completing b, relinquish hands lane b back');
SELECT is((SELECT count(*)::int FROM relaybus.lanes WHERE lease_owner = 'w'), 0, 'w holds nothing');
SELECT is(relaybus.relinquish('w'), 0, 'relinquish of a worker that holds nothing returns 0');

-- A claim also hands back held lanes that run nothing, once their lease is due for renewal
-- (before that it keeps them as they are: no write per claim for a briefly idle lane),
-- unless a delivery was published into them since about their last renewal (half a lease).
SELECT relaybus.publish('t', '{}', NULL, 'c');
CREATE TEMP TABLE c4 AS SELECT * FROM relaybus.claim('w3', 10, '30 seconds', ARRAY['rr']);
SELECT ok(relaybus.complete((SELECT lease_token FROM c4)), 'w3 completes c');
SELECT is((SELECT count(*)::int FROM relaybus.claim('w3', 10, '30 seconds', ARRAY['rr'])), 0, 'w3 finds nothing more');
SELECT is((SELECT count(*)::int FROM relaybus.lanes WHERE lease_owner = 'w3'), 1,
          'w3 keeps its idle lane while more than the lease is left');
UPDATE relaybus.lanes SET lease_expires_at = now() + interval '20 seconds' WHERE lease_owner = 'w3';
SELECT is((SELECT count(*)::int FROM relaybus.claim('w3', 10, '30 seconds', ARRAY['rr'])), 0, 'w3 still finds nothing');
SELECT ok((SELECT lease_expires_at > now() + interval '44 seconds' FROM relaybus.lanes WHERE lease_owner = 'w3'),
          'that claim renewed w3''s idle lane, c having been published since its last renewal');
UPDATE relaybus.lanes SET lease_expires_at = now() + interval '20 seconds' WHERE lease_owner = 'w3';
UPDATE relaybus.deliveries SET created_at = now() - interval '16 seconds' WHERE event_id = 'c';
SELECT is((SELECT count(*)::int FROM relaybus.claim('w3', 10, '30 seconds', ARRAY['rr'])), 0, 'w3 still finds nothing');
SELECT is((SELECT count(*)::int FROM relaybus.lanes WHERE lease_owner = 'w3'), 0,
          'a claim hands back w3''s idle lane once nothing was published into it for half a lease');

-- Graceful shutdown: release everything, relinquish, and another worker takes it all at once.
SELECT relaybus.publish('t', '{}', NULL, 'g' || n) FROM generate_series(1, 5) AS n;
CREATE TEMP TABLE c5 AS SELECT * FROM relaybus.claim('stopping', 10, '30 seconds', ARRAY['rr']);
SELECT is((SELECT count(*)::int FROM c5), 5, 'the stopping worker holds 5 deliveries');
SELECT is((SELECT count(*)::int FROM c5 WHERE relaybus.release(lease_token)), 5, 'it releases all 5');
SELECT is(relaybus.relinquish('stopping'), (SELECT count(DISTINCT relaybus.lane_of(event_id))::int FROM c5),
          'and relinquishes every lane it held');
SELECT bag_eq($$SELECT event_id, attempts FROM relaybus.claim('successor', 10, '30 seconds', ARRAY['rr'])$$,
              $$SELECT event_id, 0 FROM c5$$,
              'the successor claims all 5 at once, no attempt charged');

SELECT * FROM finish();
