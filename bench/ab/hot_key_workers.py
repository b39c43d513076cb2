#!/usr/bin/python3
"""A hot key slows nobody (issue 33), the in-database handler workers' half: how fast the
workers serve one in-database handler (the "victim") while another in-database handler
("hot") of the same database has a deep backlog of one key that cannot run, against the
same workers without that backlog.

The workers (relaybus.sql_handler_workers of them, at least 2) try the in-database handlers
in turn each round and stop at the first that has due work, so every round that serves the
victim may first claim for the hot handler and find nothing: what that empty claim costs
with the blocked key is what the victim waits for.

For each version asked for, and each variant of --order (default none,hot,hot,none: each
version's two variants alternated, A B B A, in the same run), a fresh database --db (which
must be the one relaybus.database lists, so the workers serve it; it is dropped WITH (FORCE)
and created again, which ends its workers, and the script waits for them to reconnect):

  - relaybus at that version; two in-database handlers: "hot" (type hot, a function that
    always raises, backoff_base = backoff_max = 1 hour) and "victim" (type v, a function
    that inserts the event's id, its published_at and clock_timestamp() into a table);
  - variant hot: the hot key's first event, hot-0, is published alone and the script waits
    until a worker has failed it (a pending retry, an hour away); then --hot - 1 more
    events of the same key, 1,000 per transaction. They stay pending behind hot-0 (0.3.0
    parks them, as claims of the hot handler reach them, as pending exception rows, 64 a
    claim, so parking goes on during the measurement). Variant parked (0.3.0 only; skipped
    for 0.2.x, which parks nothing): as hot, then the script wakes the workers with victim
    events ("park-", not measured) until every delivery of the hot key is parked, and
    waits until the victim has handled them: the state a hot key settles in. Variant none:
    the hot handler is subscribed and has nothing;
  - VACUUM ANALYZE, a warm-up of 20 victim events, pg_stat_statements reset;
  - victim events (distinct keys) at --rate per second for --seconds, each published in its
    own transaction (autocommit), on a fixed schedule; then the script waits until the
    victim has handled them all (at most --drain seconds).

The latency of a victim event is the handler's clock_timestamp() minus the event's
published_at (the publishing transaction's now(): the publish's commit follows it by the
publish statement's own time, which the table shows as "publish ms", client side). Both
clocks are the server's. It prints one row per run (p50/p95/p99/max latency, ms) and, per
version, the runs of each variant pooled and the ratio hot / none; with --statements, the
statements the server spent the most time on during each measurement (pg_stat_statements,
best with pg_stat_statements.track = all, which sees the statements inside relaybus's
functions and the handler functions).

  bench/ab/hot_key_workers.py --conn "host=... port=... user=postgres" [--db hkw]
        [--versions 0.2.1,0.3.0] [--order none,hot,hot,none] [--hot 200000]
        [--rate 200] [--seconds 20] [--drain 120] [--park-timeout 180] [--statements]

The defaults take about 5 minutes on a 2-core machine; --versions 0.3.0
--order none,parked,parked,none about 6 (parking 200,000 takes about 2 of them a run).

Needs a superuser, a server with shared_preload_libraries = 'relaybus, pg_stat_statements'
(pg_stat_statements optional: without it nothing is shown for --statements) and
relaybus.database = '<--db>'.
"""
import argparse
import json
import statistics
import sys
import time

import psycopg

HOT_FN = """CREATE FUNCTION public.hot_fn(e jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'hot key down';
END $$"""
VICTIM_FN = """CREATE FUNCTION public.victim_fn(e jsonb) RETURNS void LANGUAGE sql AS $$
  INSERT INTO public.victim_log VALUES (e->>'id', (e->>'published_at')::timestamptz, clock_timestamp())
  ON CONFLICT DO NOTHING
$$"""


