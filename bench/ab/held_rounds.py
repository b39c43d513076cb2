#!/usr/bin/python3
"""The held-snapshot rounds of issue 33 for one relaybus build, outside the harness: an idle
REPEATABLE READ transaction opened in the database before round 1 and held through every
round; each round publishes --events events (half keyed, two per key, 1,000 per
publish_batch) and one connection drains them with claim(--batch) + complete_many. Prints,
per round, the drain rate, the dead tuples of relaybus's tables (pgstattuple: exact, not
the statistics collector's estimate) and, on 0.3.0, how many lanes a claim took from.
bench/ab/held_rounds.sh alternates two builds.

  bench/ab/held_rounds.py --conn CONNINFO [--rounds R] [--events N] [--batch B]

The database needs the extension (any version with claim, complete_many and publish_batch)
and pgstattuple (created here); the run empties relaybus's tables first.
"""
import argparse
import json
import time
import uuid

import psycopg

HANDLER = "held-rounds"
TABLES = ("deliveries", "events", "lanes", "lane_progress", "exceptions", "key_counters")


def tables(c):
    have = {r[0] for r in c.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'relaybus'::regnamespace AND relkind = 'r'")}
    return [t for t in TABLES if t in have]


def dead(c, names):
    return {t: c.execute(f"SELECT dead_tuple_count FROM pgstattuple('relaybus.{t}')").fetchone()[0]
            for t in names}


def publish(c, round_no, n):
    events = []
    for i in range(1, n + 1):
        e = {"type": "bench.held", "id": f"r{round_no}-{i}", "payload": {"n": i}}
        if i % 2 == 0:
            e["key"] = f"r{round_no}-k{i % max(1, n // 4)}"
        events.append(e)
    for s in range(0, n, 1000):
        c.execute("SELECT count(*) FROM relaybus.publish_batch(%s::jsonb)",
                  (json.dumps(events[s:s + 1000]),))


def lanes_of(tokens):
    """The distinct lanes of a claim's tokens (0.3.0's r3.<lane>.<epoch>...; None for
    another token format)."""
    if not tokens or not tokens[0].startswith("r3."):
        return None
    return len({t.split(".")[1] for t in tokens})


def drain(c, batch):
    holder, n, lanes = uuid.uuid4().hex, 0, []
    claim = ("SELECT lease_token FROM relaybus.claim('held-rounds', %s, '30 seconds',"
             " ARRAY[%s], %s)")
    start = time.perf_counter()
    while rows := c.execute(claim, (batch, HANDLER, holder)).fetchall():
        n += len(rows)
        tokens = [r[0] for r in rows]
        lanes.append(lanes_of(tokens))
        c.execute("SELECT relaybus.complete_many(%s)", (tokens,))
    elapsed = time.perf_counter() - start
    c.execute("SELECT relaybus.relinquish('held-rounds', %s)", (holder,))
    return n, elapsed, lanes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conn", required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--no-hold", action="store_true",
                    help="hold no snapshot: the same rounds, to tell growth from the snapshot's cost")
    args = ap.parse_args()
    with psycopg.connect(args.conn, autocommit=True) as c:
        c.execute("SET client_min_messages = warning")
        c.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        names = tables(c)
        c.execute("TRUNCATE " + ", ".join(f"relaybus.{t}" for t in names if t != "lanes"))
        c.execute("SELECT relaybus.unsubscribe(%s)", (HANDLER,)) if c.execute(
            "SELECT 1 FROM relaybus.subscriptions WHERE handler = %s", (HANDLER,)).fetchone() else None
        c.execute("SELECT relaybus.subscribe(%s, ARRAY['bench.held'])", (HANDLER,))
        for t in names:
            c.execute(f"VACUUM ANALYZE relaybus.{t}")
        with psycopg.connect(args.conn) as held:
            if not args.no_hold:
                held.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                held.execute("SELECT 1")
            first = None
            for r in range(1, args.rounds + 1):
                publish(c, r, args.events)
                n, elapsed, lanes = drain(c, args.batch)
                if n != args.events:
                    raise SystemExit(f"round {r}: drained {n} of {args.events}")
                rate = n / elapsed
                first = first or rate
                d = dead(c, names)
                total = sum(d.values())
                print(f"round {r}: {rate:,.0f}/s ({rate / first:.2f}x round 1), dead tuples "
                      f"{total:,} ({total / (r * args.events):.3f} per delivery): "
                      + ", ".join(f"{t} {v:,}" for t, v in d.items() if v)
                      + (f"; lanes per claim {sum(lanes) / len(lanes):.1f} (first {lanes[0]}, max {max(lanes)})"
                         if lanes and None not in lanes else ""), flush=True)
            held.rollback()


if __name__ == "__main__":
    main()
