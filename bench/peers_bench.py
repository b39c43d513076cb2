"""relaybus against the queues users would pick instead: PgQ, graphile-worker, pg-boss, and
the floor of relaybus's own schema, in the harness's cluster and invocation, interleaved
round by round with relaybus, every run validated by harness.run_one (bench/peers/README.md
has the runner protocol).

Each configuration names the systems that run it and the reference the ratios are taken
against: "relaybus 0.2.0 loop" (one consumer session, claim + complete_many) for the
one-consumer drain, "relaybus 0.2.0" (the C++ dispatcher, or relaybus-bench publish) for
the rest. A ratio is reference rate / system rate: above 1, relaybus is faster.
"""
import json
import os
import subprocess
import sys

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers")
PYTHON = "/usr/bin/python3"  # Debian's, with python3-psycopg
NODE = "node"

# name: (database, runner or None for the relaybus tool, preset)
SYSTEMS = {
    "relaybus 0.2.0": ("db_020", None, None),
    # The relaybus tool (the C++ runtime, relaybus-bench) on relaybus 0.3.0, the default
    # version: issue 33's latency goals are the default runtime's.
    "relaybus 0.3.0": ("db_030", None, None),
    "relaybus 0.2.0 loop": ("db_loop", "relaybus_loop.py", None),
    # The same loop on relaybus 0.2.0 itself (CREATE EXTENSION relaybus VERSION '0.2.0', see
    # EXTENSION_VERSIONS) beside the default version: the held-snapshot scenarios
    # (bench/held_bench.py) compare the two.
    "relaybus loop, VERSION 0.2.0": ("db_loop020", "relaybus_loop.py", None),
    # The same loop on relaybus 0.3.0 (positions and cursors), the default version.
    "relaybus loop, VERSION 0.3.0": ("db_loop030", "relaybus_loop.py", None),
    "floor": ("db_floor", "floor.py", None),
    "PgQ (tuned ticker)": ("db_pgq", "pgq.py", "tuned"),
    "PgQ (pgqd defaults)": ("db_pgq", "pgq.py", "defaults"),
    "graphile-worker (tuned)": ("db_graphile", "graphile.mjs", "tuned"),
    "graphile-worker (defaults)": ("db_graphile", "graphile.mjs", "defaults"),
    "pg-boss (tuned)": ("db_pgboss", "pgboss.mjs", "tuned"),
    "pg-boss (defaults)": ("db_pgboss", "pgboss.mjs", "defaults"),
}


# A database whose relaybus is not the default version: prepare() creates it at this version
# (the runner's reset then finds it there: CREATE EXTENSION IF NOT EXISTS).
# "relaybus 0.2.0 loop" and the floor (0.2's tables without its functions) are 0.2's lane
# leases, the reference the peers were measured against: 0.2.1, named, now that 0.3.0 is the
# default version.
EXTENSION_VERSIONS = {"db_loop": "0.2.1", "db_floor": "0.2.1", "db_loop020": "0.2.0",
                      "db_loop030": "0.3.0", "db_030": "0.3.0"}


