#!/usr/bin/env python3
"""A prototype of the next storage phase (docs/design.md, "The next storage phase"): lanes
with a cursor over deliveries that are never deleted, so that a completion is an update of
the lane row instead of a delete of the delivery. It is not relaybus: a schema of its own
(relaybus_next), created by `reset`, with one handler and the happy path only. It is here to
measure what the design would drain at, side by side with the loop and the floor, before
any of it is built into the extension. The runner protocol: README.md.

What it keeps of relaybus's delivery path: lanes of a handler (256, by hashtext of the key,
else of the id), leased to a worker with an epoch that fences its tokens, at most 32
deliveries in flight per lane, per-key order (no delivery of a key while an earlier one of
the key is not complete), acknowledgement per delivery, one claim and one complete_many per
batch.

What a delivery costs: publish takes the next position of its lane from the lane's counter
row, in a table of its own (its row lock orders the lane's publishers, so positions follow
commit order; in the lane row it made publishers and the lane's claims and completions wait
for each other) and inserts the event and the delivery; a claim reads the positions above the lane's cursor
(acked_upto) along the primary key and appends the picked ones to the lane's in-flight
list; a completion removes them from it and either moves the cursor (every position up
to it complete) or adds them to the lane's out-of-order set (done). The delivery row is
written once, at publish. A claim only looks 64 positions above the cursor, which bounds
the done set.

Left out, on purpose (see docs/design.md for what the real phase needs): failures, retries
and dead letters (exception rows), takeover charges (a lane taken over here simply has its
in-flight list cleared, so those deliveries run again, uncharged), partitions rotated
instead of the delivered rows kept, fan-out to more than one handler, SECURITY DEFINER and
input checks. Free lanes are taken oldest work first, as relaybus takes them.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402
import psycopg  # noqa: E402

TYPE = "bench.event"
LANES = 256

# Shared with positions_log.py: completions do not depend on how positions are handed out.
COMPLETE_MANY = """
-- complete_many: per lane of the tokens, if its epoch is still theirs, the positions that
-- are in flight leave the list and join the done set; the cursor then moves over every
-- position complete from it up. Returns how many tokens completed. The per-lane arithmetic
-- is a plpgsql loop: the same in one statement (unnest, sort and a window per lane) cost
-- twice as much (4.1 against 2.1 ms a batch of 500).
CREATE FUNCTION relaybus_next.complete_many(p_handler text, p_tokens text[]) RETURNS int
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_hashjoin = off
SET enable_mergejoin = off SET jit = off
AS $f$
DECLARE
  n int := 0;
  r record;
  ok int8[];
  complete int8[];
  a int8;
BEGIN
  FOR r IN
    WITH t AS (
      SELECT split_part(x, '.', 1)::int2 AS lane, split_part(x, '.', 2)::int8 AS epoch,
             split_part(x, '.', 3)::int8 AS position FROM unnest(p_tokens) x),
    g AS (SELECT t.lane, t.epoch, array_agg(t.position) AS ps FROM t GROUP BY t.lane, t.epoch)
    SELECT l.lane, l.acked_upto, l.done, l.in_flight, g.ps
      FROM g JOIN relaybus_next.lanes l ON l.handler = p_handler AND l.lane = g.lane AND l.epoch = g.epoch
     ORDER BY l.lane FOR NO KEY UPDATE OF l
  LOOP
    IF r.in_flight @> r.ps AND r.ps @> r.in_flight THEN
      ok := r.in_flight;  -- the common case: everything in flight completes
      r.in_flight := '{}';
    ELSE
      ok := array(SELECT DISTINCT p FROM unnest(r.ps) p WHERE p = ANY (r.in_flight));
      r.in_flight := array(SELECT f FROM unnest(r.in_flight) f WHERE f <> ALL (ok));
    END IF;
    CONTINUE WHEN cardinality(ok) = 0;
    complete := r.done || ok;
    a := r.acked_upto;
    WHILE a + 1 = ANY (complete) LOOP  -- at most 64 steps: claims stay 64 above the cursor
      a := a + 1;
    END LOOP;
    IF a > r.acked_upto THEN
      complete := array(SELECT p FROM unnest(complete) p WHERE p > a);
    END IF;
    UPDATE relaybus_next.lanes l SET in_flight = r.in_flight, acked_upto = a, done = complete
     WHERE l.handler = p_handler AND l.lane = r.lane;
    n := n + cardinality(ok);
  END LOOP;
  RETURN n;
