#!/usr/bin/env python3
"""relaybus benchmark harness: 0.1.0 against 0.2.0, interleaved, every run validated.

  bench/run --quick        a few minutes: drain, publish, mixed
  bench/run --full         longer runs, more configurations
  bench/run --validity     a tiny validity-only run (the test suite's bench_validity.sh)
  bench/run --quick --only held     one scenario alone (drain, publish, mixed; held and
                           steady: the held-snapshot scenarios, bench/held_bench.py)
  bench/run --quick --mongo mongodb://localhost:27017/relaybus_bench?replicaSet=rs0
                           the same scenarios on the MongoDB store (bench/mongo_bench.py)

Run it through bench/run, which installs the packages and the extension and builds the
relaybus programs first. Starts a throwaway cluster (scripts/cluster, port 54360 unless --port), creates db_010
(relaybus 0.1.0) and db_020 (relaybus 0.2.1, the 0.2 line), and runs every configuration A B A B. Each
run starts from an emptied database with reset statistics. Publishers and dispatchers are
separate processes of bin/relaybus-bench, the benchmark driver (the MongoDB store's setup
goes through the operator tool, bin/relaybus); this script only prepares, measures, checks.
Writes bench/results/<timestamp>/: results.json (every run), results.md (medians and
0.2.0/0.1.0 ratios) and one SVG chart per scenario.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "bin", "relaybus")  # the operator tool: setup, subscribe
BENCH = os.path.join(ROOT, "bin", "relaybus-bench")  # the benchmark driver: drain, publish, mixed
HARNESS = "/*relaybus-bench-harness*/"  # keeps our own queries out of the statement counts
VERSIONS = [("0.1.0", "db_010"), ("0.2.0", "db_020")]
HANDLER = "bench"

DEFAULTS = {"concurrency": 10, "batch": 10, "poll_ms": 1000}
# Tuned for the bench handler, which returns at once: large batches, and two threads to run
# it (one per core), where one thread per delivery in flight spends the drain waking 200
# threads for every batch (docs/performance.md, the dispatcher's goal).
TUNED = {"concurrency": 200, "batch": 200, "poll_ms": 50, "handler_threads": 2}
TUNED_NAME = "c200 b200 t2 poll 50ms"


def plans(mode):
    """The scenarios of a mode: (scenario, config name, parameters)."""
    if mode == "validity":
        return [("drain", "validity drain 2 procs", dict(events=300, dispatchers=2, concurrency=10, batch=10, poll_ms=100)),
                ("mixed", "validity mixed 200/s", dict(rate=200, duration_s=2, dispatchers=1, concurrency=10, batch=10, poll_ms=100))]
    drain_n = 5000 if mode == "quick" else 20000
    procs = [1, 2] if mode == "quick" else [1, 2, 4]
    out = []
    for p in procs:
        out.append(("drain", f"{p} proc, defaults (c10 b10 poll 1s)", dict(events=drain_n, dispatchers=p, **DEFAULTS)))
        out.append(("drain", f"{p} proc, tuned ({TUNED_NAME})", dict(events=drain_n, dispatchers=p, **TUNED)))
    pubs = [(1, 1, 5000), (1, 100, 20000)] if mode == "quick" else [(1, 1, 20000), (1, 100, 100000), (4, 1, 40000), (4, 100, 100000)]
    for p, b, n in pubs:
        out.append(("publish", f"P={p} batch={b}", dict(publishers=p, batch=b, events=n)))
    # Full mode also sweeps the offered rate with tuned dispatchers, to find the highest
    # rate this machine sustains (every event handled, p99 under 250 ms).
    mixed = [(1000, DEFAULTS, "defaults")] if mode == "quick" else \
        [(1000, DEFAULTS, "defaults"), (2000, DEFAULTS, "defaults"), (1000, TUNED, "tuned"),
         (2000, TUNED, "tuned"), (3000, TUNED, "tuned"), (4000, TUNED, "tuned"),
         (5000, TUNED, "tuned"), (6000, TUNED, "tuned")]
    dur = 20 if mode == "quick" else 30
    for rate, d, name in mixed:
        out.append(("mixed", f"{rate}/s for {dur} s, {name} dispatchers", dict(rate=rate, duration_s=dur, dispatchers=1, **d)))
    return out


class Cluster:
    def __init__(self, port):
        self.port = port
        self.dir = f"/tmp/relaybus-bench-{port}"

    def start(self):
        subprocess.run([os.path.join(ROOT, "scripts", "cluster"), "start", self.dir, str(self.port)], check=True)

    def stop(self):
        subprocess.run([os.path.join(ROOT, "scripts", "cluster"), "stop", self.dir], check=False)

    def conninfo(self, db):
        return f"host={self.dir} port={self.port} user=postgres dbname={db}"

    def sql(self, db, text):
        r = subprocess.run(["psql", "-qXAt", "-v", "ON_ERROR_STOP=1", "-F", "\t", "-d", self.conninfo(db), "-c", text],
                           check=True, capture_output=True, text=True)
        return [line.split("\t") for line in r.stdout.splitlines() if line != ""]

    def value(self, db, text):
        rows = self.sql(db, text)
        return rows[0][0] if rows else None


def prepare(cluster):
    cluster.sql("postgres", "CREATE DATABASE db_010")
    cluster.sql("postgres", "CREATE DATABASE db_020")
    cluster.sql("db_010", "CREATE EXTENSION relaybus VERSION '0.1.0'")
    # The 0.2 line by name: this comparison, its goals (no delivery updates, HOT lane
    # updates) and its checks (leftovers, pending_deliveries) are about 0.2's lane-lease
    # storage, and the default version is 0.3.0 now (its positions storage has no status
    # column; bench/held_bench.py runs it).
    cluster.sql("db_020", "CREATE EXTENSION relaybus VERSION '0.2.1'")
    for _, db in VERSIONS:
        cluster.sql(db, "CREATE EXTENSION pg_stat_statements")


# The order relaybus's own transactions take its tables in: lanes before deliveries (a
# claim, a takeover), deliveries before completions and events (a completion, purge_expired).
LOCK_ORDER = ["lanes", "deliveries", "completions", "events", "key_counters", "subscriptions"]


def relaybus_tables(cluster, db):
    return ordered_tables([r[0] for r in cluster.sql(db, "SELECT tablename FROM pg_tables WHERE schemaname = 'relaybus'")])


def empty_script(tables):
    """Every lock first, in the order given (relaybus_tables: relaybus's own), then TRUNCATE."""
    listed = ", ".join(tables)
    return (f"BEGIN; SET LOCAL lock_timeout = '10s'; LOCK TABLE {listed} IN ACCESS EXCLUSIVE MODE; "
            f"TRUNCATE {listed}; COMMIT;")


def ordered_tables(names):
    """relaybus's tables (names in the relaybus schema) in LOCK_ORDER, the rest after."""
    ordered = [t for t in LOCK_ORDER if t in names] + sorted(t for t in names if t not in LOCK_ORDER)
    return [f"relaybus.{t}" for t in ordered]


def empty_relaybus(cluster, db):
    """Empties every relaybus table, safely while the background workers run: TRUNCATE alone
    locks its tables in whatever order it lists them, and deadlocked with the maintenance
    worker's purge (deliveries, then events) or takeover (lanes, then deliveries). Taking
    every lock first, in relaybus's own order, leaves no cycle with them; a lock wait that
    still times out or deadlocks (a statement locking two tables at once) is tried again."""
    script = empty_script(relaybus_tables(cluster, db))
    for attempt in range(5):
        try:
            cluster.sql(db, script)
            return
        except subprocess.CalledProcessError as e:
            if attempt == 4 or not any(x in (e.stderr or "") for x in ("deadlock detected", "lock timeout")):
                raise
            time.sleep(0.2 * (attempt + 1))


def reset(cluster, db, preload=0):
    """Empties relaybus, subscribes the bench handler, optionally preloads, resets statistics."""
    tables = relaybus_tables(cluster, db)
    empty_relaybus(cluster, db)
    cluster.sql(db, f"SELECT relaybus.subscribe('{HANDLER}', ARRAY['bench.event'])")
    if preload:
        # In order, one chunk of 1,000 per publish_batch: every other event keyed, over
        # preload / 4 keys (two events per key, like entity ids: many keys, shallow), n = the
        # event number, so per key n grows with publish order. A few deep keys would make
        # the drain a chain of round trips per key in both versions, not a throughput test.
        cluster.sql(db, f"""DO $$
          BEGIN
            FOR c IN 0..{(preload - 1) // 1000} LOOP
              PERFORM count(*) FROM relaybus.publish_batch((
                SELECT jsonb_agg(jsonb_build_object('type', 'bench.event', 'id', 'e-' || i,
                         'payload', jsonb_build_object('n', i),
                         'key', CASE WHEN i % 2 = 0 THEN 'k' || (i % {max(1, preload // 4)}) END) ORDER BY i)
                  FROM generate_series(c * 1000 + 1, least((c + 1) * 1000, {preload})) i));
            END LOOP;
          END $$""")
    for t in tables:
        cluster.sql(db, f"VACUUM ANALYZE {t}")
    cluster.sql(db, "SELECT pg_stat_reset(), pg_stat_statements_reset()")


def table_stats(cluster, db):
    time.sleep(0.6)  # the exiting processes' statistics land in shared memory
    rows = cluster.sql(db, f"""SELECT {HARNESS} relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_dead_tup
                                 FROM pg_stat_user_tables WHERE schemaname = 'relaybus' AND relname IN ('deliveries', 'lanes')""")
    out = {}
    for name, ins, upd, hot, dele, dead in rows:
        out[name] = dict(ins=int(ins), upd=int(upd), hot=int(hot), dele=int(dele), dead=int(dead))
    out["statements"] = statement_calls(cluster, db)
    return out


def statement_calls(cluster, db):
    return int(cluster.value(db, f"""SELECT {HARNESS} coalesce(sum(calls), 0) FROM pg_stat_statements
                                      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                                        AND query NOT LIKE '%relaybus-bench-harness%'"""))


def user_tables(cluster, db):
    return [r[0] for r in cluster.sql(db, f"SELECT {HARNESS} format('%I.%I', schemaname, relname) FROM pg_stat_user_tables")]


def generic_stats(cluster, db):
    """A peer's figures: statements (as for relaybus) and dead tuples over all its tables."""
    time.sleep(0.6)  # the exiting processes' statistics land in shared memory
    dead = cluster.value(db, f"SELECT {HARNESS} coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables")
    return dict(statements=statement_calls(cluster, db), dead=int(dead))


def read_tsv(pattern):
    rows = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            rows.extend(line.rstrip("\n").split("\t") for line in f if line.strip())
    return rows


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def check_handled(expected, handled, ordered=True):
    """expected: {event_id: key}; handled rows: event_id, handler, key, n, at_us, attempts.
    Per-key order is checked only when the system promises it (`ordered`)."""
    problems = []
    seen = {}
    for r in handled:
        seen[(r[0], r[1])] = seen.get((r[0], r[1]), 0) + 1
    want = {(e, HANDLER) for e in expected}
    got = set(seen)
    lost, unexpected = len(want - got), len(got - want)
    duplicates = sum(c - 1 for c in seen.values())
    by_key = {}
    for r in handled:
        if r[2] != "-":
            by_key.setdefault((r[1], r[2]), []).append((int(r[4]), int(r[3])))
    order = 0
    for runs in (by_key.values() if ordered else []):
        runs.sort()
        for (_, a), (_, b) in zip(runs, runs[1:]):
            if b < a:
                order += 1
    for name, count in (("lost", lost), ("unexpected", unexpected), ("duplicates", duplicates), ("order violations", order)):
        if count:
            problems.append(f"{name} {count}")
    return problems, dict(lost=lost, unexpected=unexpected, duplicates=duplicates, order_violations=order)


def drain_seconds(summary, handled):
    """A drain's duration: from the window's start to the last delivery handled. relaybus-bench
    notices the end only at its next check (every 100 ms), which is up to a third of a
    20,000-delivery drain on the fastest systems; the records say when it really ended."""
    if "start_us" in summary and handled:
        return max(1e-6, (max(int(r[4]) for r in handled) - int(summary["start_us"])) / 1e6)
    return summary["elapsed_s"]


def check_leftovers(left, dead):
    """After a drain or mixed run: nothing may be left pending and nothing dead."""
    problems = []
    if left:
        problems.append(f"pending {left}")
    if dead:
        problems.append(f"dead {dead}")
    return problems, dict(pending=left, dead=dead)


def shared_metrics(stats, deliveries, wal_bytes):
    d, lanes = stats.get("deliveries", {}), stats.get("lanes")
    per = max(deliveries, 1)
    m = dict(wal_bytes_per_delivery=wal_bytes / per,
             statements_per_delivery=stats["statements"] / per,
             deliveries_updated_per_delivery=d.get("upd", 0) / per,
             hot_share_deliveries=(d["hot"] / d["upd"]) if d.get("upd") else None,
             dead_tuples_deliveries=d.get("dead", 0))
    if lanes is not None:
        m["hot_share_lanes"] = (lanes["hot"] / lanes["upd"]) if lanes["upd"] else None
        m["dead_tuples_lanes"] = lanes["dead"]
    return m


def cli(args, log):
    """Runs an operator command of bin/relaybus, its output to `log`."""
    return cli_command([CLI] + args, log)


def bench(args, log):
    """Runs a scenario of bin/relaybus-bench, its output to `log`."""
    return cli_command([BENCH] + args, log)


def cli_command(argv, log):
    """Runs a benchmark process (a relaybus program, a peer's runner), its output to `log`."""
    with open(log, "a") as f:
        r = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, text=True)
        f.write(r.stderr)
    # Progress lines go to our stderr too, shortened to the last one.
    tail = [l for l in r.stderr.splitlines() if l.strip()]
    if tail:
        print("    " + tail[-1], file=sys.stderr)
    return r.returncode


