#!/usr/bin/env python3
"""The floor of relaybus's own schema: the fewest statements that make the writes relaybus
makes, on its tables and indexes (relaybus 0.2.1, which bench/peers_bench.py's
EXTENSION_VERSIONS creates for it), without its checks, SECURITY DEFINER, SPI,
notifications or lane leases. Every report can then say how close relaybus
is to what its storage allows (issue 12). The runner protocol: README.md.

publish (src/pg/publish.cpp): the event row, one delivery row for the bench handler in the
lane of its key (its id when it has none), and for a keyed event the key's next sequence
from relaybus.key_counters, whose row lock orders the key's publishers as publish's does.
Consume: pick the lowest pending deliveries along the lane index, FOR UPDATE SKIP LOCKED,
only the first pending one of each key (the key index answers that, as in claim), then
DELETE them by primary key in one statement, in the same transaction.

reset, unfinished, stored and left are those of the loop (relaybus_loop.py): same schema.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402
from relaybus_loop import TYPE, RelaybusLoop  # noqa: E402

POLL_S = 0.01  # no LISTEN: a consumer that found nothing looks again 10 ms later

# One event: the key's sequence (only when keyed), the event, its delivery; one statement,
# so one round trip and one transaction, as a publish() call is.
PUBLISH_ONE = """
WITH bumped AS (
  INSERT INTO relaybus.key_counters AS c (key, last_sequence)
  SELECT %(key)s::text, 1 WHERE %(key)s::text IS NOT NULL
  ON CONFLICT (key) DO UPDATE SET last_sequence = c.last_sequence + 1
  RETURNING c.last_sequence),
event AS (
  INSERT INTO relaybus.events (id, type, key, payload, handlers)
  VALUES (%(id)s::text, %(type)s::text, %(key)s::text, %(payload)s::jsonb, ARRAY[%(handler)s::text]))
INSERT INTO relaybus.deliveries (event_id, handler, lane, key, sequence)
VALUES (%(id)s::text, %(handler)s::text, relaybus.lane_of(coalesce(%(key)s::text, %(id)s::text)),
        %(key)s::text, (SELECT last_sequence FROM bumped))"""

# Not run by the harness: the single-publish experiments (bench/ab) weigh what publish's
# contract adds to the floor's writes. IDEMPOTENT: a repeated id is absorbed (ON CONFLICT
# on the event, as publish's insert is). CONTRACT: that, and the event id returned.
_EVENT_END = "ARRAY[%(handler)s::text]))"
assert PUBLISH_ONE.count(_EVENT_END) == 1
PUBLISH_ONE_IDEMPOTENT = PUBLISH_ONE.replace(_EVENT_END, "ARRAY[%(handler)s::text]) ON CONFLICT (id) DO NOTHING)")
PUBLISH_ONE_CONTRACT = PUBLISH_ONE_IDEMPOTENT + "\nRETURNING event_id"

# Many events in one statement: each key's counter moves once by its number of events
# (one upsert may not touch a row twice), and its events take the sequences up to the
# new value in input order.
PUBLISH_MANY = """
WITH input AS (
  SELECT u.id, u.key, u.payload, u.n
    FROM unnest(%(ids)s::text[], %(keys)s::text[], %(payloads)s::jsonb[]) WITH ORDINALITY AS u(id, key, payload, n)),
bumped AS (
  INSERT INTO relaybus.key_counters AS c (key, last_sequence)
  SELECT key, count(*) FROM input WHERE key IS NOT NULL GROUP BY key ORDER BY key
  ON CONFLICT (key) DO UPDATE SET last_sequence = c.last_sequence + excluded.last_sequence
  RETURNING c.key, c.last_sequence),
event AS (
  INSERT INTO relaybus.events (id, type, key, payload, handlers)
  SELECT id, %(type)s::text, key, payload, ARRAY[%(handler)s::text] FROM input ORDER BY n)
INSERT INTO relaybus.deliveries (event_id, handler, lane, key, sequence)
SELECT i.id, %(handler)s::text, relaybus.lane_of(coalesce(i.key, i.id)), i.key,
       b.last_sequence - count(*) OVER (PARTITION BY i.key) + row_number() OVER (PARTITION BY i.key ORDER BY i.n)
  FROM input i LEFT JOIN bumped b ON b.key = i.key
 ORDER BY i.n"""

# The pick: along deliveries_lane_due_idx (handler, lane, available_at, event_id) in its
# order, so LIMIT stops the scan; a keyed delivery only if no earlier one of its key is
# pending (deliveries_lane_key_idx), which a locked or just deleted one still is, so a
# key's next delivery waits for the transaction that holds the previous one.
PICK = """
SELECT d.event_id, d.key, e.payload->>'n', d.attempts
  FROM relaybus.deliveries d JOIN relaybus.events e ON e.id = d.event_id
 WHERE d.handler = %(handler)s::text AND d.status = 'pending' AND d.available_at <= now()
   AND (d.key IS NULL OR NOT EXISTS (
        SELECT 1 FROM relaybus.deliveries p
         WHERE p.handler = d.handler AND p.lane = d.lane AND p.key = d.key
           AND p.status = 'pending' AND p.sequence < d.sequence))
 ORDER BY d.lane, d.available_at, d.event_id
 LIMIT %(batch)s FOR UPDATE OF d SKIP LOCKED"""

COMPLETE = "DELETE FROM relaybus.deliveries WHERE handler = %s::text AND event_id = ANY(%s::text[])"


# 0.2's tables (lane leases, a key counter per key): the harness creates the floor's
# database with this version (bench/peers_bench.py, EXTENSION_VERSIONS).
SCHEMA_VERSION = "0.2.1"


class Floor(RelaybusLoop):
    default_batch = 500

    def info(self):
        return dict(
            name="floor of relaybus's schema", version=SCHEMA_VERSION, ordered_keys=True,
            acknowledges="deliveries",
            notes="relaybus's tables and indexes, the fewest statements that write what publish and "
                  "complete write. Publish: one statement (writable CTEs): key_counters upsert when keyed, "
                  "INSERT events, INSERT deliveries (lane = relaybus.lane_of(key or id)); 100 per statement "
                  "the same over unnest, each key's counter moved once by its count. Consume, per "
                  "transaction: SELECT the first --batch pending deliveries along the lane index (ORDER BY "
                  "lane, available_at, event_id) joined to their events for the payload, only the lowest "
                  "pending sequence of each key (NOT EXISTS on the key index), FOR UPDATE SKIP LOCKED; then "
                  "one DELETE by primary key. No lane leases, checks, SECURITY DEFINER, SPI or NOTIFY; no "
                  "presets (--preset is ignored); polls every 10 ms when a pick comes back empty.")

    def publish(self, conn, events):
        params = dict(type=TYPE, handler=runner.HANDLER)
        if len(events) == 1:
            e = events[0]
            conn.execute(PUBLISH_ONE, dict(params, id=e.id, key=e.key, payload=e.payload))
            return
        conn.execute(PUBLISH_MANY, dict(params, ids=[e.id for e in events], keys=[e.key for e in events],
                                        payloads=[e.payload for e in events]))

    def consume(self, conninfo, options, handled, should_stop, index):
        with self.connect(conninfo) as conn:
            while not should_stop():
                with conn.transaction():
                    rows = conn.execute(PICK, dict(handler=runner.HANDLER, batch=options.batch)).fetchall()
                    for event_id, key, n, attempts in rows:
                        handled(event_id, key, n, attempts)
                    if rows:
                        conn.execute(COMPLETE, (runner.HANDLER, [r[0] for r in rows]))
                if not rows:
                    time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(runner.main(Floor()))
