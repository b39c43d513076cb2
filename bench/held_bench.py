"""Two scenarios under a held snapshot (issue 33), for relaybus and its peers, through the
peers' runners (bench/peers/README.md, "Under a held snapshot", says what is measured and
how), every run validated as harness.run_one validates one.

- held: rounds of publish + drain into a queue that is never emptied between rounds, with
  an idle REPEATABLE READ transaction (variant "snapshot + xid": one that also holds an
  xid) opened in the system's own database before round 1 and held through all rounds.
  Systems interleaved round by round. Per round: drain rate, dead tuples and total
  relation size of the system's tables, WAL.
- steady: a fixed offered rate (the runners' `mixed`) with a REPEATABLE READ snapshot held
  through the middle half of the run; throughput, end-to-end p50/p99 and backlog per time
  bucket, from the run's own record files.

Why the system's own database: vacuum's horizon for a database's own tables
(ComputeXidHorizons, procarray.c, PostgreSQL 14 and later) takes the xmin of the sessions
connected to that database only; sessions of other databases hold back the shared
catalogs' horizon alone. (An xid held elsewhere still reaches a database indirectly: every
snapshot taken there has an xmin at or before it, so its own running transactions hold
back its horizon while they run.)
"""
import json
import os
import sys
import threading
import time

import psycopg

HARNESS = "/*relaybus-bench-harness*/"

HELD_SYSTEMS = ["relaybus 0.2.0 loop", "relaybus loop, VERSION 0.2.0", "relaybus loop, VERSION 0.3.0", "floor",
                "PgQ (tuned ticker)", "graphile-worker (tuned)", "pg-boss (tuned)"]
# The mixed scenario's PgQ: pgqd's defaults (peers_bench.plans says why not the tuned ticker).
# "relaybus 0.3.0" is the default C++ runtime (relaybus-bench: one dispatcher, concurrency
# 10, batch 100, NOTIFY wake-ups, 1 s poll), whose p99 is issue 33's goal; the loops sleep
# 10 ms when a claim comes back empty, which their p99 shows.
STEADY_SYSTEMS = ["relaybus 0.2.0 loop", "relaybus loop, VERSION 0.2.0", "relaybus loop, VERSION 0.3.0",
                  "relaybus 0.3.0", "floor", "PgQ (pgqd defaults)", "graphile-worker (tuned)", "pg-boss (tuned)"]
# The default runtime's settings (DispatcherConfig), for the systems that run relaybus-bench.
RUNTIME_DEFAULTS = dict(dispatchers=1, concurrency=10, batch=100, poll_ms=1000)

# variant: what the held transaction runs after BEGIN ISOLATION LEVEL REPEATABLE READ. Its
# first statement takes the transaction's snapshot (pg_stat_activity.backend_xmin, checked).
VARIANTS = {
    "snapshot": f"SELECT {HARNESS} 1",
    "snapshot + xid": f"SELECT {HARNESS} txid_current()",
    # The control: the same rounds with nothing held, to tell what the hold costs from what
    # the rounds' growing tables cost.
    "nothing": None,
}

COLORS = {"relaybus 0.2.0 loop": "#2a6fdb", "relaybus loop, VERSION 0.2.0": "#8fb3ee",
          "relaybus loop, VERSION 0.3.0": "#0b3d91", "relaybus 0.3.0": "#17becf",
          "floor": "#b0b0b0", "PgQ (tuned ticker)": "#d95f02",
          "PgQ (pgqd defaults)": "#d95f02", "graphile-worker (tuned)": "#7570b3", "pg-boss (tuned)": "#e7298a"}


def plans(mode):
    """(scenario, config, params, systems) of a mode."""
    if mode == "validity":
        return [("held", "validity: 2 rounds of 300, snapshot + xid held",
                 dict(rounds=2, events=300, batch=50, variant="snapshot + xid"),
                 # The test suite's run: one relaybus and one peer exercise every code path;
                 # the suite has to stay under 20 minutes.
                 ["relaybus 0.2.0 loop", "PgQ (tuned ticker)"]),
                ("steady", "validity: 200/s for 6 s, snapshot held from 1.5 s to 4.5 s",
                 dict(rate=200, duration_s=6, hold_from_s=1.5, hold_s=3, bucket_s=1, **RUNTIME_DEFAULTS),
                 ["relaybus 0.2.0 loop"])]
    rounds, n = (5, 5000) if mode == "quick" else (15, 20000)
    dur = 90 if mode == "quick" else 600
    out = [("held", f"{rounds} rounds of {n:,}, {v} held", dict(rounds=rounds, events=n, batch=500, variant=v),
            HELD_SYSTEMS) for v in VARIANTS]
    out.append(("steady", f"2000/s for {dur} s, snapshot held from {dur // 4} s to {dur * 3 // 4} s",
                dict(rate=2000, duration_s=dur, hold_from_s=dur / 4, hold_s=dur / 2, bucket_s=10,
                     **RUNTIME_DEFAULTS), STEADY_SYSTEMS))
    return out


