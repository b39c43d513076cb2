-- Guarantee: a claim that passes over the idle lanes its worker holds (src/pg/lane_changes.hpp:
-- lanes this backend found idle, whose publish counter has not moved since) never misses
-- work that arrives in them. A publish that commits in another session, and a requeue of a
-- dead row, move the lane's counter at commit: the very next claim looks at the lane again.
-- Without the counters moving, each claim below would pass over the lane for a second and
-- return nothing.
SELECT rb_reset();
SELECT plan(7);

SELECT relaybus.subscribe('lc', ARRAY['lc.event'], max_attempts => 1);
SELECT rb_connect('lc_pub');
SELECT relaybus.lane_of('k') AS lane \gset

-- The worker takes the lane, completes its delivery, and claims again: the lane is idle,
-- held, and this backend remembers it so.
SELECT relaybus.publish('lc.event', '{}', 'k', 'lc-1') AS published \gset
SELECT relaybus.complete(lease_token) AS completed
  FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc']) \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc'])), 0,
          'nothing left: the lane is idle');
SELECT is((SELECT lease_owner FROM relaybus.lanes WHERE handler = 'lc' AND lane = :lane), 'lw',
          'and still held by the worker');

-- 1. Another session publishes into the lane.
SELECT * FROM dblink('lc_pub', $$SELECT relaybus.publish('lc.event', '{}', 'k', 'lc-2')$$)
  AS t(id text) \gset
CREATE TEMP TABLE c2 AS
  SELECT lease_token, event_id FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc']);
SELECT is((SELECT array_agg(event_id) FROM c2), ARRAY['lc-2'],
          'the next claim takes what another session published into the idle lane');

-- 2. It fails for good (one attempt), the lane is idle again; a requeue makes it work.
SELECT is((SELECT relaybus.fail(lease_token, 'boom') FROM c2), 'dead', 'lc-2 is dead');
SELECT is((SELECT count(*)::int FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc'])), 0,
          'nothing to claim: the lane is idle again');
SELECT ok((SELECT r FROM dblink('lc_pub', $$SELECT relaybus.requeue('lc-2', 'lc')$$) AS t(r boolean)),
          'another session requeues it');
SELECT is((SELECT array_agg(event_id) FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc'])),
          ARRAY['lc-2'], 'the next claim takes the requeued delivery');

SELECT dblink_disconnect('lc_pub');
SELECT * FROM finish();
