#!/usr/bin/env python3
"""The positions prototype (positions.py) with its positions handed out by the commit log
(src/pg/commit_order.hpp) instead of a counter row per lane: what the commit log costs the
drain, measured beside the counter. Not relaybus: the same schema name as positions.py
(relaybus_next, so the two cannot share a database: each reset drops the other's), created
by `reset`, one handler, the happy path only. The runner protocol: README.md.

What changes against positions.py, and only this:

- publish writes the event and its delivery keyed (handler, lane, txn, ordinal): the
  transaction's id (pg_current_xact_id()) and the ordinal that the library's
  relaybus_commit_order_note gives it among the transaction's deliveries of that lane. No
  row is locked or updated: at commit the library locks the transaction's lanes (from
  PRE_COMMIT to the end of the commit, in one order) and inserts one row per lane into
  lane_commits (handler, lane, first_position, span, txn). A delivery's position is the
  first_position of its transaction's row in its lane plus its ordinal. The function is
  declared by reset (no version of the extension declares it), which needs a superuser and
  the library (preloaded, or loaded by the first call).
- the claim reads a lane's window (acked_upto, acked_upto + 64] from the log: the row that
  holds acked_upto + 1 (the highest first_position at or below it) and the rows that start
  inside the window, each joined to its transaction's deliveries of the lane by a range of
  ordinals. Per-key order is checked inside that window (a delivery is claimable when it
  is the lowest position of its key that is not done, and that one is not in flight): an
  earlier incomplete delivery of a key is above the cursor and below the candidate, so in
  the window. positions.py checks it with a probe per keyed candidate along an index on
  (handler, lane, key, position), which this layout has no position for.
- absent positions: a position inside a logged range with no delivery row was rolled back
  with a subtransaction and will never appear. The claim that reads such a position in a
  window adds it to the lane's done set and moves the cursor over it, in the same update
  that appends its picks to the in-flight list (a lane with only absent positions left is
  updated for them alone), so the cursor does not stick; until a claim has read it, an
  absent position counts as unfinished. A lane whose next position (acked_upto + 1) is
  absent sorts first among free lanes (it has no due time), so a claim takes it.
- "a lane has work": its last log row ends above acked_upto + cardinality(done) (one
  backward probe of the log's primary key instead of the counter row). Oldest work first:
  the due time of the lane's first incomplete position, which is acked_upto + 1 (the cursor
  moves over every complete position, so acked_upto + 1 is never in done): a log probe and a
  delivery probe.

Kept as positions.py has them (shared by import: the events and lanes tables,
complete_many, the consumer loop, stored, left): lanes with a cursor, an out-of-order done
set and an in-flight list, leased with an epoch that fences tokens ("lane.epoch.position"),
at most 32 in flight per lane, a 64-position window, free lanes oldest work first, one
claim and one complete_many per batch, deliveries never deleted.

Left out, as in positions.py: failures, retries, dead letters, takeover charges,
partitions and rotation (here also of lane_commits, which grows by a row per lane per
publishing transaction), fan-out, SECURITY DEFINER and input checks.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import positions  # noqa: E402
import runner  # noqa: E402

SCHEMA = positions.COMMON_TABLES + """
CREATE TABLE relaybus_next.deliveries (
  handler text NOT NULL, lane int2 NOT NULL, txn xid8 NOT NULL, ordinal int4 NOT NULL,
  event_id text NOT NULL, key text, attempts int4 NOT NULL DEFAULT 0,
  available_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (handler, lane, txn, ordinal));
-- The commit log: per publishing transaction and lane, the positions it took. Written by
-- the library at commit only.
CREATE TABLE relaybus_next.lane_commits (
  handler text NOT NULL, lane int2 NOT NULL, first_position int8 NOT NULL, span int4 NOT NULL,
  txn xid8 NOT NULL, PRIMARY KEY (handler, lane, first_position));
CREATE FUNCTION relaybus_next.note(regclass, text, int2) RETURNS int4
  AS 'relaybus', 'relaybus_commit_order_note' LANGUAGE C STRICT VOLATILE;

-- The cursor over a set of complete positions: the highest c >= a with a+1 .. c all in s.
CREATE FUNCTION relaybus_next.cursor_over(a int8, s int8[]) RETURNS int8 LANGUAGE sql IMMUTABLE
AS $$ SELECT a + (SELECT min(g) FROM generate_series(1, cardinality(s) + 1) g WHERE a + g <> ALL (s)) - 1 $$;

