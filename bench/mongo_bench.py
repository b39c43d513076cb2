"""The benchmark on the MongoDB store: `bench/run --quick --mongo URI` (or --full, --validity).

The same scenarios as on PostgreSQL (harness.plans), run by the same relaybus-bench with a
mongodb:// --db (the store set up and the handler subscribed by the operator tool,
bin/relaybus), and every run validated the same way (harness.check_handled: nothing lost,
no duplicates, per-key order kept; then nothing left pending and no dead letters). The
figures are MongoDB's: oplog entries and bytes per delivery (local.oplog.rs over the
measurement window, summed by relaybus-bench; $bsonSize needs MongoDB 4.4), and the server's
update and command counters (serverStatus opcounters) per delivery; the commands include
relaybus-bench's own polling of the work left (one count every 100 ms of a drain, 250 ms of a
mixed run).

Only relaybus 0.2.0 runs here: this repository has no 0.1.0 MongoDB store to compare with.
The URI must name a replica set (transactions) and a database of its own, which every run
drops and sets up again: mongodb://localhost:27017/relaybus_bench?replicaSet=rs0.
It needs python3-pymongo (bench/run installs it).
"""
import json
import os
import sys

HANDLER = "bench"
TYPE = "bench.event"


def connect(uri):
    try:
        import pymongo
    except ImportError:
        sys.exit("bench: --mongo needs python3-pymongo (apt-get install python3-pymongo)")
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
    db = client.get_default_database(default=None)
    if db is None:
        sys.exit("bench: the --mongo URI must name a database: mongodb://host/relaybus_bench?replicaSet=rs0")
    try:
        client.admin.command("ping")
    except pymongo.errors.PyMongoError as e:
        sys.exit(f"bench: cannot reach MongoDB at {uri}: {e}")
    return client, db


def opcounters(client):
    c = client.admin.command("serverStatus")["opcounters"]
    return dict(update=int(c.get("update", 0)), command=int(c.get("command", 0)),
                delete=int(c.get("delete", 0)), insert=int(c.get("insert", 0)), query=int(c.get("query", 0)))


