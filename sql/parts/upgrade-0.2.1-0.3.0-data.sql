--------------------------------------------------------------------------------
-- Update 0.2.1 -> 0.3.0, second part: 0.2's deliveries and lanes into positions, then 0.2's
-- tables go.
--
-- Per (handler, lane), every delivery left gets a position: first those that become
-- exception rows, then the rest, which stay in the window above the cursor (acked_upto =
-- the number of exception rows). An exception row is a dead delivery, a pending one with
-- attempts charged, one an expired lease still listed in flight (charged one lost attempt,
-- dead at max_attempts, as a takeover charges: core::after_lost_attempt), and every pending
-- delivery of a key that has one of those pending (so a key's deliveries keep their order:
-- a claim runs a key's exception rows lowest position first, and a window delivery of a key
-- with a pending exception row is parked behind it). Within each group, a key's deliveries
-- keep their sequence, and keys and unkeyed deliveries go by creation time (a key at the
-- creation time of its oldest delivery). Every lane's epoch moves, so no 0.2 token holds.
--------------------------------------------------------------------------------
CREATE TABLE relaybus.upgrade_030 AS
WITH d AS (
  SELECT d.*, coalesce(s.max_attempts, @RETRY_MAX_ATTEMPTS@) AS max_attempts,
         d.status = 'pending' AND EXISTS (
           SELECT 1 FROM relaybus.lanes_020 l
            WHERE l.handler = d.handler AND l.lane = d.lane AND d.event_id = ANY (l.in_flight)) AS lost
    FROM relaybus.deliveries_020 d
    LEFT JOIN relaybus.subscriptions s ON s.handler = d.handler
), charged AS (
  SELECT d.*,
         d.attempts + CASE WHEN d.lost THEN 1 ELSE 0 END AS new_attempts,
         d.status = 'dead' OR (d.lost AND d.attempts + 1 >= greatest(d.max_attempts, 1)) AS dead,
         d.status = 'dead' OR d.lost OR d.attempts > 0 AS own_exception
    FROM d
), grouped AS (
  SELECT c.*,
         c.own_exception OR (c.key IS NOT NULL AND bool_or(c.own_exception AND NOT c.dead)
           OVER (PARTITION BY c.handler, c.key)) AS exception,
         CASE WHEN c.key IS NULL THEN c.created_at
              ELSE min(c.created_at) OVER (PARTITION BY c.handler, c.key) END AS place
    FROM charged c
)
SELECT g.handler, g.lane, g.event_id, g.key, g.available_at, g.created_at, g.updated_at,
       g.exception, g.dead, g.lost, g.new_attempts, g.claims, g.last_error,
       row_number() OVER (PARTITION BY g.handler, g.lane
                          ORDER BY NOT g.exception, g.place, g.key, g.sequence, g.event_id) AS position
  FROM grouped g;

INSERT INTO relaybus.deliveries (handler, lane, position, event_id, key, available_at, created_at)
SELECT u.handler, u.lane, u.position, u.event_id, u.key, u.available_at, u.created_at
  FROM relaybus.upgrade_030 u ORDER BY u.handler, u.lane, u.position;

INSERT INTO relaybus.exceptions (handler, lane, position, event_id, key, status, attempts,
                                 claims, available_at, last_error, created_at, updated_at)
SELECT u.handler, u.lane, u.position, u.event_id, u.key,
       CASE WHEN u.dead THEN 'dead' ELSE 'pending' END, u.new_attempts, u.claims + 1,
       u.available_at,
       CASE WHEN u.lost THEN 'lease lost: updated to 0.3.0 while in flight' ELSE u.last_error END,
       u.created_at, CASE WHEN u.lost THEN now() ELSE u.updated_at END
  FROM relaybus.upgrade_030 u WHERE u.exception ORDER BY u.handler, u.lane, u.position;

-- Lanes at a new epoch; a lane whose deliveries begin with exception rows has its cursor
-- past them, in its first progress row.
INSERT INTO relaybus.lanes (handler, lane, epoch)
SELECT l.handler, l.lane, l.epoch + 1 FROM relaybus.lanes_020 l ORDER BY l.handler, l.lane;
INSERT INTO relaybus.lane_progress (handler, lane, seq, acked_upto, done, in_flight, retrying)
SELECT u.handler, u.lane, 1, count(*), '{}', '{}', '{}'
  FROM relaybus.upgrade_030 u WHERE u.exception GROUP BY u.handler, u.lane;

DROP TABLE relaybus.upgrade_030, relaybus.deliveries_020, relaybus.lanes_020,
           relaybus.key_counters;

-- 0.2.1's completed deliveries left no row: purge_expired finds their events by this time
-- (relaybus.events_from_021), and 0.3.0's unrouted events by this index (schema-0.3.0.sql).
-- After the locks above: every publish of 0.2.1 committed before, so before this time.
INSERT INTO relaybus.events_from_021 (published_before) VALUES (clock_timestamp());
CREATE INDEX events_unrouted_idx ON relaybus.events (published_at) WHERE handlers = '{}';

-- As a fresh install leaves them (rights-0.2.1.sql): nothing for PUBLIC, spelled out.
REVOKE ALL ON relaybus.deliveries, relaybus.lanes, relaybus.lane_progress, relaybus.lane_state,
              relaybus.exceptions, relaybus.purge_horizons, relaybus.events_from_021 FROM PUBLIC;

-- The roles holding the admin right get SELECT on the tables made above at the end of the
-- update, with what else 0.3.0 adds to the right (rights-0.3.0.sql).