def plans(mode):
    """(scenario, config, params, systems, reference): the peer comparisons of a mode."""
    if mode == "validity":
        return [("drain", "peers validity drain", dict(events=300, consumers=1, batch=50),
                 ["relaybus 0.2.0 loop", "relaybus loop, VERSION 0.3.0", "floor", "PgQ (tuned ticker)",
                  "graphile-worker (tuned)", "pg-boss (tuned)"],
                 "relaybus 0.2.0 loop")]
    n = 20000
    dur = 20 if mode == "quick" else 30
    one = dict(events=n, consumers=1, batch=500)
    return [
        ("drain", "one consumer, batch 500", one,
         ["relaybus 0.2.0 loop", "relaybus loop, VERSION 0.3.0", "floor", "PgQ (tuned ticker)",
          "graphile-worker (tuned)", "pg-boss (tuned)"],
         "relaybus 0.2.0 loop"),
        # PgQ's two consumers are two registered consumers, each reading every batch and
        # handling its half (README.md).
        ("drain", "two consumers, batch 500", dict(one, consumers=2),
         ["relaybus 0.2.0 loop", "relaybus loop, VERSION 0.3.0", "floor", "PgQ (tuned ticker)",
          "graphile-worker (tuned)"], "relaybus 0.2.0 loop"),
        # The dispatcher as the harness's TUNED (bench/harness.py): c200 b200 t2 poll 50 ms.
        ("drain", "1 process, tuned", dict(events=n, dispatchers=1, concurrency=200, batch=200, poll_ms=50,
                                           handler_threads=2, consumers=1),
         ["relaybus 0.2.0", "relaybus 0.2.0 loop", "graphile-worker (tuned)"], "relaybus 0.2.0"),
        ("drain", "1 process, defaults", dict(events=n, dispatchers=1, concurrency=10, batch=100, poll_ms=1000,
                                              consumers=1),
         # pg-boss at its defaults takes one job per 2 s poll: it would not drain 20,000.
         ["relaybus 0.2.0", "relaybus 0.3.0", "graphile-worker (defaults)"], "relaybus 0.2.0"),
        # Publishing: "relaybus 0.2.0 loop" publishes from Python (psycopg), as the floor and
        # PgQ do, so their ratios compare servers, not clients; "relaybus 0.2.0" is the tool
        # (C++, libpq). Single publish is 20,000 events in both modes: the goal (0.95x the
        # floor) is a 5% margin, and rounds of 5,000 (about a second) differed by 15%.
        ("publish", "single publish, P=1", dict(publishers=1, batch=1, events=20000),
         ["relaybus 0.2.0 loop", "relaybus 0.2.0", "relaybus loop, VERSION 0.3.0", "floor", "PgQ (pgqd defaults)",
          "graphile-worker (defaults)", "pg-boss (defaults)"],
         "relaybus 0.2.0 loop"),
        ("publish", "100 per statement, P=1", dict(publishers=1, batch=100, events=20000 if mode == "quick" else 100000),
         ["relaybus 0.2.0 loop", "relaybus 0.2.0", "relaybus loop, VERSION 0.3.0", "floor", "PgQ (pgqd defaults)",
          "graphile-worker (defaults)", "pg-boss (defaults)"],
         "relaybus 0.2.0 loop"),
        ("mixed", f"1000/s for {dur} s, defaults", dict(rate=1000, duration_s=dur, dispatchers=1, concurrency=10,
                                                       batch=100, poll_ms=1000, consumers=1),
         # Not PgQ with our fast ticker: in a 20 s mixed run its consumer fell minutes behind
         # (p50 46 s), PgQ's tick queries degrading as its tick table grew; pgqd's defaults are
         # PgQ's documented way to run.
         ["relaybus 0.2.0", "relaybus 0.3.0", "PgQ (pgqd defaults)", "graphile-worker (defaults)",
          "graphile-worker (tuned)", "pg-boss (tuned)"],
         "relaybus 0.2.0"),
    ]


def runner_command(runner):
    path = os.path.join(PEERS, runner)
    return [NODE, path] if runner.endswith(".mjs") else [PYTHON, path]


