-- Guarantee: a claim reads only the lease rows it must (src/pg/lease_memory.hpp: the leases
-- this backend read, whose lease counter has not moved since), and misses no change of a
-- lease: every write of a lease row, however it is made (another worker's relinquish, a row
-- edited by hand), moves the lane's lease counter through relaybus.lanes' trigger, and the
-- next claim reads the lane again (without the trigger, parts 2 and 3 fail); a lease that
-- expires is read again once its remembered expiry has passed (part 4), and one due for
-- renewal is renewed from what is remembered (part 6). Part 1 is the point
-- of it: a worker holding every lane of its handler, nothing changed, reads none of them
-- (without the memory, each claim read all 256 rows twice; under a held snapshot each read
-- walks every version of the row the snapshot keeps). A transaction that wrote lease rows
-- remembers nothing and takes nothing remembered (part 5).
SELECT rb_reset();
SELECT plan(23);

SELECT relaybus.subscribe('lm', ARRAY['lm.event']);
SELECT rb_connect('lm_other');
-- One key per lane.
CREATE TEMP TABLE lane_keys AS
  SELECT DISTINCT ON (relaybus.lane_of('k' || g)) relaybus.lane_of('k' || g) AS lane, 'k' || g AS key
    FROM generate_series(1, 20000) g ORDER BY relaybus.lane_of('k' || g), g;
SELECT is((SELECT count(*)::int FROM lane_keys), 256, 'a key for each of the 256 lanes');
SELECT lane AS other_lane, key AS other_key FROM lane_keys WHERE lane = 7 \gset
SELECT lane AS expiring_lane, key AS expiring_key FROM lane_keys WHERE lane = 9 \gset

-- Another worker holds lanes 7 and 9 (a delivery of each in flight; lane 9 for a second).
SELECT relaybus.publish('lm.event', '{}', :'other_key', 'lm-o1') AS published \gset
SELECT relaybus.publish('lm.event', '{}', :'expiring_key', 'lm-e1') AS published \gset
SELECT * FROM dblink('lm_other', $$SELECT lease_token FROM relaybus.claim('other', 1, '1 hour', ARRAY['lm'])
                                    WHERE event_id = 'lm-o1'$$) AS t(token text) \gset other_
SELECT * FROM dblink('lm_other', $$SELECT count(*) FROM relaybus.claim('other', 10, '1 hour', ARRAY['lm'])$$)
  AS t(n bigint) \gset expiring_
SELECT is(:expiring_n::int, 1, 'the other worker runs lm-e1');

-- The worker takes every other lane, completes, and claims again: all 254 idle and held.
SELECT count(relaybus.publish('lm.event', '{}', key, 'lm-' || lane)) AS published
  FROM lane_keys WHERE lane NOT IN (7, 9) \gset
SELECT count(relaybus.complete(lease_token)) AS completed
  FROM relaybus.claim('mw', 1000, '1 hour', ARRAY['lm']) \gset
SELECT is(:completed::int, 254, 'the worker ran one delivery in each of its 254 lanes');
SELECT is((SELECT count(*)::int FROM relaybus.claim('mw', 1000, '1 hour', ARRAY['lm'])), 0,
          'then finds nothing');

-- 1. Nothing changed: the next claim reads no lease row. Counted from the table's statistics,
-- which this session flushes as it goes idle between statements (forced: no 1 s wait);
-- before the lease memory such a claim fetched 512 rows.
SELECT pg_stat_force_next_flush() AS flushed \gset
SELECT pg_stat_clear_snapshot() AS cleared \gset
SELECT idx_tup_fetch + seq_tup_read AS before FROM pg_stat_user_tables
 WHERE relid = 'relaybus.lanes'::regclass \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('mw', 1000, '1 hour', ARRAY['lm'])), 0,
          'a claim with nothing changed finds nothing');
SELECT pg_stat_force_next_flush() AS flushed \gset
SELECT pg_stat_clear_snapshot() AS cleared \gset
SELECT cmp_ok((SELECT idx_tup_fetch + seq_tup_read - :before FROM pg_stat_user_tables
                WHERE relid = 'relaybus.lanes'::regclass), '<', 64::bigint,
              'and reads (almost) no lease row of the 256');

-- 2. A lease edited by hand (the worker's lane 3, due for renewal now) is read again at once.
UPDATE relaybus.lanes SET lease_expires_at = now() + interval '20 seconds'
 WHERE handler = 'lm' AND lane = 3;
SELECT is((SELECT count(*)::int FROM relaybus.claim('mw', 1000, '1 hour', ARRAY['lm'])), 0,
          'the next claim finds nothing to pick');
SELECT ok((SELECT lease_expires_at > now() + interval '1 hour' FROM relaybus.lanes
            WHERE handler = 'lm' AND lane = 3),
          'but renewed the lane whose lease was cut by hand (in use: renewed, not handed back)');

-- 3. The other worker completes lm-o1 and relinquishes lane 7 in its own session; a delivery
-- published into lane 7 then is the worker's at once.
SELECT * FROM dblink('lm_other', format('SELECT relaybus.complete(%L)', :'other_token'))
  AS t(ok boolean) \gset
SELECT * FROM dblink('lm_other', $$SELECT relaybus.relinquish('other')$$) AS t(n int) \gset
SELECT relaybus.publish('lm.event', '{}', :'other_key', 'lm-o2') AS published \gset
SELECT is((SELECT array_agg(event_id) FROM relaybus.claim('mw', 1000, '1 hour', ARRAY['lm'])),
          ARRAY['lm-o2'], 'the worker takes lm-o2 from the lane the other worker gave back');

-- 4. The other worker's lease of lane 9 is cut to 0.4 s (by hand: the worker reads it
-- again at once and remembers its expiry); once it has lapsed, within the second the worker
-- trusts what it remembers, the worker takes the lane over.
UPDATE relaybus.lanes SET lease_expires_at = clock_timestamp() + interval '0.4 seconds'
 WHERE handler = 'lm' AND lane = :expiring_lane;
