#!/usr/bin/python3
"""One consumer's drain, outside the harness: relaybus's loop, variants of it and the
floor's statements, alternated round by round on one cluster, so their ratios come from
the same moments of the machine. Each run preloads the harness's drain (events e-1..e-N,
half keyed, two events per key, 1,000 per publish_batch), then one connection drains it
at batch 500 and is timed from its first call to its last.

  bench/ab/drain_paired.py --conn CONNINFO [--events N] [--rounds R]
                           [--variants loop,joined,floor] [--profile VARIANT]

- loop: claim(batch) then complete_many, each in its own transaction (bench/peers/
  relaybus_loop.py's consumer);
- joined: complete_many of the previous batch and the next claim in one transaction;
- floor: the floor's pick and delete in one transaction (bench/peers/floor.py; 0.2's
  tables only).
--profile VARIANT drains once more with pg_stat_statements.track = all and prints the
server time per statement (the database needs pg_stat_statements, and the cluster needs
it preloaded, as scripts/cluster does). Used for issue 12's drain profile
(docs/performance.md). The database needs the extension; the run empties relaybus's
tables and subscribes the harness's handler.
"""
import argparse
import json
import os
import statistics
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import floor  # noqa: E402
import relaybus_loop  # noqa: E402
import runner  # noqa: E402
import psycopg  # noqa: E402

BATCH = 500
CLAIM = ("SELECT lease_token, event_id, key, payload->>'n', attempts FROM "
         "relaybus.claim(%s, %s, '30 seconds', ARRAY[%s], %s)")


def preload(conninfo, n):
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("SET client_min_messages = warning")
        # The harness's emptying (every relaybus table of the installed version), then its
        # subscription (handler runner.HANDLER, type bench.event).
        relaybus_loop.RelaybusLoop().reset(c)
        events = []
        for i in range(1, n + 1):
            e = {"type": "bench.event", "id": f"e-{i}", "payload": {"n": i}}
            if i % 2 == 0:
                e["key"] = f"k{i % max(1, n // 4)}"
            events.append(e)
        for s in range(0, n, 1000):
            c.execute("SELECT count(*) FROM relaybus.publish_batch(%s::jsonb)", (json.dumps(events[s:s + 1000]),))
        for (t,) in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'relaybus'").fetchall():
            c.execute(f"VACUUM ANALYZE relaybus.{t}")
        c.execute("CHECKPOINT")


def loop(c):
    holder, n = uuid.uuid4().hex, 0
    while rows := c.execute(CLAIM, ("ab-loop", BATCH, runner.HANDLER, holder)).fetchall():
        n += len(rows)
        c.execute("SELECT relaybus.complete_many(%s)", ([r[0] for r in rows],))
    c.execute("SELECT relaybus.relinquish('ab-loop', %s)", (holder,))
    return n


def joined(c):
    holder, n, previous = uuid.uuid4().hex, 0, []
    while True:
        with c.transaction():
            if previous:
                c.execute("SELECT relaybus.complete_many(%s)", (previous,))
            rows = c.execute(CLAIM, ("ab-joined", BATCH, runner.HANDLER, holder)).fetchall()
        if not rows:
            break
        n += len(rows)
        previous = [r[0] for r in rows]
    c.execute("SELECT relaybus.relinquish('ab-joined', %s)", (holder,))
    return n


def floor_drain(c):
    n = 0
    while True:
        with c.transaction():
            rows = c.execute(floor.PICK, dict(handler=runner.HANDLER, batch=BATCH)).fetchall()
            if rows:
                c.execute(floor.COMPLETE, (runner.HANDLER, [r[0] for r in rows]))
        if not rows:
            return n
        n += len(rows)


VARIANTS = {"loop": loop, "joined": joined, "floor": floor_drain}


def drain(conninfo, variant, n):
    preload(conninfo, n)
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("SELECT 1")
        start = time.perf_counter()
        got = VARIANTS[variant](c)
        elapsed = time.perf_counter() - start
    if got != n:
        sys.exit(f"{variant}: drained {got} of {n}")
    return n / elapsed


def profile(conninfo, variant, n):
    preload(conninfo, n)
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        c.execute("SET pg_stat_statements.track = 'all'")
        c.execute("SELECT pg_stat_statements_reset()")
        VARIANTS[variant](c)
        rows = c.execute("SELECT calls, round(total_exec_time::numeric, 1), rows,"
                         " left(regexp_replace(query, '\\s+', ' ', 'g'), 90) FROM pg_stat_statements"
                         " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                         " AND total_exec_time > 0.5 AND query NOT LIKE '%pg_stat_statements%'"
                         " ORDER BY total_exec_time DESC").fetchall()
    print(f"{variant}, {n} deliveries: calls | server ms | rows | statement")
    for r in rows:
        print(" | ".join(str(x) for x in r))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conn", required=True)
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="loop,joined,floor")
    ap.add_argument("--profile", choices=sorted(VARIANTS), default=None)
    args = ap.parse_args()
    if args.profile:
        profile(args.conn, args.profile, args.events)
        return
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"unknown variant {v}; known: {', '.join(VARIANTS)}")
    rates = {v: [] for v in variants}
    for r in range(args.rounds):
        line = []
        for v in variants:
            rates[v].append(drain(args.conn, v, args.events))
            line.append(f"{v} {rates[v][-1]:,.0f}/s")
        print(f"round {r + 1}: " + ", ".join(line), flush=True)
    reference = variants[0]
    for v in variants:
        m = statistics.median(rates[v])
        print(f"{v}: median {m:,.0f} deliveries/s, {m / statistics.median(rates[reference]):.3f}x {reference}")


if __name__ == "__main__":
    main()
