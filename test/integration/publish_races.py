#!/usr/bin/python3
"""publish_batch against a concurrent publish of one of its ids (an adversarial review of
2026-12-03).

A batch [dup, Y] of one key, for handler h2, while another transaction has published dup
(for h) and not committed yet. The batch's check for stored ids does not see dup, its
insert waits for that transaction, then skips dup once it commits: dup is a republication.
Before, the batch gave the new events their keys' sequences first and republished dup
last, so Y got the lower sequence and h2 was handed Y before dup, against input order.
Now the elements after a raced one take their sequences after it, in input order, as one
publish per element would give them.

Usage: publish_races.py CONNINFO (a database with the extension and nothing else in it).
Prints TAP lines; exits 1 on the first broken rule.
"""
import json
import sys
import threading
import time

import psycopg

CONN = sys.argv[1]


def connect(autocommit=True):
    return psycopg.connect(CONN, autocommit=autocommit)


def fail(msg):
    print(f"not ok - {msg}")
    sys.exit(1)


def main():
    with connect() as adm, connect(autocommit=False) as first, connect() as batcher:
        adm.execute("SELECT relaybus.subscribe('h', ARRAY['t'])")
        adm.execute("SELECT relaybus.subscribe('h2', ARRAY['other'])")
        first.execute("SELECT relaybus.publish('t', '{}', 'k', 'dup')")  # not committed yet
        out = {}

        def batch():
            try:
                batcher.execute("SELECT count(*) FROM relaybus.publish_batch(%s::jsonb)", (json.dumps([
                    {"type": "t", "key": "k", "id": "dup", "handlers": ["h2"]},
                    {"type": "t", "key": "k", "id": "Y", "handlers": ["h2"]}]),))
            except Exception as e:  # reported below
                out["error"] = e

        t = threading.Thread(target=batch)
        t.start()
        deadline = time.monotonic() + 10
        waiting = False
        while time.monotonic() < deadline and not waiting:
            # In this database: other scripts of the suite may run beside this one.
            waiting = adm.execute("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                  " AND query LIKE '%%publish_batch%%' AND datname = current_database())").fetchone()[0]
            time.sleep(0.02)
        if not waiting:
            fail("setup: the batch did not wait for the transaction that published dup")
        first.commit()
        t.join(10)
        if "error" in out:
            fail(f"the batch failed: {out['error']}")
        # A key's order: 0.2's per-key sequence; 0.3.0's position in the key's lane (one
        # lane for both, the key's).
        version = adm.execute("SELECT extversion FROM pg_extension WHERE extname = 'relaybus'").fetchone()[0]
        order_by = "sequence" if version.startswith("0.2") else "lane, position"
        order = [r[0] for r in adm.execute(
            f"SELECT event_id FROM relaybus.deliveries WHERE handler = 'h2' ORDER BY {order_by}")]
        if order != ["dup", "Y"]:
            fail(f"h2's deliveries of key k are in {order_by} order {order}, not the batch's [dup, Y]")
        claimed = [r[0] for r in adm.execute("SELECT event_id FROM relaybus.claim('w', 10, handlers => ARRAY['h2'])")]
        if claimed != ["dup"]:
            fail(f"h2's first claim got {claimed}, not dup alone (Y waits for dup)")
        handlers = adm.execute("SELECT handlers FROM relaybus.events WHERE id = 'dup'").fetchone()[0]
        if sorted(handlers) != ["h", "h2"]:
            fail(f"dup's handlers are {handlers}")
    print("ok - a batch element whose id a concurrent transaction stored keeps its place in its key's order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