END $f$;
"""

# The schema's start, shared with positions_log.py: the events and the lanes.
COMMON_TABLES = """
DROP SCHEMA IF EXISTS relaybus_next CASCADE;
CREATE SCHEMA relaybus_next;
CREATE TABLE relaybus_next.events (
  id text PRIMARY KEY, type text NOT NULL, key text, payload jsonb NOT NULL,
  published_at timestamptz NOT NULL DEFAULT now());
-- Every position <= acked_upto is complete; done: the complete positions above it;
-- in_flight: claimed, not complete.
CREATE TABLE relaybus_next.lanes (
  handler text NOT NULL, lane int2 NOT NULL, acked_upto int8 NOT NULL DEFAULT 0,
  done int8[] NOT NULL DEFAULT '{}', in_flight int8[] NOT NULL DEFAULT '{}',
  lease_owner text, lease_expires_at timestamptz, epoch int8 NOT NULL DEFAULT 0,
  PRIMARY KEY (handler, lane)) WITH (fillfactor = 50);
"""

SCHEMA = COMMON_TABLES + """
-- next_position: the last position handed out. A row of its own, so that a publisher's
-- lock on it (held to commit) never meets a claim's or a completion's lock on the lane
-- row; readers of it (claim, below) take no lock.
CREATE TABLE relaybus_next.lane_counters (
  handler text NOT NULL, lane int2 NOT NULL, next_position int8 NOT NULL DEFAULT 0,
  PRIMARY KEY (handler, lane)) WITH (fillfactor = 50);
CREATE TABLE relaybus_next.deliveries (
  handler text NOT NULL, lane int2 NOT NULL, position int8 NOT NULL, event_id text NOT NULL,
  key text, attempts int4 NOT NULL DEFAULT 0, available_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (handler, lane, position));
CREATE INDEX deliveries_key_idx ON relaybus_next.deliveries (handler, lane, key, position)
  WHERE key IS NOT NULL;

