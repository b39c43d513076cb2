-- Port of test/pgtap/22_lane_in_flight_cap.sql to relaybus 0.3.0. Guarantee: a lane has at
-- most 32 deliveries in flight (core::kMaxInFlightPerLane), so its row, which lists them,
-- stays small enough for heap-only updates. A batch larger than that spreads over other
-- lanes; work beyond the cap in one lane waits for room, and is not lost. If the claim's
-- room check (core::lane_room in plan_lane) went, the first claim below would take all 40
-- deliveries of the one lane.
-- 0.3.0 lists two kinds of running positions in a lane row: in_flight (window picks) and
-- retrying (exception rows being run again, e.g. after a release); the cap counts both
-- (positions_claim.cpp: lane_room(in_flight + retrying)), checked at the end. Every
-- assertion of 0.2's test carries over unchanged (in_flight now lists positions, whose
-- count is what it checks).
SELECT rb_reset();
SELECT plan(11);

SELECT relaybus.subscribe('cap', ARRAY['cap.event']);
-- 40 unkeyed events whose deliveries all land in one lane, and 10 in another.
CREATE TEMP TABLE ids AS
  SELECT id, relaybus.lane_of(id) AS lane
    FROM (SELECT 'cap-' || i AS id FROM generate_series(1, 50000) i) c;
SELECT relaybus.lane_of('cap-1') AS full_lane \gset
SELECT min(lane) AS other_lane FROM ids WHERE lane <> :full_lane \gset
SELECT count(*) FROM relaybus.publish_batch((
  SELECT jsonb_agg(jsonb_build_object('type', 'cap.event', 'id', id) ORDER BY id) FROM (
    (SELECT id FROM ids WHERE lane = :full_lane ORDER BY id LIMIT 40)
    UNION ALL (SELECT id FROM ids WHERE lane = :other_lane ORDER BY id LIMIT 10)) s));

CREATE TEMP TABLE first AS
  SELECT lease_token, relaybus.lane_of(event_id) AS lane FROM relaybus.claim('cap-worker', 100);
SELECT is((SELECT count(*)::int FROM first WHERE lane = :full_lane), 32,
          'a claim of 100 takes 32 deliveries of the full lane');
SELECT is((SELECT count(*)::int FROM first WHERE lane = :other_lane), 10,
          'and fills the batch from the other lane');
SELECT is((SELECT cardinality(in_flight) FROM relaybus.lane_state WHERE handler = 'cap' AND lane = :full_lane),
          32, 'the full lane lists 32 in flight');
SELECT is((SELECT count(*)::int FROM relaybus.claim('cap-worker', 100)), 0,
          'while 32 are in flight, the lane gives nothing more');

SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM first WHERE lane = :full_lane LIMIT 5)),
          5, 'five of them complete');
CREATE TEMP TABLE second AS SELECT lease_token, event_id FROM relaybus.claim('cap-worker', 100);
SELECT is((SELECT count(*)::int FROM second), 5,
          'and the next claim takes five more, up to the cap again');

-- 0.3.0: two released positions go to exception rows (due at once); the next claim runs them
-- again from there (retrying), and they still count against the cap.
CREATE TEMP TABLE released AS SELECT event_id, relaybus.release(lease_token) AS ok
  FROM (SELECT * FROM second ORDER BY event_id LIMIT 2) s;
SELECT is((SELECT count(*)::int FROM released WHERE ok), 2, 'two of them are released');
SELECT results_eq($$SELECT cardinality(in_flight), cardinality(retrying) FROM relaybus.lane_state
                     WHERE handler = 'cap' AND lane = $$ || :full_lane,
                  $$VALUES (30, 0)$$, 'the lane runs 30');
SELECT set_eq($$SELECT event_id FROM relaybus.claim('cap-worker', 100)$$, $$SELECT event_id FROM released$$,
              'the next claim takes the two released deliveries again, and nothing beyond the cap');
SELECT results_eq($$SELECT cardinality(in_flight), cardinality(retrying) FROM relaybus.lane_state
                     WHERE handler = 'cap' AND lane = $$ || :full_lane,
                  $$VALUES (30, 2)$$, 'the lane runs 30 window positions and 2 retries: 32');
SELECT is((SELECT count(*)::int FROM relaybus.claim('cap-worker', 100)), 0,
          'retries count against the cap: nothing more');

SELECT * FROM finish();
