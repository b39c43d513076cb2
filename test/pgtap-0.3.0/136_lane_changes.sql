-- Guarantee: a claim that passes over the lanes its worker holds (src/pg/lane_changes.hpp:
-- lanes this backend probed, whose counter has not moved since) misses no work that a
-- publish or a requeue brings into them, nor room that a completion makes: each moves the
-- lane's counter as it commits, and the very next claim looks at the lane again (without
-- the counters moving, parts 1, 2 and 5 fail). Work that moves no counter (part 3: a row
-- written by hand) is seen within a second, and what a claim saw in a transaction that has
-- written is not remembered, so a rollback brings its work back at once (part 4). Free lanes
-- found idle are passed over the same way (part 6).
SELECT rb_reset();
SELECT plan(20);

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
CREATE TEMP TABLE c4 AS
  SELECT lease_token, event_id FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc']);
SELECT is((SELECT array_agg(event_id) FROM c4), ARRAY['lc-2'],
          'the next claim takes the requeued delivery');

-- 3. A delivery written by hand into the idle lane moves no counter: passed over, for at
-- most a second.
SELECT relaybus.complete(lease_token) AS done FROM c4 \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc'])), 0,
          'the lane is idle once more');
INSERT INTO relaybus.events (id, type, key, payload, handlers)
  VALUES ('lc-hand', 'lc.event', 'k', '{}', ARRAY['lc']);
INSERT INTO relaybus.deliveries (handler, lane, position, event_id, key, available_at, created_at)
  SELECT 'lc', :lane, max(position) + 1, 'lc-hand', 'k', now(), now()
    FROM relaybus.deliveries WHERE handler = 'lc' AND lane = :lane;
SELECT is((SELECT count(*)::int FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc'])), 0,
          'a claim passes over the idle lane: nothing moved its counter');
SELECT pg_sleep(1.1) AS slept \gset
CREATE TEMP TABLE c3 AS
  SELECT lease_token, event_id FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc']);
SELECT is((SELECT array_agg(event_id) FROM c3), ARRAY['lc-hand'],
          'a second later the lane is looked at again');
SELECT relaybus.complete(lease_token) AS done FROM c3 \gset

-- 4. In a transaction that writes, a claim that finds the lane idle is not remembered.
SELECT relaybus.publish('lc.event', '{}', 'k', 'lc-3') AS published \gset
BEGIN;
SELECT relaybus.complete(lease_token) AS done
  FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc']) \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc'])), 0,
          'in the transaction, the lane is idle after lc-3''s completion');
ROLLBACK;
SELECT is((SELECT array_agg(event_id) FROM relaybus.claim('lw', 10, '1 hour', ARRAY['lc'])),
          ARRAY['lc-3'], 'after the rollback the next claim takes lc-3 again at once');

-- 5. A lane with work and no room (32 in flight): remembered so, passed over by the next
-- claim, until another session's completion makes room.
SELECT relaybus.subscribe('lc5', ARRAY['lc5.event']);
SELECT count(relaybus.publish('lc5.event', '{}', k, 'lc5-' || k)) AS published
  FROM (SELECT 'f' || g AS k FROM generate_series(1, 40000) g
         WHERE relaybus.lane_of('f' || g) = :lane ORDER BY g LIMIT 40) keys \gset
CREATE TEMP TABLE c5 AS
  SELECT lease_token, event_id FROM relaybus.claim('lw', 100, '1 hour', ARRAY['lc5']);
SELECT is((SELECT count(*)::int FROM c5), 32, 'a claim takes the lane''s room: 32 of 40');
SELECT is((SELECT count(*)::int FROM relaybus.claim('lw', 100, '1 hour', ARRAY['lc5'])), 0,
          'the next finds no room');
SELECT is((SELECT r FROM dblink('lc_pub', format('SELECT relaybus.complete(%L)',
            (SELECT lease_token FROM c5 ORDER BY event_id LIMIT 1))) AS t(r boolean)), true,
          'another session completes one of them');
SELECT is((SELECT count(*)::int FROM relaybus.claim('lw', 100, '1 hour', ARRAY['lc5'])), 1,
          'the very next claim takes the room the completion made');

-- 6. A handler nobody holds a lane of: a claim probes its free lanes and remembers them
-- idle. A row written by hand moves no counter: passed over, for at most a second; a publish
-- by another session into another free lane is taken by the very next claim.
SELECT relaybus.subscribe('lc6', ARRAY['lc6.event']);
SELECT is((SELECT count(*)::int FROM relaybus.claim('lw6', 10, '1 hour', ARRAY['lc6'])), 0,
          'nothing to claim: every lane of lc6 is free and idle');
INSERT INTO relaybus.events (id, type, key, payload, handlers)
  VALUES ('lc6-hand', 'lc6.event', 'k', '{}', ARRAY['lc6']);
INSERT INTO relaybus.deliveries (handler, lane, position, event_id, key, available_at, created_at)
  VALUES ('lc6', :lane, 1, 'lc6-hand', 'k', now(), now());
SELECT * FROM dblink('lc_pub', $$SELECT relaybus.publish('lc6.event', '{}', 'other-lane', 'lc6-pub')$$)
  AS t(id text) \gset
SELECT ok(relaybus.lane_of('other-lane') <> :lane, 'the published key is in another lane');
SELECT is((SELECT array_agg(event_id) FROM relaybus.claim('lw6', 10, '1 hour', ARRAY['lc6'])),
          ARRAY['lc6-pub'],
          'the next claim takes the publish, and passes over the free lane written by hand');
SELECT pg_sleep(1.1) AS slept \gset
SELECT is((SELECT array_agg(event_id) FROM relaybus.claim('lw6', 10, '1 hour', ARRAY['lc6'])),
          ARRAY['lc6-hand'], 'a second later the free lane is looked at again');

SELECT dblink_disconnect('lc_pub');
SELECT * FROM finish();