-- claim: renews the worker's lanes, takes free (or expired) lanes with work while the batch
-- has room, picks per lane the lowest claimable positions and appends them to the lane's
-- in-flight list. Tokens are "lane.epoch.position".
CREATE FUNCTION relaybus_next.claim(p_handler text, p_worker text, p_batch int, p_lease interval)
RETURNS TABLE (token text, event_id text, key text, payload jsonb, attempts int)
LANGUAGE plpgsql
-- Index plans only, whatever the statistics say (the harness vacuums without ANALYZE), as
-- relaybus's own functions are declared (sql/parts/api-0.2.0.sql).
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
      -- Lanes with work that no live lease holds, oldest work first (the due time of the
      -- first incomplete position above the cursor, one probe along the primary key per
      -- free lane with work), as relaybus's claim takes them: rounds of 4, 8, 16 lanes,
      -- or what the batch's room needs at 32 a lane if more.
      -- The pick is a CTE of its own, so its LIMIT and SKIP LOCKED hold: as the inner side
      -- of a join it could be scanned again and lock more lanes.
      WITH pick AS MATERIALIZED (
        SELECT f.lane FROM relaybus_next.lanes f
          JOIN relaybus_next.lane_counters n ON n.handler = f.handler AND n.lane = f.lane
          CROSS JOIN LATERAL (
            SELECT d.available_at FROM relaybus_next.deliveries d
             WHERE d.handler = f.handler AND d.lane = f.lane AND d.position > f.acked_upto
               AND d.position <> ALL (f.done)
             ORDER BY d.position LIMIT 1) o
         WHERE f.handler = p_handler AND f.lane <> ALL (tried)
           AND (f.lease_owner IS NULL OR f.lease_expires_at <= now())
           AND n.next_position > f.acked_upto + cardinality(f.done)
         ORDER BY o.available_at, f.lane
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
    WITH l AS (
      SELECT l.lane, l.epoch, l.acked_upto, l.done, l.in_flight, 32 - cardinality(l.in_flight) AS room
        FROM relaybus_next.lanes l WHERE l.handler = p_handler AND l.lane = ANY (ls)),
    c AS (
      SELECT d.lane, d.position, d.event_id, d.key, d.attempts, d.available_at, l.epoch
        FROM l CROSS JOIN LATERAL (
          SELECT d.* FROM relaybus_next.deliveries d
           WHERE d.handler = p_handler AND d.lane = l.lane
             AND d.position > l.acked_upto AND d.position <= l.acked_upto + 64
             AND d.position <> ALL (l.done) AND d.position <> ALL (l.in_flight)
             AND d.available_at <= now()
             AND (d.key IS NULL OR NOT EXISTS (
                  SELECT 1 FROM relaybus_next.deliveries p
                   WHERE p.handler = d.handler AND p.lane = d.lane AND p.key = d.key
                     AND p.position > l.acked_upto AND p.position < d.position
                     AND p.position <> ALL (l.done)))
           ORDER BY d.position LIMIT greatest(l.room, 0)) d
       ORDER BY d.available_at, d.lane, d.position LIMIT p_batch - picked),
    w AS (
      UPDATE relaybus_next.lanes x SET in_flight = x.in_flight || g.ps
        FROM (SELECT c.lane, array_agg(c.position) AS ps FROM c GROUP BY c.lane) g
       WHERE x.handler = p_handler AND x.lane = g.lane)
    SELECT c.lane || '.' || c.epoch || '.' || c.position, c.event_id, c.key, e.payload, c.attempts
      FROM c JOIN relaybus_next.events e ON e.id = c.event_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    picked := picked + n;
    EXIT WHEN picked >= p_batch;
  END LOOP;
  -- A lane with nothing in flight and nothing left goes back.
  UPDATE relaybus_next.lanes l SET lease_owner = NULL, lease_expires_at = NULL
    FROM relaybus_next.lane_counters n
   WHERE l.handler = p_handler AND l.lease_owner = p_worker AND l.lane = ANY (tried)
     AND n.handler = l.handler AND n.lane = l.lane
     AND cardinality(l.in_flight) = 0 AND n.next_position = l.acked_upto + cardinality(l.done);
END $f$;

""" + COMPLETE_MANY

# One event: its lane's next position (the counter's row lock orders the lane's publishers
# until commit), the event, its delivery; one statement.
PUBLISH_ONE = """
WITH lane AS (
  UPDATE relaybus_next.lane_counters SET next_position = next_position + 1
   WHERE handler = %(handler)s::text AND lane = (hashtext(coalesce(%(key)s::text, %(id)s::text)) & 255)::int2
  RETURNING lane, next_position),
event AS (
  INSERT INTO relaybus_next.events (id, type, key, payload)
  VALUES (%(id)s::text, %(type)s::text, %(key)s::text, %(payload)s::jsonb))
INSERT INTO relaybus_next.deliveries (handler, lane, position, event_id, key)
SELECT %(handler)s::text, lane, next_position, %(id)s::text, %(key)s::text FROM lane"""

# Many events: each lane's position moves once by its number of events (locked in lane
# order), and its events take the positions up to the new value in input order.
PUBLISH_MANY = """
WITH input AS (
  SELECT u.id, u.key, u.payload, u.n, (hashtext(coalesce(u.key, u.id)) & 255)::int2 AS lane
    FROM unnest(%(ids)s::text[], %(keys)s::text[], %(payloads)s::jsonb[]) WITH ORDINALITY AS u(id, key, payload, n)),
counts AS (SELECT lane, count(*) AS k FROM input GROUP BY lane),
locked AS (
  SELECT l.lane FROM relaybus_next.lane_counters l
   WHERE l.handler = %(handler)s::text AND l.lane IN (SELECT lane FROM counts)
   ORDER BY l.lane FOR NO KEY UPDATE),
bumped AS (
  UPDATE relaybus_next.lane_counters l SET next_position = l.next_position + c.k
    FROM counts c WHERE l.handler = %(handler)s::text AND l.lane = c.lane
     AND l.lane IN (SELECT lane FROM locked)
  RETURNING l.lane, l.next_position),
event AS (
  INSERT INTO relaybus_next.events (id, type, key, payload)
  SELECT id, %(type)s::text, key, payload FROM input ORDER BY n)
INSERT INTO relaybus_next.deliveries (handler, lane, position, event_id, key)
SELECT %(handler)s::text, i.lane,
       b.next_position - count(*) OVER (PARTITION BY i.lane) + row_number() OVER (PARTITION BY i.lane ORDER BY i.n),
       i.id, i.key
  FROM input i JOIN bumped b ON b.lane = i.lane
 ORDER BY i.n"""

CLAIM = ("SELECT token, event_id, key, payload->>'n', attempts "
         "FROM relaybus_next.claim(%s, %s, %s, '30 seconds')")

UNFINISHED = (f"SELECT {runner.HARNESS} coalesce(sum(n.next_position - l.acked_upto - cardinality(l.done)), 0)::int8 "
              "FROM relaybus_next.lanes l JOIN relaybus_next.lane_counters n USING (handler, lane)")


class Positions:
    default_batch = 500
    # What positions_log.py (the same prototype, publishing through the commit log) replaces.
    schema = SCHEMA
    per_lane_tables = ("lanes", "lane_counters")  # a row per lane, made by reset
    publish_one, publish_many = PUBLISH_ONE, PUBLISH_MANY
    unfinished_sql = UNFINISHED

    def connect(self, conninfo):
        return psycopg.connect(conninfo, autocommit=True)

    def info(self):
        return dict(
            name="positions prototype", version="prototype", ordered_keys=True, acknowledges="deliveries",
            notes="a prototype of the next storage phase (docs/design.md), not relaybus: schema relaybus_next; "
                  "lanes with a cursor (acked_upto), an out-of-order done set and an in-flight list, their "
                  "position counters in a table of their own; deliveries "
                  "written once at publish and never deleted; claim (plpgsql) renews the worker's lanes, takes "
                  "free lanes with work (oldest work first), picks the lowest claimable positions above the cursor (32 in flight a "
                  "lane, 64 positions above the cursor at most, per-key order) and appends them to the lane; "
                  "complete_many (plpgsql) moves them to the done set and the cursor. No failures, retries, "
                  "takeover charges, fan-out or partitions; polls every 10 ms when a "
                  "claim comes back empty.")

    def reset(self, conn):
        for attempt in range(5):
            try:
                conn.execute(self.schema)
                break
            except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))
        for table in self.per_lane_tables:
            conn.execute(f"INSERT INTO relaybus_next.{table} (handler, lane) SELECT %s, g FROM generate_series(0, %s) g",
                         (runner.HANDLER, LANES - 1))
        # Its lane rows are fixed from here on: statistics now, so that the plans of claim and
        # complete_many join them by key from the first call (the harness vacuums without
        # ANALYZE).
        conn.execute("ANALYZE " + ", ".join(f"relaybus_next.{t}" for t in self.per_lane_tables))

    def publish(self, conn, events):
        params = dict(type=TYPE, handler=runner.HANDLER)
        if len(events) == 1:
            e = events[0]
            conn.execute(self.publish_one, dict(params, id=e.id, key=e.key, payload=e.payload))
            return
        conn.execute(self.publish_many, dict(params, ids=[e.id for e in events], keys=[e.key for e in events],
                                        payloads=[e.payload for e in events]))

    def unfinished(self, conn):
        return conn.execute(self.unfinished_sql).fetchone()[0]

    def consume(self, conninfo, options, handled, should_stop, index):
        worker = f"positions-{index}"
        with self.connect(conninfo) as conn:
            while not should_stop():
                rows = conn.execute(CLAIM, (runner.HANDLER, worker, options.batch)).fetchall()
                if not rows:
                    time.sleep(0.01)
                    continue
                for _, event_id, key, n, attempts in rows:
                    handled(event_id, key, n, attempts)
                conn.execute("SELECT relaybus_next.complete_many(%s, %s)", (runner.HANDLER, [r[0] for r in rows]))
            conn.execute("UPDATE relaybus_next.lanes SET lease_owner = NULL, lease_expires_at = NULL "
                         "WHERE lease_owner = %s", (worker,))

    def stored(self, conn):
        return [r[0] for r in conn.execute(f"SELECT {runner.HARNESS} id FROM relaybus_next.events")]

    def left(self, conn):
        return (self.unfinished(conn), 0)


if __name__ == "__main__":
    sys.exit(runner.main(Positions()))