-- claim: as positions.py's (renewal, free lanes oldest work first in rounds, 32 in flight a
-- lane, 64 positions above the cursor, per-key order, tokens "lane.epoch.position"), with
-- the window read through the commit log, and the window's absent positions folded into
-- the lane's done set and cursor.
CREATE FUNCTION relaybus_next.claim(p_handler text, p_worker text, p_batch int, p_lease interval)
RETURNS TABLE (token text, event_id text, key text, payload jsonb, attempts int)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off SET jit = off
AS $f$
DECLARE
  ls int2[];
  tried int2[] := '{}';
  picked int := 0;
  n int;
BEGIN
  WITH renewed AS (
    UPDATE relaybus_next.lanes l SET lease_expires_at = now() + p_lease
     WHERE l.handler = p_handler AND l.lease_owner = p_worker RETURNING l.lane)
  SELECT coalesce(array_agg(r.lane), '{}') INTO ls FROM renewed r;
  FOR round IN 0..3 LOOP
    IF round > 0 THEN
      -- Lanes with work (the last log row ends above the cursor and the done set) that no
      -- live lease holds, oldest work first: the due time of position acked_upto + 1 (a
      -- lane where it is absent has none and comes first, so that a claim folds it).
      WITH pick AS MATERIALIZED (
        SELECT f.lane FROM relaybus_next.lanes f
          CROSS JOIN LATERAL (
            SELECT c.first_position + c.span - 1 AS last FROM relaybus_next.lane_commits c
             WHERE c.handler = f.handler AND c.lane = f.lane
             ORDER BY c.first_position DESC LIMIT 1) n
          -- (The delivery is a scalar subquery of the log row, so that its probe is by the
          -- whole primary key whatever the statistics.)
          LEFT JOIN LATERAL (
            SELECT (SELECT d.available_at FROM relaybus_next.deliveries d
                     WHERE d.handler = c.handler AND d.lane = c.lane AND d.txn = c.txn
                       AND d.ordinal = f.acked_upto + 1 - c.first_position) AS available_at
              FROM relaybus_next.lane_commits c
             WHERE c.handler = f.handler AND c.lane = f.lane AND c.first_position <= f.acked_upto + 1
             ORDER BY c.first_position DESC LIMIT 1) o ON true
         WHERE f.handler = p_handler AND f.lane <> ALL (tried)
           AND (f.lease_owner IS NULL OR f.lease_expires_at <= now())
           AND n.last > f.acked_upto + cardinality(f.done)
         ORDER BY o.available_at NULLS FIRST, f.lane
         LIMIT greatest(2 << round, (p_batch - picked + 31) / 32)
         FOR UPDATE OF f SKIP LOCKED),
      taken AS (
        UPDATE relaybus_next.lanes l
           SET lease_owner = p_worker, lease_expires_at = now() + p_lease, epoch = l.epoch + 1,
               in_flight = '{}'
          FROM pick WHERE l.handler = p_handler AND l.lane = pick.lane
        RETURNING l.lane)
      SELECT coalesce(array_agg(t.lane), '{}') INTO ls FROM taken t;
      EXIT WHEN cardinality(ls) = 0;
    END IF;
    tried := tried || ls;
    RETURN QUERY
    WITH l AS MATERIALIZED (
      SELECT l.lane, l.epoch, l.acked_upto, l.done, l.in_flight, 32 - cardinality(l.in_flight) AS room
        FROM relaybus_next.lanes l WHERE l.handler = p_handler AND l.lane = ANY (ls)),
    -- The log rows over each lane's window, with the ordinals of theirs inside it (lo .. hi).
    r AS MATERIALIZED (
      SELECT l.lane, l.epoch, l.room, l.done, l.in_flight, c.txn, c.first_position,
             greatest(l.acked_upto + 1 - c.first_position, 0) AS lo,
             least(l.acked_upto + 64 - c.first_position, c.span - 1) AS hi
        FROM l CROSS JOIN LATERAL (
          (SELECT c.first_position, c.span, c.txn FROM relaybus_next.lane_commits c
            WHERE c.handler = p_handler AND c.lane = l.lane AND c.first_position <= l.acked_upto + 1
            ORDER BY c.first_position DESC LIMIT 1)
          UNION ALL
          (SELECT c.first_position, c.span, c.txn FROM relaybus_next.lane_commits c
            WHERE c.handler = p_handler AND c.lane = l.lane
              AND c.first_position > l.acked_upto + 1 AND c.first_position <= l.acked_upto + 64)) c
       WHERE c.first_position + c.span > l.acked_upto + 1),
    -- The window's deliveries, with their positions.
    w AS MATERIALIZED (
      SELECT r.lane, r.epoch, r.room, r.done, r.in_flight, r.first_position + d.ordinal AS position,
             d.event_id, d.key, d.attempts, d.available_at
        FROM r JOIN relaybus_next.deliveries d
          ON d.handler = p_handler AND d.lane = r.lane AND d.txn = r.txn AND d.ordinal BETWEEN r.lo AND r.hi),
    -- Not done; nth: the rank among the key's positions not done (1: its first incomplete).
    o AS (
      SELECT w.*, w.position = ANY (w.in_flight) AS flying,
             row_number() OVER (PARTITION BY w.lane, w.key ORDER BY w.position) AS nth
        FROM w WHERE w.position <> ALL (w.done)),
    e AS (
      SELECT o.*, row_number() OVER (PARTITION BY o.lane ORDER BY o.position) AS k
        FROM o WHERE NOT o.flying AND (o.key IS NULL OR o.nth = 1) AND o.available_at <= now()),
    c AS MATERIALIZED (
      SELECT e.lane, e.position, e.event_id, e.key, e.attempts, e.available_at, e.epoch
        FROM e WHERE e.k <= e.room
       ORDER BY e.available_at, e.lane, e.position LIMIT p_batch - picked),
    -- Absent positions: logged in a window, no delivery. Looked for only in the lanes whose
    -- window logs more positions than it has deliveries.
    logged AS (SELECT r.lane, sum(r.hi - r.lo + 1) AS n FROM r GROUP BY r.lane),
    found AS (SELECT w.lane, count(*) AS n FROM w GROUP BY w.lane),
    short AS (
      SELECT coalesce(array_agg(g.lane), '{}') AS lanes
        FROM logged g LEFT JOIN found f ON f.lane = g.lane WHERE g.n > coalesce(f.n, 0)),
    absent AS (
      SELECT r.lane, r.first_position + g.o AS position
        FROM r CROSS JOIN short s
        CROSS JOIN LATERAL generate_series(r.lo, CASE WHEN r.lane = ANY (s.lanes) THEN r.hi ELSE r.lo - 1 END) g(o)
       WHERE r.first_position + g.o <> ALL (r.done)
         AND NOT EXISTS (SELECT 1 FROM w WHERE w.lane = r.lane AND w.position = r.first_position + g.o)),
    -- One update per lane: its picks join the in-flight list; its absent positions join the
    -- done set and the cursor moves over them where it can.
    u AS (
      SELECT x.lane, array_agg(x.position) FILTER (WHERE x.picked) AS ps,
             array_agg(x.position) FILTER (WHERE NOT x.picked) AS gone
        FROM (SELECT c.lane, c.position, true AS picked FROM c
              UNION ALL SELECT a.lane, a.position, false FROM absent a) x
       GROUP BY x.lane),
    upd AS (
      UPDATE relaybus_next.lanes x
         SET in_flight = x.in_flight || coalesce(u.ps, '{}'),
             acked_upto = CASE WHEN u.gone IS NULL THEN x.acked_upto
                               ELSE relaybus_next.cursor_over(x.acked_upto, x.done || u.gone) END,
             done = CASE WHEN u.gone IS NULL THEN x.done
                         ELSE array(SELECT p FROM unnest(x.done || u.gone) p
                                     WHERE p > relaybus_next.cursor_over(x.acked_upto, x.done || u.gone)) END
        FROM u WHERE x.handler = p_handler AND x.lane = u.lane)
    SELECT c.lane || '.' || c.epoch || '.' || c.position, c.event_id, c.key, e.payload, c.attempts
      FROM c JOIN relaybus_next.events e ON e.id = c.event_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    picked := picked + n;
    EXIT WHEN picked >= p_batch;
  END LOOP;
  -- A lane with nothing in flight and nothing left goes back.
  UPDATE relaybus_next.lanes l SET lease_owner = NULL, lease_expires_at = NULL
   WHERE l.handler = p_handler AND l.lease_owner = p_worker AND l.lane = ANY (tried)
     AND cardinality(l.in_flight) = 0
     AND l.acked_upto + cardinality(l.done) >= coalesce((
           SELECT c.first_position + c.span - 1 FROM relaybus_next.lane_commits c
            WHERE c.handler = l.handler AND c.lane = l.lane ORDER BY c.first_position DESC LIMIT 1), 0);
