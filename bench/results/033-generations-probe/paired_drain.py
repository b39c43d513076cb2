#!/usr/bin/python3
"""Drains of the same preload alternated between two databases of one cluster, "plain" (a
fresh relaybus 0.3.0) and "generations" (the same after partition.sql or
partition_lane_progress.sql): one consumer, claim(500) then complete_many.

  paired_drain.py "host=DIR port=PORT user=postgres" ROUNDS
"""
import os
import statistics
import sys
import time

import psycopg

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
for sub in ("bench/ab", "bench/peers", "bench"):
    sys.path.insert(0, os.path.join(ROOT, sub))
import drain_paired  # noqa: E402
base = sys.argv[1]
rates = {"plain": [], "generations": []}
for r in range(int(sys.argv[2])):
    for db in (["plain", "generations"] if r % 2 == 0 else ["generations", "plain"]):
        conn = f"{base} dbname={db}"
        drain_paired.preload(conn, 20000)
        with psycopg.connect(conn, autocommit=True) as c:
            t0 = time.time(); n = 0
            while True:
                rows = c.execute(drain_paired.CLAIM, ("w", 500, "bench", "h1")).fetchall()
                if not rows: break
                n += len(rows)
                c.execute("SELECT relaybus.complete_many(%s)", ([r[0] for r in rows],))
            rates[db].append(n / (time.time() - t0))
for db, v in rates.items():
    print(db, [round(x) for x in v], "median", round(statistics.median(v)))
print("generations / plain", round(statistics.median(rates["generations"]) / statistics.median(rates["plain"]), 3))
