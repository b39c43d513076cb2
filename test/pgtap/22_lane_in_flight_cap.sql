-- Guarantee: a lane has at most 32 deliveries in flight (core::kMaxInFlightPerLane), so
-- its row, which lists them, stays small enough for heap-only updates. A batch larger
-- than that spreads over other lanes; work beyond the cap in one lane waits for room,
-- and is not lost. If the claim's per-lane LIMIT or the planner's room check went, the
-- first claim below would take all 40 deliveries of the one lane.
SELECT rb_reset();
SELECT plan(6);

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
SELECT is((SELECT cardinality(in_flight) FROM relaybus.lanes WHERE handler = 'cap' AND lane = :full_lane),
          32, 'the full lane lists 32 in flight');
SELECT is((SELECT count(*)::int FROM relaybus.claim('cap-worker', 100)), 0,
          'while 32 are in flight, the lane gives nothing more');

SELECT is(relaybus.complete_many(ARRAY(SELECT lease_token FROM first WHERE lane = :full_lane LIMIT 5)),
          5, 'five of them complete');
SELECT is((SELECT count(*)::int FROM relaybus.claim('cap-worker', 100)), 5,
          'and the next claim takes five more, up to the cap again');

SELECT * FROM finish();