END $f$;
""" + positions.COMPLETE_MANY

# One event: the event and its delivery, with the transaction's id and its ordinal in the
# lane; its position comes at commit. No row locked.
PUBLISH_ONE = """
WITH event AS (
  INSERT INTO relaybus_next.events (id, type, key, payload)
  VALUES (%(id)s::text, %(type)s::text, %(key)s::text, %(payload)s::jsonb)),
lane AS (SELECT (hashtext(coalesce(%(key)s::text, %(id)s::text)) & 255)::int2 AS lane)
INSERT INTO relaybus_next.deliveries (handler, lane, txn, ordinal, event_id, key)
SELECT %(handler)s::text, lane, pg_current_xact_id(),
       relaybus_next.note('relaybus_next.lane_commits', %(handler)s::text, lane), %(id)s::text, %(key)s::text
  FROM lane"""

# Many events: the ordinals are taken in input order (the subquery is evaluated in that
# order before the insert), so a key's events keep it within the lane.
PUBLISH_MANY = """
WITH input AS (
  SELECT u.id, u.key, u.payload, u.n, (hashtext(coalesce(u.key, u.id)) & 255)::int2 AS lane
    FROM unnest(%(ids)s::text[], %(keys)s::text[], %(payloads)s::jsonb[]) WITH ORDINALITY AS u(id, key, payload, n)),
