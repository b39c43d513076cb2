#!/usr/bin/env python3
"""The positions prototype (positions.py) with its deliveries staged until commit
(commit_order::stage, src/pg/commit_order.hpp) instead of a counter row per lane: what
staging costs the drain, measured beside the counter row and the commit log
(positions_log.py). Not relaybus: the same schema name as positions.py (relaybus_next, so
the prototypes cannot share a database: each reset drops the other's), created by `reset`,
one handler, the happy path only. The runner protocol: README.md.

What changes against positions.py, and only this:

- there is no lane_counters table. publish inserts the event and calls
  relaybus_next.stage(deliveries, handler, lane, event_id, key) per delivery (many events:
  one statement, staged in input order), which keeps the delivery in backend memory. At
  commit the library locks the transaction's lanes (from PRE_COMMIT to the end of the
  commit, in one order) and inserts the deliveries into relaybus_next.deliveries at their
  lane's last position plus their place among the transaction's deliveries of that lane.
  So the deliveries have positions.py's layout (handler, lane, position, ...), written
  once, and positions follow commit order without a publisher locking anything before its
  commit. A savepoint rolled back takes its staged deliveries with it: a lane's positions
  have no holes. The function is declared by reset (no version of the extension declares
  it), which needs a superuser and a library that has relaybus_commit_order_stage
  (preloaded, or loaded by the first call).
- the lane's last position, wherever positions.py reads lane_counters.next_position: the
  claim's test that a free lane has work, its hand-back of lanes with nothing in flight and
  nothing left, and the unfinished count. It is one backward probe of the deliveries'
  primary key per lane (ORDER BY position DESC LIMIT 1), where positions.py joins the
  counter row.

The SQL is positions.py's, derived from it here by replacing those fragments (each must
occur exactly once, or the import fails), so the claim and completion measured are the
same text apart from them: the events and lanes tables, the deliveries table and its key
index, the window read as one range scan, per-key order by index probe, 32 in flight a
lane, 64 positions above the cursor, free lanes oldest work first, leases and epochs,
complete_many, the consumer loop, stored and left.

What it does not show: a publishing transaction does not see its own deliveries before it
commits (its events it does see), and a large transaction's deliveries wait in backend
memory until commit; neither matters to the benchmark's publishers. Left out, as in
positions.py: failures, retries, dead letters, takeover charges, partitions, fan-out,
SECURITY DEFINER and input checks.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import positions  # noqa: E402
import runner  # noqa: E402


def _replaced(text, edits):
    """`text` with each (old, new) of `edits` replaced; each old must occur exactly once."""
    for old, new in edits:
        if text.count(old) != 1:
            raise RuntimeError(f"positions_staged: positions.py's SQL changed, {old[:60]!r}... "
                               f"occurs {text.count(old)} times, not once")
        text = text.replace(old, new)
    return text


# The last position of the lane of lanes row `l`, from the deliveries' primary key.
LAST = ("(SELECT d.position FROM relaybus_next.deliveries d WHERE d.handler = {l}.handler "
        "AND d.lane = {l}.lane ORDER BY d.position DESC LIMIT 1)")

SCHEMA = _replaced(positions.SCHEMA, [
    # No counter rows: the library stages the deliveries and inserts them at commit.
    ("""-- next_position: the last position handed out. A row of its own, so that a publisher's
-- lock on it (held to commit) never meets a claim's or a completion's lock on the lane
-- row; readers of it (claim, below) take no lock.
CREATE TABLE relaybus_next.lane_counters (
  handler text NOT NULL, lane int2 NOT NULL, next_position int8 NOT NULL DEFAULT 0,
  PRIMARY KEY (handler, lane)) WITH (fillfactor = 50);
""", """-- No counter rows: stage() keeps a transaction's deliveries in backend memory and, at
-- commit, under its lanes' locks, inserts them at their lane's last position + 1, 2, ...
CREATE FUNCTION relaybus_next.stage(regclass, text, int2, text, text) RETURNS void
  AS 'relaybus', 'relaybus_commit_order_stage' LANGUAGE C VOLATILE;