def all_systems(mode):
    return sorted({s for _, _, _, ss in plans(mode) for s in ss})


def now_us():
    return time.time_ns() // 1000


# ------------------------------------------------------------------ the held transaction

class Holder:
    """An idle REPEATABLE READ transaction in `conninfo`'s database that has taken its
    snapshot (and, with the xid variant, an xid). It reads no table: a lock would hold back
    a runner's TRUNCATE."""

    def __init__(self, conninfo, variant):
        self.conninfo, self.variant = conninfo, variant
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.pid = self.conn.info.backend_pid
        self.begin_us, self.end_us = now_us(), None
        if VARIANTS[variant] is None:
            self.first = {}
            return
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute(VARIANTS[variant])
        self.begin_us = now_us()
        self.end_us = None
        self.first = self.state()
        if not self.first.get("backend_xmin"):
            raise RuntimeError(f"the held transaction (pid {self.pid}) has no snapshot: {self.first}")
        if variant == "snapshot + xid" and not self.first.get("backend_xid"):
            raise RuntimeError(f"the held transaction (pid {self.pid}) has no xid: {self.first}")

    def state(self):
        """What pg_stat_activity says of the held transaction, seen from another session."""
        with psycopg.connect(self.conninfo, autocommit=True) as c:
            row = c.execute(f"SELECT {HARNESS} backend_xmin::text, backend_xid::text, state, datname"
                            " FROM pg_stat_activity WHERE pid = %s", (self.pid,)).fetchone()
        return dict(zip(("backend_xmin", "backend_xid", "state", "datname"), row or (None,) * 4))

    def still_held(self):
        """True if the transaction still holds the snapshot it took (the same xmin)."""
        if VARIANTS[self.variant] is None:
            return True
        s = self.state()
        return s.get("backend_xmin") == self.first["backend_xmin"] and s.get("state") == "idle in transaction"

    def release(self):
        try:
            if VARIANTS[self.variant] is not None:
                self.conn.execute("ROLLBACK")
        finally:
            self.end_us = now_us()
            self.conn.close()


# ------------------------------------------------------------------ what the store holds

def table_stats(cluster, db):
    """Per table of the system's database (every user table there is the system's): dead and
    live tuples, total size (heap, indexes, TOAST), vacuums. Sums in "total"."""
    time.sleep(0.6)  # the exiting processes' statistics land in shared memory
    rows = cluster.sql(db, f"""SELECT {HARNESS} format('%I.%I', schemaname, relname), n_dead_tup, n_live_tup,
                                      pg_total_relation_size(relid), autovacuum_count + vacuum_count
                                 FROM pg_stat_user_tables ORDER BY 1""")
    tables = {r[0]: dict(dead=int(r[1]), live=int(r[2]), bytes=int(r[3]), vacuums=int(r[4])) for r in rows}
    total = dict(dead=sum(t["dead"] for t in tables.values()), live=sum(t["live"] for t in tables.values()),
                 bytes=sum(t["bytes"] for t in tables.values()), vacuums=sum(t["vacuums"] for t in tables.values()))
    return dict(total=total, tables=tables)


def wal_lsn(cluster, db):
    return cluster.value(db, f"SELECT {HARNESS} pg_current_wal_insert_lsn()")


def wal_since(cluster, db, lsn):
    return int(cluster.value(db, f"SELECT {HARNESS} pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '{lsn}')::bigint"))


def extension_version(cluster, db):
    return cluster.value(db, f"SELECT {HARNESS} extversion FROM pg_extension WHERE extname = 'relaybus'")