event AS (
  INSERT INTO relaybus_next.events (id, type, key, payload)
  SELECT id, %(type)s::text, key, payload FROM input ORDER BY n)
INSERT INTO relaybus_next.deliveries (handler, lane, txn, ordinal, event_id, key)
SELECT %(handler)s::text, s.lane, pg_current_xact_id(),
       relaybus_next.note('relaybus_next.lane_commits', %(handler)s::text, s.lane), s.id, s.key
  FROM (SELECT * FROM input ORDER BY n OFFSET 0) s"""

# Logged positions not yet passed by a cursor nor done (absent ones count until a claim
# has folded them).
UNFINISHED = (f"SELECT {runner.HARNESS} coalesce(sum(coalesce(n.last, 0) - l.acked_upto - cardinality(l.done)), 0)::int8 "
              "FROM relaybus_next.lanes l LEFT JOIN LATERAL ("
              "SELECT c.first_position + c.span - 1 AS last FROM relaybus_next.lane_commits c "
              "WHERE c.handler = l.handler AND c.lane = l.lane ORDER BY c.first_position DESC LIMIT 1) n ON true")


class PositionsLog(positions.Positions):
    schema = SCHEMA
    per_lane_tables = ("lanes",)
    publish_one, publish_many = PUBLISH_ONE, PUBLISH_MANY
    unfinished_sql = UNFINISHED

    def info(self):
        return dict(
            name="positions prototype (commit log)", version="prototype", ordered_keys=True,
            acknowledges="deliveries",
            notes="positions.py's prototype of the next storage phase (schema relaybus_next, not relaybus) with "
                  "positions from the commit log (src/pg/commit_order.hpp) instead of a counter row per lane: "
                  "publish inserts the event and its delivery keyed (handler, lane, txn, ordinal) and locks "
                  "nothing; at commit the library writes one lane_commits row (first_position, span, txn) per "
                  "lane. claim reads a lane's 64-position window through the log, checks per-key order inside "
                  "it and folds absent positions (rolled-back subtransactions) into the cursor; complete_many, "
                  "lanes, leases, epochs, 32 in flight a lane and oldest work first as positions.py. No "
                  "failures, retries, takeover charges, fan-out, partitions or log rotation; polls every 10 ms "
                  "when a claim comes back empty.")


if __name__ == "__main__":
    sys.exit(runner.main(PositionsLog()))