def wait_for(what, check, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"hot_key_workers: timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def fresh_database(conninfo, db):
    # A worker ends at SIGTERM only between statements (between handler calls): one inside a
    # long claim outlasts the 5 s DROP DATABASE ... WITH (FORCE) waits, so try again.
    with psycopg.connect(conninfo + " dbname=postgres", autocommit=True) as c:
        for attempt in range(12):
            try:
                c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
                break
            except psycopg.errors.ObjectInUse:
                if attempt == 11:
                    raise
                time.sleep(1)
        c.execute(f'CREATE DATABASE "{db}"')


def workers_connected(conninfo, db, want):
    with psycopg.connect(conninfo + " dbname=postgres", autocommit=True) as c:
        n = c.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                      " AND backend_type = 'relaybus sql handler'", (db,)).fetchone()[0]
    return n >= want


def pgss(conninfo):
    """A connection to the database where pg_stat_statements' view is, or None."""
    try:
        c = psycopg.connect(conninfo + " dbname=postgres", autocommit=True)
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        c.execute("SELECT count(*) FROM pg_stat_statements")
        return c
    except psycopg.Error:
        return None


def hot_parked(c, version, pending=True):
    """How many of the hot key's deliveries are pending, and (0.3.0) how many of them are
    exception rows (parked behind hot-0, or hot-0 itself)."""
    if pending:
        pending = c.execute("SELECT coalesce(sum(pending), 0) FROM relaybus.statistics()"
                            " WHERE handler = 'hot'").fetchone()[0]
    if version.startswith("0.2"):
        return pending, None
    exc = c.execute("SELECT count(*) FROM relaybus.exceptions WHERE handler = 'hot'"
                    " AND status = 'pending'").fetchone()[0]
    return pending, exc


def handled(c, prefix):
    return c.execute("SELECT count(*) FROM public.victim_log WHERE event_id LIKE %s",
                     (prefix + "%",)).fetchone()[0]