class MongoTarget:
    """The MongoDB store as harness.run_one needs a store (see harness.PgTarget)."""

    def __init__(self, h, client, db, uri):
        self.h, self.client, self.mdb, self.db = h, client, db, uri
        self.before = None

    def reset(self, preload, prefix, log):
        """Drops the bench database, sets the store up again, subscribes the bench handler and
        preloads through publish_batch (100 per transaction), keyed like PostgreSQL's preload:
        every other event, two events per key. Returns the preloaded ids."""
        self.client.drop_database(self.mdb.name)
        for args in (["setup", "--db", self.db],
                     ["subscribe", "--db", self.db, "--handler", HANDLER, "--types", TYPE]):
            if self.h.cli(args, log) != 0:
                raise RuntimeError(f"relaybus {args[0]} failed; see {log}")
        if not preload:
            return set()
        if self.h.bench(["publish", "--db", self.db, "--out", prefix + ".preload", "--batch", "100",
                       "--events", str(preload), "--keys", str(max(1, preload // 4)), "--type", TYPE], log) != 0:
            raise RuntimeError(f"preload failed; see {log}")
        return {r[1] for r in self.h.read_tsv(prefix + ".preload.publisher-*.tsv") if r[0] == "E"}

    ordered_keys = True

    def start(self):
        self.before = opcounters(self.client)

    def run(self, scenario, p, prefix, log):
        return self.h.bench(self.h.relaybus_bench_args(scenario, p, self.db, prefix), log)

    def event_ids(self):
        return {d["_id"] for d in self.mdb.events.find({}, {"_id": 1})}

    def pending_deliveries(self):
        return self.mdb.deliveries.count_documents({"handler": HANDLER, "status": "pending"})

    def leftovers(self):
        return (self.mdb.deliveries.count_documents({"status": "pending"}),
                self.mdb.deliveries.count_documents({"status": "dead"}))

    def measure(self, summary, deliveries):
        after = opcounters(self.client)
        per = max(deliveries, 1)
        counters = {k: after[k] - self.before[k] for k in after}
        return dict(oplog_bytes_per_delivery=summary.get("oplog_bytes", 0) / per,
                    oplog_entries_per_delivery=summary.get("oplog_entries", 0) / per,
                    updates_per_delivery=counters["update"] / per,
                    commands_per_delivery=counters["command"] / per), counters

    def finish(self):
        pass  # the next run drops the database


COLUMNS = [("throughput", "rate", 0), ("latency_p50_ms", "p50 ms", 1), ("latency_p95_ms", "p95 ms", 1),
           ("latency_p99_ms", "p99 ms", 1), ("oplog_bytes_per_delivery", "oplog B/dlv", 0),
           ("oplog_entries_per_delivery", "oplog entries/dlv", 2), ("updates_per_delivery", "updates/dlv", 2),
           ("commands_per_delivery", "commands/dlv", 2), ("backlog_max", "backlog max", 0)]


def markdown(h, results):
    import statistics
    out = []
    for scenario in dict.fromkeys(r["scenario"] for r in results):
        unit = next(r["metrics"]["throughput_unit"] for r in results if r["scenario"] == scenario)
        out.append(f"### mongo: {scenario} (rate = {unit}; medians of the valid runs)\n")
        out.append("| config | runs | " + " | ".join(c[1] for c in COLUMNS) + " |")
        out.append("| --- | --- | " + " | ".join("---" for _ in COLUMNS) + " |")
        for config in dict.fromkeys(r["config"] for r in results if r["scenario"] == scenario):
            runs = [r for r in results if r["scenario"] == scenario and r["config"] == config]
            invalid = [r for r in runs if not r["valid"]]
            if invalid:
                vals = ["INVALID"] * len(COLUMNS)
            else:
                vals = []
                for k, _, d in COLUMNS:
                    xs = [r["metrics"].get(k) for r in runs if r["metrics"].get(k) is not None]
                    vals.append(h.fmt(statistics.median(xs), d) if xs else "-")
            out.append(f"| {config} | {len(runs)}" + (f" ({len(invalid)} invalid)" if invalid else "") +
                       " | " + " | ".join(vals) + " |")
        out.append("")
    return "\n".join(out)


def main(h, args, outdir, command, git):
    import time
    client, db = connect(args.mongo)
    rounds = args.rounds or (1 if args.mode == "validity" else 2)
    results = []
    started = time.time()
    todo = [pl for pl in h.plans(args.mode) if not args.only or pl[0] == args.only]
    for n, (scenario, config, params) in enumerate(todo, 1):
        print(f"[{n}/{len(todo)}] mongo {scenario}: {config}", file=sys.stderr)
        for rnd in range(rounds):
            tag = f"mongo-{scenario}-{n}-r{rnd}"
            r = h.run_one(MongoTarget(h, client, db, args.mongo), scenario, params, outdir, tag)
            r.update(scenario=scenario, config=config, params=params, version="0.2.0 mongo", round=rnd)
            results.append(r)
            m = r["metrics"]
            state = "valid" if r["valid"] else "INVALID: " + ", ".join(r["problems"])
            print(f"    round {rnd + 1}: {m['throughput']:,.0f} {m['throughput_unit']} ({state})", file=sys.stderr)
    info = dict(command=command, mode=args.mode, rounds=rounds, machine=h.machine(),
                mongodb=client.server_info().get("version"), seconds=round(time.time() - started, 1), git=git)
    md = markdown(h, results)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(dict(info=info, runs=results), f, indent=1)
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write(f"# relaybus benchmark on MongoDB {info['mongodb']}\n\n`{command}` at {git}\n\n{md}\n")
    print(md)
    print(f"results: {outdir}", file=sys.stderr)
    return 1 if any(not r["valid"] for r in results) else 0