def label(system, versions, cluster=None, db=None):
    """The name shown: a relaybus loop says which version its database runs (asked once the
    runner's reset has created the extension, when `cluster` and `db` are given)."""
    if versions.get(system) is None and cluster is not None and "loop" in system:
        versions[system] = extension_version(cluster, db)
    v = versions.get(system)
    if v and "loop" in system:
        return f"relaybus {v} loop" + (" (default version)" if system == "relaybus 0.2.0 loop" else "")
    return system


# ------------------------------------------------------------------ held: rounds

def held_round(h, cluster, target, p, outdir, tag, first):
    """One round on a queue left as the previous round left it: publish events
    e-<first> .. (the runner's preload: chunks of 1,000, every other event keyed, no VACUUM
    or ANALYZE of its own), then drain them with one consumer at --batch. Validated as
    harness.run_one validates a drain."""
    n = p["events"]
    prefix = os.path.join(outdir, "runs", tag)
    log = prefix + ".log"
    problems = []
    lsn = wal_lsn(cluster, target.name)
    t = time.monotonic()
    code = target.call(["preload", "--conn", target.db, "--events", str(n), "--first", str(first), "--no-vacuum"], log)
    publish_s = time.monotonic() - t
    if code != 0:
        problems.append(f"preload exited with {code}")
    publish_wal = wal_since(cluster, target.name, lsn)
    code = target.run("drain", dict(consumers=1, batch=p["batch"]), prefix, log)
    summary = json.load(open(prefix + ".summary.json"))
    handled = h.read_tsv(prefix + ".dispatcher-*.tsv")
    expected = {f"e-{i}" for i in range(first, first + n)}
    probs, counts = h.check_handled(expected, handled, target.ordered_keys)
    problems += probs
    if summary["deliveries"] != n:  # what was there to consume when the drain began
        problems.append(f"{summary['deliveries']} to consume after publishing {n}")
    if not summary["drained"]:
        problems.append("not drained within the time limit")
    probs, left = h.check_leftovers(*target.leftovers())
    problems += probs
    counts.update(left)
    if code != 0:
        problems.append(f"runner exited with {code}")
    if summary.get("processes_failed"):
        problems.append(f"{summary['processes_failed']} processes failed")
    stats = table_stats(cluster, target.name)
    metrics = dict(throughput=n / h.drain_seconds(summary, handled), throughput_unit="deliveries/s",
                   publish_s=publish_s, publish_wal_bytes=publish_wal, drain_wal_bytes=summary["wal_bytes"],
                   round_wal_bytes=wal_since(cluster, target.name, lsn),
                   dead_tuples=stats["total"]["dead"], live_tuples=stats["total"]["live"],
                   relation_bytes=stats["total"]["bytes"], vacuums=stats["total"]["vacuums"])
    return dict(valid=not problems, problems=problems, checks=counts, metrics=metrics, table_stats=stats["tables"],
                summary=summary)


def run_held(h, peers, cluster, config, p, systems, outdir, n_plan, versions):
    """Every system reset, its held transaction opened, then the rounds, interleaved."""
    results = []
    targets = {s: peers.target_of(h, cluster, s) for s in systems}
    holders = {}
    try:
        for s in systems:
            targets[s].reset(0, None, os.path.join(outdir, "runs", f"held-{n_plan}-reset-{slug(s)}.log"))
            label(s, versions, cluster, targets[s].name)
            holders[s] = Holder(targets[s].db, p["variant"])
            print(f"    {label(s, versions)}: held transaction pid {holders[s].pid}, {holders[s].first}",
                  file=sys.stderr)
        for rnd in range(p["rounds"]):
            for s in systems:
                tag = f"held-{n_plan}-r{rnd}-{slug(s)}"
                r = held_round(h, cluster, targets[s], p, outdir, tag, rnd * p["events"] + 1)
                if not holders[s].still_held():
                    r["problems"].append(f"the held transaction lost its snapshot: {holders[s].state()}")
                    r["valid"] = False
                r.update(scenario="held", config=config, params=p, version=s, label=label(s, versions), round=rnd,
                         group="held", holder=holders[s].first, info=getattr(targets[s], "info", None))
                results.append(r)
                m = r["metrics"]
                state = "valid" if r["valid"] else "INVALID: " + ", ".join(r["problems"])
                shown = "INVALID" if not r["valid"] else f"{m['throughput']:,.0f} deliveries/s"
                print(f"    {label(s, versions)} round {rnd + 1}: {shown}, {m['dead_tuples']:,} dead tuples, "
                      f"{m['relation_bytes'] / 1e6:,.1f} MB ({state})", file=sys.stderr)
    finally:
        for holder in holders.values():
            holder.release()
        for s in systems:  # leave nothing behind for the next scenario's autovacuum to chew on
            try:
                targets[s].reset(0, None, os.path.join(outdir, "runs", f"held-{n_plan}-reset-{slug(s)}.log"))
            except Exception as e:  # noqa: BLE001 - the next scenario resets again anyway
                print(f"    {s}: reset after the held rounds failed: {e}", file=sys.stderr)
    return results