def dispatcher_args(p):
    return ["--dispatchers", str(p["dispatchers"]), "--concurrency", str(p["concurrency"]),
            "--batch", str(p["batch"]), "--poll-ms", str(p["poll_ms"]),
            "--handler-threads", str(p.get("handler_threads", 0))]


def relaybus_bench_args(scenario, p, db, prefix):
    """relaybus-bench's command line for one scenario run on `db` (either store)."""
    if scenario == "drain":
        return ["drain", "--db", db, "--out", prefix, "--handler", HANDLER,
                "--duration-s", "600"] + dispatcher_args(p)
    if scenario == "publish":
        return ["publish", "--db", db, "--out", prefix, "--publishers", str(p["publishers"]),
                "--batch", str(p["batch"]), "--events", str(p["events"])]
    return ["mixed", "--db", db, "--out", prefix, "--rate", str(p["rate"]),
            "--duration-s", str(p["duration_s"]), "--publishers", "2",
            # keys like entity ids: many, each with few events in flight at a time
            "--keys", str(max(100, p["rate"] * p["duration_s"] // 4))] + dispatcher_args(p)


class PgTarget:
    """One database of the throwaway cluster, as run_one needs a store: the --db relaybus-bench
    gets, and what the harness reads and resets around a run."""

    def __init__(self, cluster, db):
        self.cluster, self.name = cluster, db
        self.db = cluster.conninfo(db)

    def reset(self, preload, prefix, log):
        """Empties the store and subscribes the bench handler; returns the preloaded ids."""
        reset(self.cluster, self.name, preload=preload)
        return {f"e-{i}" for i in range(1, preload + 1)}

    ordered_keys = True

    def start(self):
        pass  # reset() zeroed the statistics already

    def run(self, scenario, p, prefix, log):
        return bench(relaybus_bench_args(scenario, p, self.db, prefix), log)

    def event_ids(self):
        return {r[0] for r in self.cluster.sql(self.name, f"SELECT {HARNESS} id FROM relaybus.events")}

    def pending_deliveries(self):
        return int(self.cluster.value(self.name, f"SELECT {HARNESS} count(*) FROM relaybus.deliveries WHERE handler = '{HANDLER}' AND status = 'pending'"))

    def leftovers(self):
        left = int(self.cluster.value(self.name, f"SELECT {HARNESS} count(*) FROM relaybus.deliveries WHERE status NOT IN ('dead', 'completed')"))
        dead = int(self.cluster.value(self.name, f"SELECT {HARNESS} count(*) FROM relaybus.deliveries WHERE status = 'dead'"))
        return left, dead

    def measure(self, summary, deliveries):
        """The store's figures of the run: (metrics, raw statistics)."""
        stats = table_stats(self.cluster, self.name)
        return shared_metrics(stats, deliveries, summary["wal_bytes"]), stats

    def finish(self):
        # Measured and checked: empty this database now, so that autovacuum does not work
        # through its dead tuples while the other version's run is being measured.
        empty_relaybus(self.cluster, self.name)


def run_one(target, scenario, p, outdir, tag):
    """One run of a scenario on a store target (PgTarget, or mongo_bench.MongoTarget),
    validated: returns dict(valid, problems, checks, metrics, table_stats, summary)."""
    prefix = os.path.join(outdir, "runs", tag)
    log = prefix + ".log"
    problems = []
    if scenario == "drain":
        expected = target.reset(p["events"], prefix, log)
        target.start()
        code = target.run(scenario, p, prefix, log)
        summary = json.load(open(prefix + ".summary.json"))
        handled = read_tsv(prefix + ".dispatcher-*.tsv")
        probs, counts = check_handled(expected, handled, target.ordered_keys)
        problems += probs
        deliveries = len(expected)
        metrics = dict(throughput=deliveries / drain_seconds(summary, handled), throughput_unit="deliveries/s")
        if not summary["drained"]:
            problems.append("not drained within the time limit")
    elif scenario == "publish":
        target.reset(0, prefix, log)
        target.start()
        code = target.run(scenario, p, prefix, log)
        summary = json.load(open(prefix + ".summary.json"))
        rows = read_tsv(prefix + ".publisher-*.tsv")
        published = {r[1] for r in rows if r[0] == "E"}
        calls = [int(r[1]) / 1000.0 for r in rows if r[0] == "C"]
        in_store = target.event_ids()
        deliveries = target.pending_deliveries()
        counts = dict(lost=len(published - in_store), unexpected=len(in_store - published),
                      deliveries=deliveries)
        if len(published) != p["events"]:
            problems.append(f"published {len(published)} of {p['events']}")
        if counts["lost"] or counts["unexpected"]:
            problems.append(f"events lost {counts['lost']}, unexpected {counts['unexpected']}")
        if deliveries != len(published):
            problems.append(f"{deliveries} pending deliveries for {len(published)} events")
        metrics = dict(throughput=len(published) / summary["elapsed_s"], throughput_unit="events/s",
                       latency_p50_ms=percentile(calls, 50), latency_p95_ms=percentile(calls, 95),
                       latency_p99_ms=percentile(calls, 99), latency_kind="publish call")
        deliveries = len(published)
    else:  # mixed
        target.reset(0, prefix, log)
        target.start()
        code = target.run(scenario, p, prefix, log)
        summary = json.load(open(prefix + ".summary.json"))
        rows = read_tsv(prefix + ".publisher-*.tsv")
        commit = {r[1]: int(r[4]) for r in rows if r[0] == "E"}
        handled = read_tsv(prefix + ".dispatcher-*.tsv")
        probs, counts = check_handled(commit, handled, target.ordered_keys)
        problems += probs
        # Commit time = when the publish call returned; a handler can start a little before
        # the acknowledgement reaches the publisher, so negative values count as 0.
        lat = [max(0, int(r[4]) - commit[r[0]]) / 1000.0 for r in handled if r[0] in commit]
        deliveries = len(commit)
        metrics = dict(throughput=deliveries / summary["publish_elapsed_s"], throughput_unit="events/s achieved",
                       offered=p["rate"], latency_p50_ms=percentile(lat, 50), latency_p95_ms=percentile(lat, 95),
                       latency_p99_ms=percentile(lat, 99), latency_kind="commit to handler",
                       backlog_max=summary["backlog_max"])
        if not summary["drained"]:
            problems.append("backlog not drained after publishing stopped")
    store_metrics, stats = target.measure(summary, deliveries)
    if scenario != "publish":
        probs, store_counts = check_leftovers(*target.leftovers())
        problems += probs
        counts.update(store_counts)
    if code != 0:
        problems.append(f"relaybus-bench exited with {code}")
    if summary.get("processes_failed"):
        problems.append(f"{summary['processes_failed']} processes failed")
    metrics.update(store_metrics)
    metrics["elapsed_s"] = summary["elapsed_s"]
    target.finish()
    return dict(valid=not problems, problems=problems, checks=counts, metrics=metrics, table_stats=stats,
                summary=summary)


def fmt(v, digits=0):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def median_of(runs, key):
    vals = [r["metrics"].get(key) for r in runs if r["valid"] and r["metrics"].get(key) is not None]
    return statistics.median(vals) if vals else None


COLUMNS = [("throughput", "rate", 0), ("latency_p50_ms", "p50 ms", 1), ("latency_p95_ms", "p95 ms", 1),
           ("latency_p99_ms", "p99 ms", 1), ("wal_bytes_per_delivery", "WAL B/dlv", 0),
           ("statements_per_delivery", "stmts/dlv", 2), ("deliveries_updated_per_delivery", "dlv upd/dlv", 2),
           ("hot_share_deliveries", "HOT dlv", 2), ("hot_share_lanes", "HOT lanes", 2),
           ("dead_tuples_deliveries", "dead dlv", 0), ("dead_tuples_lanes", "dead lanes", 0),
           ("backlog_max", "backlog max", 0)]


def summarize(results):
    """Per (scenario, config, version): medians of the valid runs, or INVALID."""
    table = []
    for scenario, config in dict.fromkeys((r["scenario"], r["config"]) for r in results):
        row = dict(scenario=scenario, config=config, versions={})
        for version, _ in VERSIONS:
            runs = [r for r in results if r["scenario"] == scenario and r["config"] == config and r["version"] == version]
            invalid = [r for r in runs if not r["valid"]]
            row["versions"][version] = dict(
                runs=len(runs), invalid=len(invalid),
                medians=None if invalid or not runs else {k: median_of(runs, k) for k, _, _ in COLUMNS})
        a, b = row["versions"]["0.1.0"]["medians"], row["versions"]["0.2.0"]["medians"]
        row["ratio_throughput"] = (b["throughput"] / a["throughput"]) if a and b and a["throughput"] else None
        row["ratio_wal"] = (b["wal_bytes_per_delivery"] / a["wal_bytes_per_delivery"]) if a and b and a["wal_bytes_per_delivery"] else None
        row["ratio_statements"] = (b["statements_per_delivery"] / a["statements_per_delivery"]) if a and b and a["statements_per_delivery"] else None
        table.append(row)
    return table


def markdown(table, results):
    out = []
    for scenario in dict.fromkeys(r["scenario"] for r in table):
        rows = [r for r in table if r["scenario"] == scenario]
        unit = next((x["metrics"]["throughput_unit"] for x in results if x["scenario"] == scenario), "")
        cols = [c for c in COLUMNS if any(
            (r["versions"][v]["medians"] or {}).get(c[0]) is not None for r in rows for v, _ in VERSIONS)]
        out.append(f"### {scenario} (rate = {unit}; medians of the valid runs)\n")
        out.append("| config | version | runs | " + " | ".join(c[1] for c in cols) + " |")
        out.append("| --- | --- | --- | " + " | ".join("---" for _ in cols) + " |")
        for r in rows:
            for v, _ in VERSIONS:
                cell = r["versions"][v]
                if cell["medians"] is None:
                    vals = ["INVALID" if cell["invalid"] else "-"] * len(cols)
                else:
                    vals = [fmt(cell["medians"].get(k), d) for k, _, d in cols]
                out.append(f"| {r['config']} | {v} | {cell['runs']}" + (f" ({cell['invalid']} invalid)" if cell["invalid"] else "")
                           + " | " + " | ".join(vals) + " |")
        out.append("")
        out.append("| config | rate 0.2.0/0.1.0 | WAL/delivery 0.2.0/0.1.0 | statements/delivery 0.2.0/0.1.0 |")
        out.append("| --- | --- | --- | --- |")
        for r in rows:
            f = lambda x: "INVALID" if x is None else f"{x:.2f}x"
            out.append(f"| {r['config']} | {f(r['ratio_throughput'])} | {f(r['ratio_wal'])} | {f(r['ratio_statements'])} |")
        out.append("")
        if scenario == "mixed":
            out.append(sustained_line(results))
            out.append("")
    return "\n".join(out)


SUSTAINED_P99_MS = 250
SUSTAINED_SHARE = 0.99


def sustained(results, version):
    """The highest offered rate at which every run of a mixed configuration of `version` was
    valid, achieved at least 99% of the offered rate and kept p99 under 250 ms."""
    best = None
    configs = dict.fromkeys(r["config"] for r in results if r["scenario"] == "mixed" and r["version"] == version)
    for config in configs:
        runs = [r for r in results if r["scenario"] == "mixed" and r["config"] == config and r["version"] == version]
        if all(r["valid"] and r["metrics"]["throughput"] >= SUSTAINED_SHARE * r["metrics"]["offered"]
               and r["metrics"]["latency_p99_ms"] < SUSTAINED_P99_MS for r in runs):
            rate = runs[0]["metrics"]["offered"]
            best = rate if best is None else max(best, rate)
    return best


def sustained_summary(results):
    parts = []
    for v, _ in VERSIONS:
        rate = sustained(results, v)
        parts.append(f"{v}: " + (f"{rate:,}/s" if rate else "none of the rates run"))
    return "; ".join(parts)


def sustained_line(results):
    return (f"Highest offered rate sustained (every run valid, achieved >= {SUSTAINED_SHARE:.0%} of offered, "
            f"p99 < {SUSTAINED_P99_MS} ms): " + sustained_summary(results) + ".")


def svg_chart(table, scenario, unit):
    """A grouped bar chart of the median rate per configuration: 0.1.0 and 0.2.0 side by side."""
    rows = [r for r in table if r["scenario"] == scenario]
    colors = {"0.1.0": "#8c8c8c", "0.2.0": "#2a6fdb"}
    values = [(r["versions"][v]["medians"] or {}).get("throughput") for r in rows for v, _ in VERSIONS]
    top = max([v for v in values if v] or [1]) * 1.15
    bar, gap, left, height, label_h = 36, 28, 70, 260, 110
    width = left + len(rows) * (2 * bar + gap) + 40
    esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + label_h + 40}" font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="18" font-size="14">{esc(scenario)}: median {esc(unit)} (0.1.0 grey, 0.2.0 blue)</text>']
    base = height + 30
    for i in range(5):
        y = base - height * i / 4
        parts.append(f'<line x1="{left}" x2="{width - 20}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{top * i / 4:,.0f}</text>')
    for i, r in enumerate(rows):
        x0 = left + gap / 2 + i * (2 * bar + gap)
        for j, (v, _) in enumerate(VERSIONS):
            med = r["versions"][v]["medians"]
            x = x0 + j * bar
            if med is None:
                parts.append(f'<text x="{x + bar / 2}" y="{base - 4}" text-anchor="middle" fill="#c00" font-size="9">INVALID</text>')
                continue
            h = height * (med["throughput"] or 0) / top
            parts.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{bar - 4}" height="{h:.1f}" fill="{colors[v]}"/>')
            parts.append(f'<text x="{x + bar / 2 - 2:.1f}" y="{base - h - 3:.1f}" text-anchor="middle" font-size="9">{med["throughput"]:,.0f}</text>')
        ratio = r["ratio_throughput"]
        parts.append(f'<text x="{x0 + bar:.1f}" y="{base + 14}" text-anchor="middle">{"%.2fx" % ratio if ratio else "-"}</text>')
        words, line = r["config"].split(" "), ""
        lines = []
        for w in words:
            if len(line) + len(w) > 16:
                lines.append(line)
                line = w
            else:
                line = (line + " " + w).strip()
        lines.append(line)
        for k, text in enumerate(lines[:5]):
            parts.append(f'<text x="{x0 + bar:.1f}" y="{base + 30 + 12 * k}" text-anchor="middle">{esc(text)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def machine():
    cpus = os.cpu_count()
    osname = "unknown"
    try:
        with open("/etc/os-release") as f:
            osname = next(l.split("=", 1)[1].strip().strip('"') for l in f if l.startswith("PRETTY_NAME="))
    except (OSError, StopIteration):
        pass
    pg = subprocess.run(["pg_config", "--version"], capture_output=True, text=True).stdout.strip()
    return dict(cpus=cpus, os=osname, postgres=pg, kernel=platform.release())


def write_report(outdir, info, results):
    """results.json, one SVG chart per scenario and results.md (with the goals of issue 5
    when the run has the configurations they name); returns the Markdown of the tables."""
    table = summarize(results)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(dict(info=info, summary=table, runs=results), f, indent=1)
    charts = []
    for scenario in dict.fromkeys(r["scenario"] for r in table):
        unit = next(x["metrics"]["throughput_unit"] for x in results if x["scenario"] == scenario)
        name = f"{scenario}.svg"
        with open(os.path.join(outdir, name), "w") as f:
            f.write(svg_chart(table, scenario, unit))
        charts.append(name)
    md = markdown(table, results)
    mach = info["machine"]
    header = (f"# relaybus benchmark ({info['mode']})\n\n"
              f"Command: `{info['command']}` (commit {info['git']}, {info['seconds']} s)\n\n"
              f"Machine: {mach['cpus']} cores, {mach['os']}, {mach['postgres']}, kernel {mach['kernel']}\n\n"
              f"Runs per configuration and system: {info['rounds']}, interleaved run by run (where a table "
              f"compares versions 0.1.0 and 0.2.0: 0.1.0, 0.2.0, 0.1.0, 0.2.0).\n\n")
    goal_md = goals(table, results)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(header + (goal_md + "\n" if goal_md else "") + md + "\n"
                + "\n".join(f"![{c}]({c})" for c in charts) + "\n")
    return md


def goals(table, results):
    """The goals of issue 5 against this run, one row each: what was measured, met or not.
    Ratios are of medians; the per-run limits (WAL, statements, updates, HOT) must hold in
    every valid 0.2.0 run they apply to, so the worst run is quoted."""
    rows = []

    def row_of(scenario, config):
        return next((r for r in table if r["scenario"] == scenario and r["config"] == config), None)

    def runs_of(scenario, prefix=""):
        return [r for r in results if r["scenario"] == scenario and r["version"] == "0.2.0" and r["valid"]
                and r["config"].startswith(prefix)]

    def add(goal, measured, met):
        rows.append(f"| {goal} | {measured} | {'met' if met else '**not met**'} |")

    for procs in (1, 2):
        for name, config, want in (("tuned", f"{procs} proc, tuned ({TUNED_NAME})", 5.0),
                                   ("defaults", f"{procs} proc, defaults (c10 b10 poll 1s)", 1.5)):
            r = row_of("drain", config)
            if r is None:
                continue
            ratio = r["ratio_throughput"]
            add(f"drain {procs} proc, {name}: 0.2.0 at least {want:g}x 0.1.0",
                "INVALID" if ratio is None else f"{ratio:.2f}x", ratio is not None and ratio >= want)
    drains = runs_of("drain")
    dispatch = drains + runs_of("mixed")
    if drains:
        wal = max(r["metrics"]["wal_bytes_per_delivery"] for r in drains)
        add("0.2.0 dispatch (every drain run): WAL at most 200 B per delivery", f"worst run {wal:,.0f} B",
            wal <= 200)
        tuned = [r for r in drains if "tuned" in r["config"]]
        if tuned:
            st = max(r["metrics"]["statements_per_delivery"] for r in tuned)
            add("0.2.0 tuned drains (every run): at most 0.02 statements per delivery", f"worst run {st:.3f}",
                st <= 0.02)
    if dispatch:
        upd = max(r["metrics"]["deliveries_updated_per_delivery"] for r in dispatch)
        add("0.2.0 dispatch (every drain and mixed run): 0 delivery updates", f"worst run {upd:.2f} per delivery",
            upd == 0)
        hot = [r["metrics"]["hot_share_lanes"] for r in dispatch if r["metrics"].get("hot_share_lanes") is not None]
        if hot:
            add("0.2.0 dispatch (every drain and mixed run): lane updates at least 99% HOT",
                f"worst run {min(hot):.2%}", min(hot) >= 0.99)
    for config in ("P=1 batch=1", "P=1 batch=100"):
        r = row_of("publish", config)
        if r is not None:
            ratio = r["ratio_throughput"]
            add(f"publish {config}: 0.2.0 at least as fast as 0.1.0",
                "INVALID" if ratio is None else f"{ratio:.2f}x", ratio is not None and ratio >= 1.0)
    mixed = [r for r in results if r["scenario"] == "mixed" and r["version"] == "0.2.0"
             and r["params"].get("rate") == 1000 and r["params"].get("concurrency") == 10]
    if mixed:
        ok = all(r["valid"] for r in mixed)
        p99 = max(r["metrics"]["latency_p99_ms"] for r in mixed) if ok else None
        share = min(r["metrics"]["throughput"] / r["metrics"]["offered"] for r in mixed) if ok else None
        add("mixed 1,000/s offered, default dispatchers (every run): achieved = offered, p99 at most 100 ms",
            "INVALID" if not ok else f"achieved {share:.1%} of offered, worst p99 {p99:,.1f} ms",
            ok and share >= SUSTAINED_SHARE and p99 <= 100)
    if any(r["scenario"] == "mixed" for r in results):
        rows.append(f"| highest offered rate sustained: every run valid, achieved at least "
                    f"{SUSTAINED_SHARE:.0%} of offered, p99 under {SUSTAINED_P99_MS} ms (report) | "
                    f"{sustained_summary(results)} | - |")
    if not rows:
        return ""
    return "\n".join(["## Against the goals of issue 5\n", "| goal | measured | |", "| --- | --- | --- |"] + rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick")
    mode.add_argument("--full", action="store_const", dest="mode", const="full")
    mode.add_argument("--validity", action="store_const", dest="mode", const="validity")
    ap.add_argument("--port", type=int, default=int(os.environ.get("RELAYBUS_BENCH_PORT", "54360")))
    ap.add_argument("--rounds", type=int, default=None, help="A B rounds per configuration (default 2, validity 1)")
    ap.add_argument("--only", default=None,
                    help="run only this scenario (drain, publish, mixed; held, steady: the held-snapshot "
                         "scenarios of bench/held_bench.py)")
    ap.add_argument("--out", default=None, help="results directory (default bench/results/<timestamp>)")
    ap.add_argument("--no-peers", action="store_true",
                    help="leave out the peers (PgQ, graphile-worker, pg-boss, the floor): bench/peers_bench.py")
    ap.add_argument("--peers-only", default=None, metavar="RUNNERS",
                    help="only the peer systems whose runner is listed (comma-separated names in bench/peers "
                         "without .py: floor,pgq), without relaybus's own runs, their "
                         "databases or the held-snapshot scenarios: for a cluster whose library the "
                         "extension's SQL does not name (dynamic_library_path in RELAYBUS_CLUSTER_SETTINGS)")
    ap.add_argument("--held-systems", default=None, metavar="NAMES",
                    help="the held-snapshot scenarios only for these systems (';'-separated names as the "
                         "report prints them, e.g. 'relaybus loop, VERSION 0.3.0;PgQ (tuned ticker)')")
    ap.add_argument("--mongo", default=None, metavar="URI",
                    help="run on the MongoDB store at URI instead (a replica set and a database of "
                         "its own, which every run drops: see bench/mongo_bench.py)")
    ap.add_argument("--report", default=None, metavar="DIR",
                    help="only re-render DIR/results.md and the charts from DIR/results.json")
    if "--report" in sys.argv:  # no mode needed to re-render
        args = argparse.Namespace(report=sys.argv[sys.argv.index("--report") + 1])
        data = json.load(open(os.path.join(args.report, "results.json")))
        print(write_report(args.report, data["info"], data["runs"]))
        held = os.path.join(args.report, "held.json")
        if os.path.exists(held):  # the held-snapshot scenarios' section, appended as a run appends it
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import held_bench
            data = json.load(open(held))
            md = held_bench.report(args.report, data["info"], data["runs"])
            with open(os.path.join(args.report, "results.md"), "a") as f:
                f.write("\n" + md + "\n")
            print(md)
        return 0
    args = ap.parse_args()
    keep = set(args.peers_only.split(",")) if args.peers_only else None
    if keep and args.no_peers:
        ap.error("--peers-only and --no-peers leave nothing to run")
    rounds = args.rounds or (1 if args.mode == "validity" else 2)

    # (The peers' runners use neither.)
    if not keep and not (os.access(CLI, os.X_OK) and os.access(BENCH, os.X_OK)):
        subprocess.run(["make", "-s", "-C", ROOT, "client"], check=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = args.out or os.path.join(ROOT, "bench", "results", stamp)
    os.makedirs(os.path.join(outdir, "runs"), exist_ok=True)
    command = "bench/run " + " ".join(sys.argv[1:])

    # The commit measured: taken now, so a commit made while the run goes on is not claimed.
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        git += " (with uncommitted changes)"
    if args.mongo:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import mongo_bench
        return mongo_bench.main(sys.modules[__name__], args, outdir, command, git)
    cluster = Cluster(args.port)
    cluster.start()
    results = []
    started = time.time()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import peers_bench
    import held_bench
    me = sys.modules[__name__]
    peer_results, held_results = [], []
    try:
        if not keep:
            prepare(cluster)
        if not args.no_peers:
            peers_bench.prepare(me, cluster, args.mode, keep=keep)
        todo = [pl for pl in plans(args.mode) if (not args.only or pl[0] == args.only) and not keep]
        for n, (scenario, config, params) in enumerate(todo, 1):
            print(f"[{n}/{len(todo)}] {scenario}: {config}", file=sys.stderr)
            for rnd in range(rounds):
                for version, db in VERSIONS:  # interleaved: A B A B
                    tag = f"{scenario}-{n}-r{rnd}-{version}"
                    r = run_one(PgTarget(cluster, db), scenario, params, outdir, tag)
                    r.update(scenario=scenario, config=config, params=params, version=version, round=rnd)
                    results.append(r)
                    m = r["metrics"]
                    state = "valid" if r["valid"] else "INVALID: " + ", ".join(r["problems"])
                    shown = "INVALID" if not r["valid"] else f"{m['throughput']:,.0f} {m['throughput_unit']}"
                    print(f"    {version} round {rnd + 1}: {shown} ({state})", file=sys.stderr)
        if not args.no_peers:
            peer_results = peers_bench.run(me, cluster, args.mode, rounds, outdir, args.only, keep=keep)
            # Through the peers' runners too (the relaybus loop among them): one pass, the
            # systems interleaved round by round inside it.
            if not keep:
                held_results = held_bench.run(me, peers_bench, cluster, args.mode, outdir, args.only,
                                              args.held_systems.split(";") if args.held_systems else None)
    finally:
        cluster.stop()

    info = dict(command=command, mode=args.mode, rounds=rounds, machine=machine(), started=stamp,
                seconds=round(time.time() - started, 1), git=git)
    md = write_report(outdir, info, results)
    if peer_results:
        peer_table = peers_bench.summarize(me, peer_results)
        peer_md = peers_bench.markdown(me, peer_table)
        peer_md += "\n" + "\n".join(f"![{c}]({c})" for c in peers_bench.write_charts(peer_table, outdir)) + "\n"
        with open(os.path.join(outdir, "results.md"), "a") as f:
            f.write("\n" + peer_md + "\n")
        with open(os.path.join(outdir, "peers.json"), "w") as f:
            json.dump(dict(info=info, runs=peer_results), f, indent=1)
        md += "\n" + peer_md
    if held_results:
        held_md = held_bench.report(outdir, info, held_results)
        with open(os.path.join(outdir, "results.md"), "a") as f:
            f.write("\n" + held_md + "\n")
        md += "\n" + held_md
    print(md)
    print(f"results: {outdir}", file=sys.stderr)
    results = results + peer_results + held_results
    invalid = [r for r in results if not r["valid"]]
    if invalid:
        print(f"{len(invalid)} INVALID run(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