def run(args, version, variant, stats_conn):
    db = args.db
    fresh_database(args.conn, db)
    timings = {}
    with psycopg.connect(args.conn + f" dbname={db}", autocommit=True) as c:
        want = int(c.execute("SHOW relaybus.sql_handler_workers").fetchone()[0])
        if want < 2:
            raise SystemExit("hot_key_workers: relaybus.sql_handler_workers must be at least 2")
        c.execute(f"CREATE EXTENSION relaybus VERSION '{version}'")
        c.execute("CREATE TABLE public.victim_log (event_id text PRIMARY KEY,"
                  " published_at timestamptz NOT NULL, handled_at timestamptz NOT NULL)")
        c.execute(HOT_FN)
        c.execute(VICTIM_FN)
        c.execute("SELECT relaybus.subscribe('hot', ARRAY['hot'], 25, '1 hour', '1 hour',"
                  " 'public.hot_fn(jsonb)'::regprocedure)")
        c.execute("SELECT relaybus.subscribe('victim', ARRAY['v'], 25, '1 second', '1 hour',"
                  " 'public.victim_fn(jsonb)'::regprocedure)")
        wait_for("the in-database handler workers to connect",
                 lambda: workers_connected(args.conn, db, want), 180, 0.5)
        if variant in ("hot", "parked"):
            t0 = time.monotonic()
            c.execute("SELECT relaybus.publish('hot', '{}', 'hot', 'hot-0')")
            wait_for("a worker to fail hot-0",
                     lambda: c.execute("SELECT attempts FROM relaybus.list_deliveries('pending', 'hot', 1)"
                                       " WHERE event_id = 'hot-0' AND attempts >= 1").fetchone(), 60)
            for i in range(1, args.hot, 1000):
                batch = [dict(type="hot", id=f"hot-{j}", key="hot", payload={})
                         for j in range(i, min(i + 1000, args.hot))]
                c.execute("SELECT count(*) FROM relaybus.publish_batch(%s::jsonb)", (json.dumps(batch),))
            timings["hot publish s"] = time.monotonic() - t0
            if variant == "parked":
                # 0.3.0 parks a lane's window (64 positions) behind a failing delivery at each
                # claim that reads the lane; park them all before measuring. The workers keep
                # the hot lane leased between their rounds (a claim of our own would pass it
                # over), so make them claim: every publish for the victim wakes them, and a
                # round that tries the hot handler parks 64. These events ("park-") are not
                # measured; the measurement starts once the victim has handled them all.
                t0 = time.monotonic()
                woken = 0
                while hot_parked(c, version, pending=False)[1] < args.hot:
                    for _ in range(100):
                        c.execute("SELECT relaybus.publish('v', '{}', %s, %s)", (f"p{woken}", f"park-{woken}"))
                        woken += 1
                    if time.monotonic() - t0 > args.park_timeout:
                        print(f"# {version} parked: gave up parking after {args.park_timeout} s", file=sys.stderr)
                        break
                wait_for("the victim's park- events", lambda: handled(c, "park-") >= woken, args.drain, 0.2)
                timings["park s"] = time.monotonic() - t0
        c.execute("VACUUM ANALYZE")
        # Warm-up: the workers' plans, the victim's lanes.
        for i in range(20):
            c.execute("SELECT relaybus.publish('v', '{}', %s, %s)", (f"w{i}", f"warm-{i}"))
        wait_for("the warm-up", lambda: handled(c, "warm-") >= 20, 120)
        before = hot_parked(c, version) if variant != "none" else (0, None)
        if stats_conn is not None:
            stats_conn.execute("SELECT pg_stat_statements_reset()")
        n = args.rate * args.seconds
        publish_ms = []
        t0 = time.monotonic()
        for i in range(n):
            delay = t0 + i / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            p0 = time.perf_counter()
            c.execute("SELECT relaybus.publish('v', '{}', %s, %s)", (f"k{i}", f"v-{i}"))
            publish_ms.append((time.perf_counter() - p0) * 1000)
        publish_s = time.monotonic() - t0
        try:
            wait_for("the victim's events", lambda: handled(c, "v-") >= n, args.drain, 0.2)
        except SystemExit as e:
            print(f"# {version} {variant}: {e}", file=sys.stderr)
        drain_s = time.monotonic() - t0 - publish_s
        lat = [r[0] for r in c.execute(
            "SELECT extract(epoch FROM handled_at - published_at) * 1000 FROM public.victim_log"
            " WHERE event_id LIKE 'v-%' ORDER BY 1").fetchall()]
        # Events that waited over a second, and in how many of the victim's lanes: a worker
        # keeps the lanes of its last full batch while its next round claims for the other
        # handlers, so a slow claim of the hot handler holds up exactly those lanes.
        slow, slow_lanes = c.execute(
            "SELECT count(*), count(DISTINCT relaybus.lane_of('k' || substr(event_id, 3)))"
            " FROM public.victim_log WHERE event_id LIKE 'v-%' AND handled_at - published_at > interval '1 second'"
        ).fetchone()
        worst = c.execute(
            "SELECT event_id, published_at, handled_at, relaybus.lane_of('k' || substr(event_id, 3))"
            " FROM public.victim_log WHERE event_id LIKE 'v-%' ORDER BY handled_at - published_at DESC LIMIT 1"
        ).fetchone()
        after = hot_parked(c, version) if variant != "none" else (0, None)
        top = []
        if stats_conn is not None and args.statements:
            top = stats_conn.execute(
                "SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3),"
                " round(max_exec_time::numeric, 1),"
                " regexp_replace(left(query, 160), '\\s+', ' ', 'g')"
                " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)"
                " ORDER BY total_exec_time DESC LIMIT %s", (db, args.statements_top)).fetchall()
    return dict(version=version, variant=variant, lat=[float(x) for x in lat], n=n,
                publish_ms=statistics.median(publish_ms), publish_s=publish_s, drain_s=drain_s,
                before=before, after=after, top=top, slow=(slow, slow_lanes), worst=worst, **timings)


