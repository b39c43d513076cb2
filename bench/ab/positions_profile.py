#!/usr/bin/python3
"""Where a drain of the positions prototype spends its server time, per statement, for the
counter row (bench/peers/positions.py), the commit log (bench/peers/positions_log.py) and
staged deliveries (bench/peers/positions_staged.py):
reset, preload (as the harness does: --preload-batch events per transaction, 1,000 unless
told), VACUUM, then one consumer drains with claim(--batch) + complete_many while
pg_stat_statements.track = all records the statements inside the two functions. Prints,
per system, the client's time per claim and per complete_many (medians) and the server
time per statement (calls; execution and planning time, in all and per call; rows).

  bench/ab/positions_profile.py --conn CONNINFO [--systems positions,positions_log,positions_staged]
                                [--events N] [--batch B] [--preload-batch P]

The database needs pg_stat_statements (created here if missing; the cluster must preload it,
as scripts/cluster does) and, for positions_log and positions_staged, a superuser and the
relaybus library.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import positions  # noqa: E402
import positions_log  # noqa: E402
import positions_staged  # noqa: E402
import runner  # noqa: E402
import psycopg  # noqa: E402

SYSTEMS = {"positions": positions.Positions, "positions_log": positions_log.PositionsLog,
           "positions_staged": positions_staged.PositionsStaged}


def profile(conninfo, name, events, batch, preload_batch):
    system = SYSTEMS[name]()
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("SET client_min_messages = warning")
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        system.reset(c)
        evs = runner.preload_events(events)
        for i in range(0, len(evs), preload_batch):
            system.publish(c, evs[i:i + preload_batch])
        for t in [r[0] for r in c.execute("SELECT format('%I.%I', schemaname, relname) FROM pg_stat_user_tables "
                                          "WHERE schemaname = 'relaybus_next'")]:
            c.execute(f"VACUUM {t}")
        c.execute("SET pg_stat_statements.track = 'all'")
        c.execute("SET pg_stat_statements.track_planning = on")
        c.execute("SELECT pg_stat_statements_reset()")
        claims, completes = [], []
        while True:
            t0 = time.perf_counter()
            rows = c.execute("SELECT token FROM relaybus_next.claim(%s, 'profile', %s, '30 seconds')",
                             (runner.HANDLER, batch)).fetchall()
            t1 = time.perf_counter()
            if not rows:
                break
            c.execute("SELECT relaybus_next.complete_many(%s, %s)", (runner.HANDLER, [r[0] for r in rows]))
            claims.append((t1 - t0) * 1000)
            completes.append((time.perf_counter() - t1) * 1000)
        stats = c.execute(
            "SELECT calls, total_exec_time, total_plan_time, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 110) "
            "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND query NOT LIKE '%pg_stat_statements%' AND total_exec_time + total_plan_time > 0.5 "
            "ORDER BY total_exec_time + total_plan_time DESC").fetchall()
        left = system.unfinished(c)
    print(f"## {name}: {events} events preloaded {preload_batch} per transaction, claims of {batch}; "
          f"{len(claims)} batches, {left} left")
    print(f"client: claim median {statistics.median(claims):.2f} ms, complete_many median "
          f"{statistics.median(completes):.2f} ms, drain {sum(claims) + sum(completes):.0f} ms")
    print("calls | execution ms | per call | planning ms | per call | rows | statement")
    for calls, total, plan, nrows, query in stats:
        print(f"{calls} | {total:.1f} | {total / calls:.3f} | {plan:.1f} | {plan / calls:.3f} | {nrows} | {query}")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conn", required=True)
    ap.add_argument("--systems", default="positions,positions_log")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--preload-batch", type=int, default=1000)
    o = ap.parse_args()
    for name in o.systems.split(","):
        profile(o.conn, name, o.events, o.batch, o.preload_batch)


if __name__ == "__main__":
    main()