def slug(system):
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in system)


# ------------------------------------------------------------------ steady: a held middle

class HeldMiddle:
    """A target whose `run` holds a REPEATABLE READ snapshot in the system's database from
    hold_from_s after the runner starts, for hold_s, and samples the system's dead tuples
    and size every second; everything else is the target's."""

    def __init__(self, target, cluster, p):
        self.target, self.cluster, self.p = target, cluster, p
        self.hold = dict(begin_us=None, end_us=None, first=None, held_to_the_end=None)
        self.samples = []

    def __getattr__(self, name):
        return getattr(self.target, name)

    def _sample(self, stop):
        while not stop.wait(1.0):
            try:
                row = self.cluster.sql(self.target.name, f"""SELECT {HARNESS} coalesce(sum(n_dead_tup), 0),
                                         coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_stat_user_tables""")[0]
                self.samples.append((now_us(), int(row[0]), int(row[1])))
            except Exception:  # noqa: BLE001 - a missed sample is only a missed sample
                pass

    def _hold(self, stop):
        if stop.wait(self.p["hold_from_s"]):
            return
        holder = Holder(self.target.db, "snapshot")
        self.hold.update(begin_us=holder.begin_us, first=holder.first)
        try:
            stop.wait(self.p["hold_s"])
            self.hold["held_to_the_end"] = holder.still_held()
        finally:
            holder.release()
            self.hold["end_us"] = holder.end_us

    def run(self, scenario, p, prefix, log):
        stop = threading.Event()
        threads = [threading.Thread(target=f, args=(stop,), daemon=True) for f in (self._hold, self._sample)]
        for t in threads:
            t.start()
        try:
            return self.target.run(scenario, p, prefix, log)
        finally:
            stop.set()
            for t in threads:
                t.join()