SELECT is((SELECT count(*)::int FROM relaybus.claim('mw', 1000, '1 hour', ARRAY['lm'])), 0,
          'while the lease lasts, the worker takes nothing of lane 9');
SELECT pg_sleep(0.6) AS slept \gset
SELECT is((SELECT array_agg(event_id || ':' || attempts) FROM relaybus.claim('mw', 1000, '1 hour', ARRAY['lm'])),
          ARRAY['lm-e1:1'], 'after the lease lapsed, the worker takes lm-e1 over, its attempt charged');
SELECT is((SELECT lease_owner FROM relaybus.lanes WHERE handler = 'lm' AND lane = 9), 'mw',
          'lane 9 is the worker''s now');

-- 5. A transaction that claims twice sees the lane it acquired in its first claim, though
-- the lane's lease counter moves only at its commit: a key's second delivery waits for the
-- first, completed in the same transaction.
SELECT relaybus.subscribe('lm5', ARRAY['lm5.event']);
SELECT count(relaybus.publish('lm5.event', '{}', 'k', 'lm5-' || g)) AS published
  FROM generate_series(1, 2) g \gset
BEGIN;
SELECT is((SELECT relaybus.complete(lease_token) FROM relaybus.claim('tw', 10, '1 hour', ARRAY['lm5'])),
          true, 'in one transaction, a claim takes lm5-1 and completes it');
SELECT is((SELECT array_agg(event_id) FROM relaybus.claim('tw', 10, '1 hour', ARRAY['lm5'])),
          ARRAY['lm5-2'], 'and the next claim takes lm5-2 from the lane the first acquired');
COMMIT;

-- 6. A lane the worker runs a delivery in, whose lease falls due for renewal with nothing
-- written since: the claim that remembers it renews it (it must not lapse under its
-- handler). Leases of 0.6 s: 0.9 s given, due once less than 0.6 s is left.
SELECT relaybus.subscribe('lm6', ARRAY['lm6.event']);
SELECT relaybus.lane_of('k') AS lane6 \gset
SELECT relaybus.publish('lm6.event', '{}', 'k', 'lm6-1') AS published \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('rw6', 10, '0.6 seconds', ARRAY['lm6'])), 1,
          'the worker runs lm6-1');
SELECT is((SELECT count(*)::int FROM relaybus.claim('rw6', 10, '0.6 seconds', ARRAY['lm6'])), 0,
          'its next claim finds nothing, and remembers the lane''s lease');
SELECT lease_expires_at AS first_expiry FROM relaybus.lanes WHERE handler = 'lm6' AND lane = :lane6 \gset
SELECT pg_sleep(0.4) AS slept \gset
SELECT is((SELECT count(*)::int FROM relaybus.claim('rw6', 10, '0.6 seconds', ARRAY['lm6'])), 0,
          'a claim once its renewal is due finds nothing to pick');
SELECT ok((SELECT lease_expires_at > :'first_expiry' FROM relaybus.lanes
            WHERE handler = 'lm6' AND lane = :lane6),
          'but renews the lane it runs lm6-1 in, from what it remembers of the lease');

-- 7. An idle lane in use still goes back one renewal in four (core::in_use_lane_rotates):
-- its last finished position a multiple of 4.
SELECT relaybus.subscribe('lm7', ARRAY['lm7.event']);
SELECT relaybus.lane_of('k') AS lane7 \gset
SELECT count(relaybus.publish('lm7.event', '{}', 'k', 'lm7-' || g)) AS published
  FROM generate_series(1, 4) g \gset
SELECT relaybus.complete(lease_token) AS done FROM relaybus.claim('rw7', 10, '30 seconds', ARRAY['lm7']) \gset
SELECT relaybus.complete(lease_token) AS done FROM relaybus.claim('rw7', 10, '30 seconds', ARRAY['lm7']) \gset
SELECT relaybus.complete(lease_token) AS done FROM relaybus.claim('rw7', 10, '30 seconds', ARRAY['lm7']) \gset
SELECT relaybus.complete(lease_token) AS done FROM relaybus.claim('rw7', 10, '30 seconds', ARRAY['lm7']) \gset
SELECT is((SELECT acked_upto FROM relaybus.lane_state WHERE handler = 'lm7' AND lane = :lane7), 4::bigint,
          'four deliveries of one key, each finished');
UPDATE relaybus.lanes SET lease_expires_at = now() + interval '20 seconds' WHERE handler = 'lm7' AND lane = :lane7;
SELECT is((SELECT count(*)::int FROM relaybus.claim('rw7', 10, '30 seconds', ARRAY['lm7'])), 0,
          'the claim once its renewal is due finds nothing');
SELECT is((SELECT lease_owner FROM relaybus.lanes WHERE handler = 'lm7' AND lane = :lane7), NULL,
          'and hands the lane back, in use as it is: its turn to rotate');

SELECT throws_ok($$SELECT relaybus_internal.lanes_changed()$$, '39P01', NULL,
                 'the trigger function runs only as the trigger');
SELECT is((SELECT tgenabled::text FROM pg_trigger
            WHERE tgrelid = 'relaybus.lanes'::regclass AND tgname = 'lanes_changed'), 'A',
          'which fires under session_replication_role = replica too');

SELECT dblink_disconnect('lm_other');
SELECT * FROM finish();