def pct(sorted_values, p):
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def summary(lat):
    s = sorted(lat)
    return [pct(s, 50), pct(s, 95), pct(s, 99), s[-1] if s else float("nan")]


def fmt_parked(pair):
    pending, exc = pair
    return f"{pending:,}" if exc is None else f"{pending:,} ({exc:,})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conn", required=True, help="libpq connection string, without dbname")
    ap.add_argument("--db", default="hkw", help="the database relaybus.database lists (dropped and recreated)")
    ap.add_argument("--versions", default="0.2.1,0.3.0")
    ap.add_argument("--order", default="none,hot,hot,none", help="variants of each version, in order")
    ap.add_argument("--hot", type=int, default=200000, help="deliveries of the hot key")
    ap.add_argument("--rate", type=int, default=200, help="victim events per second")
    ap.add_argument("--seconds", type=int, default=20, help="how long victim events are published")
    ap.add_argument("--drain", type=int, default=120, help="at most this long to wait for the victim's last events")
    ap.add_argument("--park-timeout", type=int, default=180, help="at most this long to park the hot key (variant parked)")
    ap.add_argument("--statements", action="store_true", help="print the top pg_stat_statements of each run")
    ap.add_argument("--statements-top", type=int, default=8)
    args = ap.parse_args()
    stats_conn = pgss(args.conn)
    started = time.monotonic()
    print("| version | variant | victim p50 ms | p95 ms | p99 ms | max ms | handled | over 1 s (lanes) | publish ms | "
          "hot pending (exception rows) before → after | hot publish s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    runs = []
    for version in args.versions.split(","):
        for variant in args.order.split(","):
            if variant == "parked" and version.startswith("0.2"):
                continue  # nothing is ever parked before 0.3.0: "parked" would be "hot"
            r = run(args, version, variant, stats_conn)
            runs.append(r)
            p50, p95, p99, mx = summary(r["lat"])
            parked = (f"{fmt_parked(r['before'])} → {fmt_parked(r['after'])}" if variant != "none" else "-")
            hp = f"{r['hot publish s']:.1f}" if "hot publish s" in r else "-"
            if "park s" in r:
                hp += f" + {r['park s']:.1f} parking"
            print(f"| {version} | {variant} | {p50:.1f} | {p95:.1f} | {p99:.1f} | {mx:.1f} | "
                  f"{len(r['lat'])}/{r['n']} | {r['slow'][0]} ({r['slow'][1]}) | {r['publish_ms']:.2f} | {parked} | {hp} |", flush=True)
            if r["worst"] and r["slow"][0]:
                w = r["worst"]
                print(f"#   slowest: {w[0]} (lane {w[3]}) published {w[1]:%H:%M:%S.%f}, handled {w[2]:%H:%M:%S.%f}")
            if r["top"]:
                for calls, total, mean, mx, query in r["top"]:
                    print(f"#   {calls:>7} calls {total:>10} ms total {mean:>9} ms mean {mx:>9} ms max  {query}")
                sys.stdout.flush()
    print()
    print("| version | variant | runs | victim p50 ms | p95 ms | p99 ms | max ms | p50 / none | p95 / none | p99 / none | max / none |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for version in args.versions.split(","):
        pooled, count = {}, {}
        for variant in dict.fromkeys(args.order.split(",")):
            mine = [r for r in runs if r["version"] == version and r["variant"] == variant]
            if mine:
                pooled[variant] = summary([x for r in mine for x in r["lat"]])
                count[variant] = len(mine)
        base = pooled.get("none")
        for variant, values in pooled.items():
            ratios = (" | ".join(f"{v / b:.2f}x" for v, b in zip(values, base)) if base
                      else " | ".join(["-"] * 4))
            print(f"| {version} | {variant} | {count[variant]} | " +
                  " | ".join(f"{v:.1f}" for v in values) + f" | {ratios} |")
    print(f"\n# {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
