#!/usr/bin/python3
"""A hot key slows nobody (issue 33): what a claim(10) of a handler costs while one of its
keys has a deep backlog that cannot run, against the same claim without that backlog.

For each version asked for (a database each, relaybus at that version): one handler, 20,000
deliveries of distinct keys (the work), and, in the "hot" variant, --hot more of one key
published before them, whose first delivery is blocked:
  in-flight  worker A claimed it and holds it (its lane is A's);
  failing    it failed with an hour's backoff (a pending retry; its lane is free).
Then worker B claims 10 and completes them, --claims times, and the script prints the
median and p95 time of B's claim (client side), per version and variant, and the ratio to
the same version without the hot backlog.

  bench/ab/hot_key.py --conn "host=... port=... user=postgres" [--versions 0.2.1,0.3.0]
                      [--hot 200000] [--claims 300] [--variants in-flight,failing]

Needs a superuser (it creates databases hotkey_<version>_<variant>).
"""
import argparse
import json
import statistics
import time

import psycopg


def publish(c, events):
    for i in range(0, len(events), 1000):
        c.execute("SELECT count(*) FROM relaybus.publish_batch(%s::jsonb)", (json.dumps(events[i:i + 1000]),))


def run(conninfo, version, variant, hot, claims):
    db = f"hotkey_{version.replace('.', '')}_{variant.replace('-', '_')}"
    with psycopg.connect(conninfo + " dbname=postgres", autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {db}")
        c.execute(f"CREATE DATABASE {db}")
    with psycopg.connect(conninfo + f" dbname={db}", autocommit=True) as c:
        c.execute(f"CREATE EXTENSION relaybus VERSION '{version}'")
        c.execute("SELECT relaybus.subscribe('h', ARRAY['t'])")
        if variant != "none":
            publish(c, [dict(type="t", id=f"hot-{i}", key="hot", payload={"n": i}) for i in range(hot)])
        publish(c, [dict(type="t", id=f"w-{i}", key=f"k{i}", payload={"n": i}) for i in range(20000)])
        c.execute("VACUUM ANALYZE")
        if variant != "none":
            # Worker A takes the hot key's first delivery (the oldest work, so its first claim
            # picks it) and, in "failing", fails it with an hour's backoff and lets its lanes go.
            rows = c.execute("SELECT lease_token, event_id FROM relaybus.claim('A', 1, '1 hour')").fetchall()
            assert rows and rows[0][1] == "hot-0", rows
            if variant == "failing":
                c.execute("SELECT relaybus.fail(%s, 'down', now() + interval '1 hour')", (rows[0][0],))
                c.execute("SELECT relaybus.relinquish('A')")
        times = []
        for _ in range(claims):
            t0 = time.perf_counter()
            rows = c.execute("SELECT lease_token, event_id FROM relaybus.claim('B', 10, '30 seconds')").fetchall()
            times.append((time.perf_counter() - t0) * 1000)
            if rows:
                c.execute("SELECT relaybus.complete_many(%s)", ([r[0] for r in rows],))
        hot_out = c.execute("SELECT count(*) FROM relaybus.list_deliveries('processing', 'h', 1000000) "
                            "WHERE event_id LIKE 'hot-%%'").fetchone()[0]
    with psycopg.connect(conninfo + " dbname=postgres", autocommit=True) as c:
        c.execute(f"DROP DATABASE {db}")
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95)], hot_out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conn", required=True)
    ap.add_argument("--versions", default="0.2.1,0.3.0")
    ap.add_argument("--variants", default="in-flight,failing")
    ap.add_argument("--hot", type=int, default=200000)
    ap.add_argument("--claims", type=int, default=300)
    args = ap.parse_args()
    print("| version | variant | claim(10) median ms | p95 ms | / without the hot key | hot deliveries in flight after |")
    print("| --- | --- | --- | --- | --- | --- |")
    for version in args.versions.split(","):
        base, base95, _ = run(args.conn, version, "none", args.hot, args.claims)
        print(f"| {version} | none | {base:.2f} | {base95:.2f} | 1.00x | - |", flush=True)
        for variant in args.variants.split(","):
            med, p95, hot_out = run(args.conn, version, variant, args.hot, args.claims)
            print(f"| {version} | {variant} | {med:.2f} | {p95:.2f} | {med / base:.2f}x | {hot_out} |", flush=True)


if __name__ == "__main__":
    main()