def buckets_of(h, prefix, hold, bucket_s):
    """Per bucket of bucket_s from the first commit: events published, delivered (by their
    handled time), end-to-end latency p50/p99 of the events committed in it, and the
    backlog (committed, not yet handled) at its worst second; and the same per phase:
    before, during and after the hold (by commit time)."""
    rows = h.read_tsv(prefix + ".publisher-*.tsv")
    commit = {r[1]: int(r[4]) for r in rows if r[0] == "E"}
    handled = {}
    for r in h.read_tsv(prefix + ".dispatcher-*.tsv"):
        if r[0] in commit:
            handled[r[0]] = min(int(r[4]), handled.get(r[0], int(r[4])))
    if not commit:
        return [], {}
    t0 = min(commit.values())
    width = int(bucket_s * 1e6)
    last = max(list(commit.values()) + list(handled.values()))
    nb = (last - t0) // width + 1
    lat = [[] for _ in range(nb)]
    published, delivered = [0] * nb, [0] * nb
    for e, c in commit.items():
        b = (c - t0) // width
        published[b] += 1
        if e in handled:
            lat[b].append(max(0, handled[e] - c) / 1000.0)
            delivered[(handled[e] - t0) // width] += 1
    # backlog, second by second: committed so far minus handled so far
    secs = (last - t0) // 1_000_000 + 1
    cdelta, hdelta = [0] * (secs + 1), [0] * (secs + 1)
    for c in commit.values():
        cdelta[(c - t0) // 1_000_000] += 1
    for t in handled.values():
        hdelta[(t - t0) // 1_000_000] += 1
    backlog, acc = [], 0
    for i in range(secs):
        acc += cdelta[i] - hdelta[i]
        backlog.append(acc)
    per = max(1, int(bucket_s))
    out = []
    for b in range(nb):
        out.append(dict(t_s=b * bucket_s, published=published[b], delivered_per_s=delivered[b] / bucket_s,
                        p50_ms=h.percentile(lat[b], 50), p99_ms=h.percentile(lat[b], 99),
                        backlog_max=max(backlog[b * per:(b + 1) * per] or [0])))
    phases = {}
    hb, he = hold.get("begin_us"), hold.get("end_us")
    if hb and he:
        bounds = dict(before=(t0, hb), during=(hb, he), after=(he, max(commit.values()) + 1))
        for name, (a, z) in bounds.items():
            mine = [e for e, c in commit.items() if a <= c < z]
            lats = [max(0, handled[e] - commit[e]) / 1000.0 for e in mine if e in handled]
            s0, s1 = max(0, (a - t0) // 1_000_000), max(0, (z - t0) // 1_000_000)
            phases[name] = dict(events=len(mine), p50_ms=h.percentile(lats, 50), p99_ms=h.percentile(lats, 99),
                                max_ms=max(lats) if lats else None,
                                delivered_per_s=sum(1 for t in handled.values() if a <= t < z) / max(1e-6, (z - a) / 1e6),
                                backlog_max=max(backlog[s0:s1 + 1] or [0]))
    return out, phases


def run_steady(h, peers, cluster, config, p, systems, outdir, n_plan, versions):
    results = []
    for s in systems:
        tag = f"steady-{n_plan}-{slug(s)}"
        target = HeldMiddle(peers.target_of(h, cluster, s), cluster, p)
        r = h.run_one(target, "mixed", p, outdir, tag)
        label(s, versions, cluster, target.name)
        hold = target.hold
        if not hold.get("begin_us") or not hold.get("end_us"):
            r["problems"].append("the snapshot was not held (the run ended before the hold began)")
            r["valid"] = False
        elif not hold.get("held_to_the_end"):
            r["problems"].append("the held transaction lost its snapshot")
            r["valid"] = False
        buckets, phases = buckets_of(h, os.path.join(outdir, "runs", tag), hold, p["bucket_s"])
        t0 = None
        rows = h.read_tsv(os.path.join(outdir, "runs", tag) + ".publisher-*.tsv")
        if rows:
            t0 = min(int(x[4]) for x in rows if x[0] == "E")
        rel = lambda us: None if us is None or t0 is None else (us - t0) / 1e6  # noqa: E731
        samples = [dict(t_s=rel(t), dead=d, bytes=b) for t, d, b in target.samples]
        r.update(scenario="steady", config=config, params=p, version=s, label=label(s, versions), round=0,
                 group="steady", hold=dict(hold, begin_s=rel(hold.get("begin_us")), end_s=rel(hold.get("end_us"))),
                 buckets=buckets, phases=phases, samples=samples,
                 dead_tuples_max=max([x["dead"] for x in samples] or [0]),
                 info=getattr(target.target, "info", None))
        results.append(r)
        m = r["metrics"]
        state = "valid" if r["valid"] else "INVALID: " + ", ".join(r["problems"])
        ph = " ".join(f"{k} p99 {h.fmt(v['p99_ms'], 1)} ms" for k, v in phases.items())
        print(f"    {label(s, versions)} round 1: {m['throughput']:,.0f} events/s achieved, {ph}, "
              f"backlog max {m.get('backlog_max')} ({state})", file=sys.stderr)
    return results


# ------------------------------------------------------------------ the run

def prepare(h, peers, cluster, mode):
    """The databases of the held scenarios' systems that the peers' plans did not create."""
    peers.prepare(h, cluster, mode, all_systems(mode))


def run(h, peers, cluster, mode, outdir, only=None, systems_only=None):
    """systems_only: the systems to run (names as in HELD_SYSTEMS), or None for all."""
    todo = [pl for pl in plans(mode) if not only or pl[0] == only]
    if systems_only:
        unknown = set(systems_only) - set(all_systems(mode))
        if unknown:
            raise SystemExit(f"held_bench: no such system in the held-snapshot scenarios: {sorted(unknown)}")
        todo = [(sc, config, p, [s for s in systems if s in systems_only]) for sc, config, p, systems in todo]
    if not todo:
        return []
    prepare(h, peers, cluster, mode)
    versions = {}  # system: its relaybus version, for the labels (label())
    results = []
    for n, (scenario, config, p, systems) in enumerate(todo, 1):
        print(f"[held {n}/{len(todo)}] {scenario}: {config}", file=sys.stderr)
        for s in [s for s in systems if not peers.built(s)]:
            print(f"    left out: {s} (no runner {peers.SYSTEMS[s][1]} in bench/peers)", file=sys.stderr)
        systems = [s for s in systems if peers.built(s)]
        fn = run_held if scenario == "held" else run_steady
        results += fn(h, peers, cluster, config, p, systems, outdir, n, versions)
    return results


# ------------------------------------------------------------------ the report

def fmt(v, digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def held_table(runs):
    """Per config: per system, the rate per round (None: INVALID), last / first, the mean of
    the last three rounds over that of the first three (one round's rate varies by a tenth or
    more from the next on this machine), dead tuples per delivered event after the last round,
    and the last round's figures."""
    out = []
    for config in dict.fromkeys(r["config"] for r in runs if r["scenario"] == "held"):
        mine = [r for r in runs if r["scenario"] == "held" and r["config"] == config]
        systems = list(dict.fromkeys(r["version"] for r in mine))
        rows = []
        for s in systems:
            rs = sorted((r for r in mine if r["version"] == s), key=lambda r: r["round"])
            rates = [r["metrics"]["throughput"] if r["valid"] else None for r in rs]
            last = rs[-1]
            delivered = sum(r["params"]["events"] for r in rs)
            top = sorted(last["table_stats"].items(), key=lambda kv: -kv[1]["dead"])
            rows.append(dict(
                system=s, label=rs[0].get("label", s), rates=rates, valid=all(r["valid"] for r in rs),
                ratio=(rates[-1] / rates[0]) if rates and rates[0] and rates[-1] else None,
                ratio3=(sum(rates[-3:]) / sum(rates[:3]))
                if len(rates) >= 6 and all(v is not None for v in rates) else None,
                dead_per_event=last["metrics"]["dead_tuples"] / max(1, delivered),
                dead=last["metrics"]["dead_tuples"], mb=last["metrics"]["relation_bytes"] / 1e6,
                mb_first=rs[0]["metrics"]["relation_bytes"] / 1e6,
                wal_per_event=last["metrics"]["round_wal_bytes"] / max(1, last["params"]["events"]),
                wal_per_event_first=rs[0]["metrics"]["round_wal_bytes"] / max(1, rs[0]["params"]["events"]),
                dead_tables=[(t, v["dead"]) for t, v in top if v["dead"]][:4]))
        out.append(dict(config=config, rounds=max(len(r["rates"]) for r in rows) if rows else 0, rows=rows))
    return out


def markdown(runs):
    out = ["## Under a held snapshot\n",
           "bench/held_bench.py; bench/peers/README.md, \"Under a held snapshot\", says what is measured and how. "
           "Every round and run validated: every event handled once, per-key order where the system promises it, "
           "nothing pending or dead at the end.\n"]
    for t in held_table(runs):
        out.append(f"### held: {t['config']} (drain rate, deliveries/s, by round)\n")
        out.append("| system | " + " | ".join(f"r{i + 1}" for i in range(t["rounds"]))
                   + " | last / first | last 3 / first 3 | dead tuples per delivered event | dead tuples | MB first / last round "
                     "| WAL B/event first / last round | tables with the most dead tuples |")
        out.append("| --- | " + " | ".join("---" for _ in range(t["rounds"])) + " | --- | --- | --- | --- | --- | --- | --- |")
        for r in t["rows"]:
            rates = ["INVALID" if v is None else fmt(v) for v in r["rates"]]
            tables = ", ".join(f"{name} {dead:,}" for name, dead in r["dead_tables"]) or "-"
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
            ratio3 = "-" if r["ratio3"] is None else f"{r['ratio3']:.2f}x"
            out.append(f"| {r['label']} | " + " | ".join(rates) + f" | {ratio} | {ratio3}"
                       + f" | {r['dead_per_event']:.4f} | {r['dead']:,} | {r['mb_first']:,.1f} / {r['mb']:,.1f}"
                       + f" | {r['wal_per_event_first']:,.0f} / {r['wal_per_event']:,.0f} | {tables} |")
        out.append("")
    steady = [r for r in runs if r["scenario"] == "steady"]
    for config in dict.fromkeys(r["config"] for r in steady):
        mine = [r for r in steady if r["config"] == config]
        out.append(f"### steady: {config}\n")
        out.append("End-to-end latency = publisher's commit to the handler's record, per phase by commit time "
                   "(the hold as it actually began and ended); delivered/s per phase; backlog = committed, not "
                   "yet handled, worst second.\n")
        out.append("| system | achieved /s | p50 / p99 ms before | p50 / p99 ms during | p50 / p99 ms after "
                   "| delivered/s before / during / after | backlog max before / during / after "
                   "| dead tuples max | valid |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in mine:
            ph = r.get("phases") or {}
            cell = lambda k: (f"{fmt(ph[k]['p50_ms'], 1)} / {fmt(ph[k]['p99_ms'], 1)}" if k in ph else "-")  # noqa: E731
            rate = " / ".join(fmt(ph[k]["delivered_per_s"]) if k in ph else "-" for k in ("before", "during", "after"))
            back = " / ".join(fmt(ph[k]["backlog_max"]) if k in ph else "-" for k in ("before", "during", "after"))
            out.append(f"| {r.get('label', r['version'])} | {fmt(r['metrics'].get('throughput'))} | {cell('before')} | "
                       f"{cell('during')} | {cell('after')} | {rate} | {back} | {r.get('dead_tuples_max', 0):,} | "
                       f"{'valid' if r['valid'] else 'INVALID: ' + ', '.join(r['problems'])} |")
        out.append("")
        short = [r for r in mine if r["metrics"].get("throughput") and r["metrics"].get("offered")
                 and r["metrics"]["throughput"] < 0.95 * r["metrics"]["offered"]]
        for r in short:
            out.append(f"**{r.get('label', r['version'])} did not reach the offered rate**: "
                       f"{r['metrics']['throughput']:,.0f} of {r['metrics']['offered']:,}/s published "
                       f"(backlog max {fmt(r['metrics'].get('backlog_max'))}: its publishers, one event per "
                       "transaction through its own client, fell behind), so its figures are at that lower rate "
                       "and not comparable with the others'.\n")
        bucket = mine[0]["params"]["bucket_s"]
        out.append(f"p99 ms per {bucket:g} s bucket (by commit time; * = the hold began or ended in the bucket "
                   "for at least one system)\n")
        out.append("| t s | " + " | ".join(r.get("label", r["version"]) for r in mine) + " |")
        out.append("| --- | " + " | ".join("---" for _ in mine) + " |")
        nb = max(len(r.get("buckets") or []) for r in mine)
        for b in range(nb):
            t = b * bucket
            mark = any(r["hold"].get("begin_s") is not None and t <= x < t + bucket
                       for r in mine for x in (r["hold"]["begin_s"], r["hold"]["end_s"]) if x is not None)
            cells = []
            for r in mine:
                bs = r.get("buckets") or []
                cells.append(fmt(bs[b]["p99_ms"], 1) + f" ({fmt(bs[b]['delivered_per_s'])}/s)" if b < len(bs) else "-")
            out.append(f"| {t:g}{'*' if mark else ''} | " + " | ".join(cells) + " |")
        out.append("")
        out.append("Cells: p99 ms (delivered/s in the bucket).\n")
    return "\n".join(out)


def esc(t):
    return t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def line_chart(title, series, xlabel, ylabel, log=False, shade=None, xs_labels=None):
    """series: [(name, color, dashed, [(x, y or None)])]; shade: (x0, x1) drawn light grey."""
    import math
    left, top_m, width, height, legend_w = 80, 40, 560, 280, 260
    pts = [(x, y) for _, _, _, ps in series for x, y in ps if y is not None]
    if not pts:
        pts = [(0, 1)]
    xmax = max(x for x, _ in pts) or 1
    xmin = min(x for x, _ in pts)
    ymax = max(y for _, y in pts) * 1.1 or 1
    if log:
        ymin = max(min(y for _, y in pts if y > 0) if any(y > 0 for _, y in pts) else 0.1, 0.1) / 1.5
        lo, hi = math.log10(ymin), math.log10(max(ymax, ymin * 10))
        fy = lambda y: top_m + height - height * (math.log10(max(y, ymin)) - lo) / (hi - lo)  # noqa: E731
    else:
        fy = lambda y: top_m + height - height * y / ymax  # noqa: E731
    fx = lambda x: left + width * (x - xmin) / max(1e-9, xmax - xmin)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + legend_w}" height="{top_m + height + 50}" '
           'font-family="sans-serif" font-size="10">',
           f'<text x="{left}" y="18" font-size="14">{esc(title)}</text>']
    if shade:
        x0, x1 = fx(max(xmin, shade[0])), fx(min(xmax, shade[1]))
        out.append(f'<rect x="{x0:.1f}" y="{top_m}" width="{max(0, x1 - x0):.1f}" height="{height}" fill="#f1e3c8"/>')
        out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{top_m + 12}" text-anchor="middle">snapshot held</text>')
    if log:
        d = math.floor(lo)
        while d <= hi:
            y = fy(10 ** d)
            if top_m <= y <= top_m + height:
                out.append(f'<line x1="{left}" x2="{left + width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
                out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** d:,g}</text>')
            d += 1
    else:
        for i in range(5):
            y = top_m + height - height * i / 4
            out.append(f'<line x1="{left}" x2="{left + width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{ymax * i / 4:,.0f}</text>')
    ticks = xs_labels or [(xmin + (xmax - xmin) * i / 5, None) for i in range(6)]
    for x, text in ticks:
        out.append(f'<text x="{fx(x):.1f}" y="{top_m + height + 14}" text-anchor="middle">'
                   f'{esc(text) if text else f"{x:,.0f}"}</text>')
    out.append(f'<text x="{left + width / 2}" y="{top_m + height + 32}" text-anchor="middle">{esc(xlabel)}</text>')
    out.append(f'<text transform="translate(16,{top_m + height / 2}) rotate(-90)" text-anchor="middle">{esc(ylabel)}</text>')
    for i, (name, color, dashed, ps) in enumerate(series):
        path, pen = [], "M"
        for x, y in ps:
            if y is None:
                pen = "M"
                continue
            path.append(f"{pen}{fx(x):.1f},{fy(y):.1f}")
            pen = "L"
        dash = ' stroke-dasharray="5,3"' if dashed else ""
        if path:
            out.append(f'<path d="{" ".join(path)}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            for x, y in ps:
                if y is not None and len(ps) <= 30:
                    out.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="2.5" fill="{color}"/>')
        ly = top_m + 10 + 16 * i
        out.append(f'<line x1="{left + width + 16}" x2="{left + width + 40}" y1="{ly}" y2="{ly}" stroke="{color}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{left + width + 46}" y="{ly + 4}">{esc(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_charts(runs, outdir):
    """held-<n>.svg per held config (rate by round), steady-p99.svg and steady-throughput.svg."""
    names = []
    for i, t in enumerate(held_table(runs), 1):
        series = [(r["label"], COLORS.get(r["system"], "#444"), r["system"] == "relaybus loop, VERSION 0.2.0",
                   [(k + 1, v) for k, v in enumerate(r["rates"])]) for r in t["rows"]]
        name = f"held-{i}.svg"
        with open(os.path.join(outdir, name), "w") as f:
            f.write(line_chart(f"held: {t['config']}: drain rate by round", series, "round", "deliveries/s",
                               xs_labels=[(k + 1, str(k + 1)) for k in range(t["rounds"])]))
        names.append(name)
    steady = [r for r in runs if r["scenario"] == "steady"]
    if steady:
        hold = next((r["hold"] for r in steady if r["hold"].get("begin_s") is not None), None)
        shade = (hold["begin_s"], hold["end_s"]) if hold else None
        for key, name, ylabel, log in (("p99_ms", "steady-p99.svg", "end-to-end p99, ms (log scale)", True),
                                       ("delivered_per_s", "steady-throughput.svg", "delivered per second", False)):
            series = []
            for r in steady:
                pts = [(b["t_s"] + r["params"]["bucket_s"] / 2, b[key]) for b in r.get("buckets") or []]
                series.append((r.get("label", r["version"]), COLORS.get(r["version"], "#444"),
                               r["version"] == "relaybus loop, VERSION 0.2.0", pts))
            with open(os.path.join(outdir, name), "w") as f:
                f.write(line_chart(f"steady: {steady[0]['config']}: {ylabel.split(',')[0]} per "
                                   f"{steady[0]['params']['bucket_s']:g} s", series,
                                   "seconds since the first commit (hold shaded: the first system's)", ylabel,
                                   log=log, shade=shade))
            names.append(name)
    return names


def report(outdir, info, runs):
    """held.json, the charts; returns the Markdown (tables and chart links)."""
    with open(os.path.join(outdir, "held.json"), "w") as f:
        json.dump(dict(info=info, runs=runs), f, indent=1)
    charts = write_charts(runs, outdir)
    return markdown(runs) + "\n" + "\n".join(f"![{c}]({c})" for c in charts) + "\n"