"""),
    # The claim's pick: the lane's last position instead of its counter row.
    ("""          JOIN relaybus_next.lane_counters n ON n.handler = f.handler AND n.lane = f.lane
""", """          CROSS JOIN LATERAL (SELECT """ + LAST.format(l="f") + """ AS last) n
"""),
    ("AND n.next_position > f.acked_upto + cardinality(f.done)",
     "AND n.last > f.acked_upto + cardinality(f.done)"),
    # Its hand-back of lanes with nothing in flight and nothing left.
    ("""    FROM relaybus_next.lane_counters n
   WHERE l.handler = p_handler AND l.lease_owner = p_worker AND l.lane = ANY (tried)
     AND n.handler = l.handler AND n.lane = l.lane
     AND cardinality(l.in_flight) = 0 AND n.next_position = l.acked_upto + cardinality(l.done);""",
     """   WHERE l.handler = p_handler AND l.lease_owner = p_worker AND l.lane = ANY (tried)
     AND cardinality(l.in_flight) = 0
     AND coalesce(""" + LAST.format(l="l") + """, 0) = l.acked_upto + cardinality(l.done);"""),
])

# One event: the event, and its delivery staged until commit.
PUBLISH_ONE = """
WITH event AS (
  INSERT INTO relaybus_next.events (id, type, key, payload)
  VALUES (%(id)s::text, %(type)s::text, %(key)s::text, %(payload)s::jsonb))
SELECT relaybus_next.stage('relaybus_next.deliveries', %(handler)s::text,
       (hashtext(coalesce(%(key)s::text, %(id)s::text)) & 255)::int2, %(id)s::text, %(key)s::text)"""

# Many events: staged in input order (the subquery is evaluated in that order), so a key's
# events keep it within the lane.
PUBLISH_MANY = """
WITH input AS (
  SELECT u.id, u.key, u.payload, u.n, (hashtext(coalesce(u.key, u.id)) & 255)::int2 AS lane
    FROM unnest(%(ids)s::text[], %(keys)s::text[], %(payloads)s::jsonb[]) WITH ORDINALITY AS u(id, key, payload, n)),
event AS (
  INSERT INTO relaybus_next.events (id, type, key, payload)
  SELECT id, %(type)s::text, key, payload FROM input ORDER BY n)
SELECT count(relaybus_next.stage('relaybus_next.deliveries', %(handler)s::text, s.lane, s.id, s.key))
  FROM (SELECT * FROM input ORDER BY n OFFSET 0) s"""

UNFINISHED = (f"SELECT {runner.HARNESS} coalesce(sum(coalesce({LAST.format(l='l')}, 0) "
              "- l.acked_upto - cardinality(l.done)), 0)::int8 FROM relaybus_next.lanes l")


class PositionsStaged(positions.Positions):
    schema = SCHEMA
    per_lane_tables = ("lanes",)
    publish_one, publish_many = PUBLISH_ONE, PUBLISH_MANY
    unfinished_sql = UNFINISHED

    def info(self):
        return dict(
            name="positions prototype (staged)", version="prototype", ordered_keys=True,
            acknowledges="deliveries",
            notes="positions.py's prototype of the next storage phase (schema relaybus_next, not relaybus) with "
                  "staged deliveries (commit_order::stage, src/pg/commit_order.hpp) instead of a counter row "
                  "per lane: publish inserts the event and stages its delivery in backend memory, locking "
                  "nothing; at commit the library locks the transaction's lanes and inserts the deliveries at "
                  "their lane's last position + 1, 2, ... (commit order, no holes). Deliveries, claim and "
                  "complete_many as positions.py's, the lane's last position (a backward probe of the "
                  "deliveries' primary key) read where positions.py reads its counter. No failures, retries, "
                  "takeover charges, fan-out or partitions; polls every 10 ms when a claim comes back empty.")


if __name__ == "__main__":
    sys.exit(runner.main(PositionsStaged()))