class RunnerTarget:
    """A peer (or the loop, or the floor) through its runner, as harness.run_one needs a
    store (see harness.PgTarget)."""

    def __init__(self, h, cluster, system):
        self.h, self.cluster, self.system = h, cluster, system
        self.name, self.runner, self.preset = SYSTEMS[system]
        self.db = cluster.conninfo(self.name)
        info = subprocess.run(runner_command(self.runner) + ["info"], check=True, capture_output=True, text=True)
        self.info = json.loads(info.stdout)
        self.ordered_keys = bool(self.info.get("ordered_keys"))

    def call(self, args, log):
        return self.h.cli_command(runner_command(self.runner) + args, log)

    def reset(self, preload, prefix, log):
        if self.call(["reset", "--conn", self.db], log) != 0:
            raise RuntimeError(f"{self.system}: reset failed; see {log}")
        if preload and self.call(["preload", "--conn", self.db, "--events", str(preload)], log) != 0:
            raise RuntimeError(f"{self.system}: preload failed; see {log}")
        # VACUUM without ANALYZE: statistics of a just-emptied queue mislead a peer's kept
        # plans (PgQ's tick table analyzed at one row made its consumer scan it, p99 4.3 s
        # against 21 ms); autovacuum analyzes as the run goes, as it would in production.
        for t in self.h.user_tables(self.cluster, self.name):
            self.cluster.sql(self.name, f"VACUUM {t}")
        self.cluster.sql(self.name, "SELECT pg_stat_reset(), pg_stat_statements_reset()")
        return {f"e-{i}" for i in range(1, preload + 1)}

    def start(self):
        pass

    def run(self, scenario, p, prefix, log):
        args = [scenario, "--conn", self.db, "--out", prefix]
        if self.preset:
            args += ["--preset", self.preset]
        if scenario == "drain":
            args += ["--consumers", str(p.get("consumers", 1)), "--batch", str(p["batch"]), "--duration-s", "600"]
        elif scenario == "publish":
            args += ["--events", str(p["events"]), "--batch", str(p["batch"]), "--publishers", str(p["publishers"])]
        else:
            args += ["--rate", str(p["rate"]), "--duration-s", str(p["duration_s"]), "--publishers", "2",
                     "--keys", str(max(100, p["rate"] * p["duration_s"] // 4))]
        return self.call(args, log)

    def event_ids(self):
        out = subprocess.run(runner_command(self.runner) + ["stored", "--conn", self.db], check=True,
                             capture_output=True, text=True).stdout
        return {line for line in out.splitlines() if line}

    def pending_deliveries(self):
        return len(self.event_ids())  # one job or delivery per published event

    def leftovers(self):
        out = subprocess.run(runner_command(self.runner) + ["left", "--conn", self.db], check=True,
                             capture_output=True, text=True).stdout.split()
        return int(out[0]), int(out[1])

    def measure(self, summary, deliveries):
        stats = self.h.generic_stats(self.cluster, self.name)
        per = max(deliveries, 1)
        return dict(wal_bytes_per_delivery=summary["wal_bytes"] / per,
                    statements_per_delivery=stats["statements"] / per,
                    dead_tuples=stats["dead"]), stats

    def finish(self):
        pass  # the next run resets


def target_of(h, cluster, system):
    if SYSTEMS[system][1] is None:
        if EXTENSION_VERSIONS.get(SYSTEMS[system][0]) == "0.3.0":
            return positions_target(h)(cluster, SYSTEMS[system][0])
        return h.PgTarget(cluster, SYSTEMS[system][0])
    return RunnerTarget(h, cluster, system)


def positions_target(h):
    """h.PgTarget on relaybus 0.3.0: its checks read statistics() (0.3.0's deliveries have no
    status), and its figures are the peers' (dead tuples over every table: progress rows and
    exception rows are 0.3.0's writes, not updates of deliveries and lanes)."""

    class PositionsTarget(h.PgTarget):
        def pending_deliveries(self):
            return int(self.cluster.value(self.name, f"""SELECT {h.HARNESS} coalesce(sum(pending + processing), 0)
                                                           FROM relaybus.statistics() WHERE handler = '{h.HANDLER}'"""))

        def leftovers(self):
            row = self.cluster.sql(self.name, f"""SELECT {h.HARNESS} coalesce(sum(pending + processing), 0),
                                                    coalesce(sum(dead), 0) FROM relaybus.statistics()""")[0]
            return int(row[0]), int(row[1])

        def measure(self, summary, deliveries):
            stats = h.generic_stats(self.cluster, self.name)
            per = max(deliveries, 1)
            return dict(wal_bytes_per_delivery=summary["wal_bytes"] / per,
                        statements_per_delivery=stats["statements"] / per,
                        dead_tuples=stats["dead"]), stats

    return PositionsTarget


def kept(system, keep):
    """Whether `system` runs when only the runners named in `keep` (stems: "pgq") do."""
    return keep is None or os.path.splitext(SYSTEMS[system][1] or "")[0] in keep


def prepare(h, cluster, mode, extra=(), keep=None):
    """The peers' databases (the relaybus ones are the harness's), for the systems of this
    mode's plans and `extra` (the held-snapshot scenarios' systems), only those whose runner
    is in `keep` if given; a database that exists already is left as it is."""
    systems = {s for s in {s for _, _, _, ss, _ in plans(mode) for s in ss} | set(extra) if kept(s, keep)}
    have = {r[0] for r in cluster.sql("postgres", "SELECT datname FROM pg_database")}
    for db in sorted({SYSTEMS[s][0] for s in systems} - {"db_020", "db_010"} - have):
        cluster.sql("postgres", f"CREATE DATABASE {db}")
        cluster.sql(db, "CREATE EXTENSION pg_stat_statements")
        if db in EXTENSION_VERSIONS:
            cluster.sql(db, f"CREATE EXTENSION relaybus VERSION '{EXTENSION_VERSIONS[db]}'")
    node = os.path.join(PEERS, "node")
    if any(built(s) and SYSTEMS[s][1] and SYSTEMS[s][1].endswith(".mjs") for s in systems):
        if not os.path.isdir(os.path.join(node, "node_modules")):
            subprocess.run([os.path.join(node, "install.sh")], check=True)


def built(system):
    runner = SYSTEMS[system][1]
    return runner is None or os.path.exists(os.path.join(PEERS, runner))


def run(h, cluster, mode, rounds, outdir, only=None, keep=None):
    results = []
    todo = [pl[:3] + ([s for s in pl[3] if kept(s, keep)],) + pl[4:] for pl in plans(mode) if not only or pl[0] == only]
    todo = [pl for pl in todo if pl[3]]
    for n, (scenario, config, params, systems, reference) in enumerate(todo, 1):
        print(f"[peers {n}/{len(todo)}] {scenario}: {config}", file=sys.stderr)
        for s in [s for s in systems if not built(s)]:
            print(f"    left out: {s} (no runner {SYSTEMS[s][1]} in bench/peers)", file=sys.stderr)
        systems = [s for s in systems if built(s)]
        targets = {s: target_of(h, cluster, s) for s in systems}
        for rnd in range(rounds):
            for system in systems:  # interleaved: every system once per round
                tag = f"peers-{scenario}-{n}-r{rnd}-{system.replace(' ', '_').replace('(', '').replace(')', '')}"
                r = h.run_one(targets[system], scenario, params, outdir, tag)
                r.update(scenario=scenario, config=config, params=params, version=system, round=rnd,
                         group="peers", reference=reference, info=getattr(targets[system], "info", None))
                results.append(r)
                m = r["metrics"]
                state = "valid" if r["valid"] else "INVALID: " + ", ".join(r["problems"])
                shown = "INVALID" if not r["valid"] else f"{m['throughput']:,.0f} {m['throughput_unit']}"
                print(f"    {system} round {rnd + 1}: {shown} ({state})", file=sys.stderr)
    return results


COLUMNS = [("throughput", "rate", 0), ("latency_p50_ms", "p50 ms", 1), ("latency_p99_ms", "p99 ms", 1),
           ("wal_bytes_per_delivery", "WAL B/event", 0), ("statements_per_delivery", "stmts/event", 2),
           ("dead_tuples", "dead tuples", 0), ("dead_tuples_deliveries", "dead tuples", 0)]


def summarize(h, results):
    rows = []
    for scenario, config in dict.fromkeys((r["scenario"], r["config"]) for r in results):
        runs = [r for r in results if r["scenario"] == scenario and r["config"] == config]
        reference = runs[0]["reference"]
        systems = list(dict.fromkeys(r["version"] for r in runs))
        medians = {}
        for s in systems:
            mine = [r for r in runs if r["version"] == s]
            medians[s] = None if any(not r["valid"] for r in mine) else {k: h.median_of(mine, k) for k, _, _ in COLUMNS}
        ref = (medians.get(reference) or {}).get("throughput")
        ratios = {s: (ref / m["throughput"]) if ref and m and m.get("throughput") else None for s, m in medians.items()}
        rows.append(dict(scenario=scenario, config=config, reference=reference, systems=systems,
                         medians=medians, ratios=ratios, runs={s: sum(r["version"] == s for r in runs) for s in systems}))
    return rows


def markdown(h, table):
    out = ["## relaybus against its peers\n",
           "Ratio = the reference's median rate / the system's: above 1.00x the reference (relaybus) is faster.\n",
           goals_markdown(table)]
    for row in table:
        out.append(f"### {row['scenario']}: {row['config']} (reference: {row['reference']})\n")
        out.append("| system | runs | " + " | ".join(c[1] for c in COLUMNS[:-1]) + " | reference / system |")
        out.append("| --- | --- | " + " | ".join("---" for _ in COLUMNS[:-1]) + " | --- |")
        for s in row["systems"]:
            m = row["medians"][s]
            if m is None:
                vals = ["INVALID"] * (len(COLUMNS) - 1)
            else:
                dead = m.get("dead_tuples") if m.get("dead_tuples") is not None else m.get("dead_tuples_deliveries")
                vals = [h.fmt(m.get(k), d) for k, _, d in COLUMNS[:-2]] + [h.fmt(dead, 0)]
            ratio = row["ratios"].get(s)
            out.append(f"| {s} | {row['runs'][s]} | " + " | ".join(vals) + f" | {'-' if ratio is None else f'{ratio:.2f}x'} |")
        out.append("")
    return "\n".join(out)


def goals(table):
    """The goals of issue 12 against this run: (goal, measured, met) per row, from medians."""
    def rate(config, system):
        row = next((r for r in table if r["config"] == config), None)
        m = row and row["medians"].get(system)
        return m and m.get("throughput")

    def p99(config, system):
        row = next((r for r in table if r["config"].startswith(config)), None)
        m = row and row["medians"].get(system)
        return m and m.get("latency_p99_ms")

    rows = []

    def ratio_goal(goal, a, b, want):
        if a and b:
            rows.append((goal, f"{a / b:.2f}x ({a:,.0f} / {b:,.0f})", a / b >= want))
        else:
            rows.append((goal, "not measured (INVALID or not run)", False))

    one, two = "one consumer, batch 500", "two consumers, batch 500"
    ratio_goal("drain, one consumer, batch 500: relaybus >= 1.5x graphile-worker tuned",
               rate(one, "relaybus 0.2.0 loop"), rate(one, "graphile-worker (tuned)"), 1.5)
    ratio_goal("drain, one consumer, batch 500: relaybus >= 0.8x the floor",
               rate(one, "relaybus 0.2.0 loop"), rate(one, "floor"), 0.8)
    ratio_goal("C++ dispatcher tuned >= 0.9x a bare claim + complete_many loop (batch 200)",
               rate("1 process, tuned", "relaybus 0.2.0"), rate("1 process, tuned", "relaybus 0.2.0 loop"), 0.9)
    ratio_goal("C++ dispatcher at its defaults >= 2x graphile-worker at its defaults",
               rate("1 process, defaults", "relaybus 0.2.0"), rate("1 process, defaults", "graphile-worker (defaults)"), 2.0)
    # Publishing goals compare the same client (Python, psycopg): the loop's publish.
    ratio_goal("batch publish (100 per statement) >= 0.5x PgQ",
               rate("100 per statement, P=1", "relaybus 0.2.0 loop"),
               rate("100 per statement, P=1", "PgQ (pgqd defaults)"), 0.5)
    ratio_goal("single publish >= 0.95x the floor",
               rate("single publish, P=1", "relaybus 0.2.0 loop"), rate("single publish, P=1", "floor"), 0.95)
    lat = p99("1000/s", "relaybus 0.2.0")
    rows.append(("mixed at 1,000/s, default dispatcher: p99 <= 5 ms",
                 "not measured" if lat is None else f"{lat:.2f} ms", lat is not None and lat <= 5))
    ratio_goal("two consumer processes >= 1.8x one (batch 500)",
               rate(two, "relaybus 0.2.0 loop"), rate(one, "relaybus 0.2.0 loop"), 1.8)
    return rows


def goals_markdown(table):
    rows = goals(table)
    if all(m.startswith("not measured") for _, m, _ in rows):
        return ""  # none measured: a run without relaybus (harness --peers-only)
    lines = ["### Against the goals of issue 12\n", "| goal | measured | |", "| --- | --- | --- |"]
    lines += [f"| {g} | {m} | {'met' if ok else '**not met**'} |" for g, m, ok in rows]
    return "\n".join(lines) + "\n"


def svg_chart(table, scenario):
    """One bar per system for each configuration of `scenario`: its median rate, relaybus
    (the reference) in blue, the peers in grey, the floor hatched in light grey."""
    rows = [r for r in table if r["scenario"] == scenario]
    bars = [(r, s) for r in rows for s in r["systems"]]
    values = [((r["medians"][s] or {}).get("throughput") or 0) for r, s in bars]
    top = max(values + [1]) * 1.15
    bar, gap, left, height = 26, 30, 70, 260
    width = left + sum(len(r["systems"]) * bar + gap for r in rows) + 40
    esc = lambda t: t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 230}" '
           'font-family="sans-serif" font-size="10">',
           f'<text x="{left}" y="18" font-size="14">{esc(scenario)}: median rate per system '
           '(relaybus blue, the floor light grey, peers grey)</text>']
    base = height + 30
    for i in range(5):
        y = base - height * i / 4
        out.append(f'<line x1="{left}" x2="{width - 20}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{top * i / 4:,.0f}</text>')
    x = left + gap / 2
    for r in rows:
        x0 = x
        for s in r["systems"]:
            m = r["medians"][s]
            color = "#2a6fdb" if s.startswith("relaybus") else "#cfcfcf" if s == "floor" else "#8c8c8c"
            if m is None or not m.get("throughput"):
                out.append(f'<text x="{x + bar / 2:.1f}" y="{base - 4}" text-anchor="middle" fill="#c00">INVALID</text>')
            else:
                h = height * m["throughput"] / top
                out.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{bar - 3}" height="{h:.1f}" fill="{color}"/>')
                out.append(f'<text x="{x + bar / 2:.1f}" y="{base - h - 3:.1f}" text-anchor="middle" '
                           f'font-size="8">{m["throughput"] / 1000:,.1f}k</text>')
            out.append(f'<text transform="translate({x + bar / 2:.1f},{base + 8}) rotate(60)" '
                       f'font-size="9">{esc(s)}</text>')
            x += bar
        out.append(f'<text x="{(x0 + x) / 2:.1f}" y="{base + 200}" text-anchor="middle" font-size="10">'
                   f'{esc(r["config"])}</text>')
        x += gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_charts(table, outdir):
    """peers-<scenario>.svg per scenario; returns the file names."""
    names = []
    for scenario in dict.fromkeys(r["scenario"] for r in table):
        name = f"peers-{scenario}.svg"
        with open(os.path.join(outdir, name), "w") as f:
            f.write(svg_chart(table, scenario))
        names.append(name)
    return names
