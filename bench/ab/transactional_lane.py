#!/usr/bin/python3
"""What ten concurrent transactional handlers in one lane cost (issue 33's accepted
trade-off): in 0.3.0 a completion updates its lane's row, so a handler that completes
inside its own transaction holds the lane row from complete() until its commit, and the
lane's other completions wait for that commit; in 0.2 a completion deleted its own delivery
and only shared the lane (FOR KEY SHARE).

For each version: --events unkeyed deliveries, either all in lane 0 ("one lane") or spread
over every lane ("spread"). One worker claims them (batches of up to --batch) and hands each
delivery to one of --handlers threads, each with its own connection, which runs the
documented pattern: BEGIN; the handler's write (an INSERT into a table of the application);
SELECT relaybus.complete(token) last; COMMIT. Prints completions per second and the p50/p99
of a handler's transaction (BEGIN to COMMIT), per version and layout.

  bench/ab/transactional_lane.py --conn "host=... port=... user=postgres"
      [--versions 0.2.1,0.3.0] [--events 3000] [--handlers 10] [--batch 32] [--work-ms 1]

Needs a superuser (it creates databases txlane_<version>).
"""
import argparse
import json
import queue
import statistics
import threading
import time

import psycopg


def ids_in_lane(c, lane, n):
    """n event ids whose lane (relaybus.lane_of) is `lane`."""
    out, i = [], 0
    while len(out) < n:
        rows = c.execute("SELECT id FROM (SELECT 'ev-' || g AS id FROM generate_series(%s, %s) g) x "
                         "WHERE relaybus.lane_of(id) = %s", (i, i + 99999, lane)).fetchall()
        out += [r[0] for r in rows]
        i += 100000
    return out[:n]


def run(conninfo, version, layout, events, handlers, batch, work_ms):
    db = "txlane_" + version.replace(".", "")
    with psycopg.connect(conninfo + " dbname=postgres", autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {db}")
        c.execute(f"CREATE DATABASE {db}")
    dsn = conninfo + f" dbname={db}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE EXTENSION relaybus VERSION '{version}'")
        c.execute("SELECT relaybus.subscribe('h', ARRAY['t'])")
        c.execute("CREATE TABLE app_writes (event_id text PRIMARY KEY, at timestamptz DEFAULT now())")
        ids = ids_in_lane(c, 0, events) if layout == "one lane" else [f"ev-{i}" for i in range(events)]
        for i in range(0, len(ids), 1000):
            c.execute("SELECT count(*) FROM relaybus.publish_batch(%s::jsonb)",
                      (json.dumps([dict(type="t", id=x) for x in ids[i:i + 1000]]),))
        c.execute("VACUUM ANALYZE")
    work = queue.Queue(maxsize=handlers * 2)
    durations, lost = [], []

    def handler():
        with psycopg.connect(dsn) as h:
            while True:
                item = work.get()
                if item is None:
                    return
                token, event_id = item
                t0 = time.perf_counter()
                with h.transaction():
                    h.execute("INSERT INTO app_writes (event_id) VALUES (%s)", (event_id,))
                    if work_ms:
                        time.sleep(work_ms / 1000)
                    if not h.execute("SELECT relaybus.complete(%s)", (token,)).fetchone()[0]:
                        lost.append(event_id)
                durations.append((time.perf_counter() - t0) * 1000)
                work.task_done()

    threads = [threading.Thread(target=handler) for _ in range(handlers)]
    for t in threads:
        t.start()
    started = time.perf_counter()
    done = 0
    with psycopg.connect(dsn, autocommit=True) as w:
        while done < events:
            rows = w.execute("SELECT lease_token, event_id FROM relaybus.claim('w', %s, '5 minutes')",
                             (batch,)).fetchall()
            if not rows:
                work.join()  # the lane's room frees as its completions commit
                continue
            for r in rows:
                work.put((r[0], r[1]))
            done += len(rows)
        work.join()
    elapsed = time.perf_counter() - started
    for _ in threads:
        work.put(None)
    for t in threads:
        t.join()
    with psycopg.connect(dsn, autocommit=True) as c:
        written = c.execute("SELECT count(*) FROM app_writes").fetchone()[0]
    with psycopg.connect(conninfo + " dbname=postgres", autocommit=True) as c:
        c.execute(f"DROP DATABASE {db}")
    durations.sort()
    return dict(rate=events / elapsed, p50=statistics.median(durations),
                p99=durations[int(len(durations) * 0.99)], lost=len(lost), written=written)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conn", required=True)
    ap.add_argument("--versions", default="0.2.1,0.3.0")
    ap.add_argument("--events", type=int, default=3000)
    ap.add_argument("--handlers", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--work-ms", type=float, default=1.0)
    args = ap.parse_args()
    print(f"| version | layout | completions/s | handler transaction p50 ms | p99 ms | lost | app rows |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for version in args.versions.split(","):
        for layout in ("one lane", "spread"):
            r = run(args.conn, version, layout, args.events, args.handlers, args.batch, args.work_ms)
            print(f"| {version} | {layout} | {r['rate']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | "
                  f"{r['lost']} | {r['written']} |", flush=True)


if __name__ == "__main__":
    main()
