"""What every Python runner of bench/peers shares (README.md has the protocol): the command
line, the events a publisher makes, the record files, the measurement window (WAL), and the
processes of a drain, a publish and a mixed run. A runner is a small class with the
system's own calls; runner.main(System()) does the rest. Optional calls: begin(conn, scenario)
before a run's processes start and end(conn) after they stopped (a peer's own background
process, such as PgQ's ticker, lives between the two), preloaded(conn) after the preload.

The events, ids, keys, payloads and the open-loop pacing are those of `relaybus-bench`
(src/client/bench/bench_processes.cpp), so every system is offered the same work.
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import time

import psycopg

HARNESS = "/*relaybus-bench-harness*/"
HANDLER = "bench"


def now_us():
    return time.time_ns() // 1000


class Event:
    __slots__ = ("id", "key", "n", "payload")

    def __init__(self, id, key, n, payload):
        self.id, self.key, self.n, self.payload = id, key, n, payload


def preload_events(count, first=1):
    """e-<first> .. e-<first + N - 1> (e-1 .. e-N by default): payload {"n": i}, every even one
    keyed k<i mod max(1, N/4)>. The held-snapshot rounds (bench/held_bench.py) preload again
    and again into a queue they never empty, each round from the next `first`."""
    keys = max(1, count // 4)
    return [Event(f"e-{i}", f"k{i % keys}" if i % 2 == 0 else None, i, json.dumps({"n": i}))
            for i in range(first, first + count)]


def publisher_events(index, keys):
    """The endless event stream of publisher `index`, as relaybus-bench publish makes it."""
    counters = [0] * max(1, keys)
    seq = 0
    while True:
        if seq % 2 == 0:
            k = (seq // 2) % len(counters)
            counters[k] += 1
            key, n = f"p{index}-k{k}", counters[k]
        else:
            key, n = None, seq
        yield Event(f"p{index}-{seq}", key, n, json.dumps({"n": n, "p": index}))
        seq += 1


class Window:
    """The measurement window: wall time and the WAL written (the whole cluster's)."""

    def __init__(self, conn):
        self.conn = conn
        self.lsn = self.conn.execute(f"SELECT {HARNESS} pg_current_wal_insert_lsn()").fetchone()[0]
        self.start = time.monotonic()
        self.start_us = now_us()  # wall clock: the records' time base

    def elapsed(self):
        return time.monotonic() - self.start

    def wal_bytes(self):
        return int(self.conn.execute(
            f"SELECT {HARNESS} pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)::bigint",
            (self.lsn,)).fetchone()[0])


def write_summary(prefix, **fields):
    with open(prefix + ".summary.json", "w") as f:
        json.dump(fields, f)


# ------------------------------------------------------------------ the processes

def consumer_process(system, conninfo, options, path, stop, index):
    """One consumer: the system's own loop, recording every handled delivery."""
    records = []

    def handled(event_id, key, n, attempts=0):
        records.append(f"{event_id}\t{HANDLER}\t{key or '-'}\t{n}\t{now_us()}\t{attempts}\n")

    try:
        system.consume(conninfo, options, handled, stop.is_set, index)
    finally:
        with open(path, "w") as f:
            f.writelines(records)


def publisher_process(system, conninfo, options, path, index, events, rate, duration_s, stop, batch):
    """Publishes `events` events (0: until duration_s) at `rate` per second (0: flat out),
    `batch` per call: an open loop, so a late call goes at once and nothing is skipped."""
    lines = []
    stream = publisher_events(index, options.keys)
    start = time.monotonic()
    done = 0
    with system.connect(conninfo) as conn:
        while not stop.is_set():
            if events and done >= events:
                break
            elapsed = time.monotonic() - start
            if duration_s and elapsed >= duration_s:
                break
            if rate:
                due = done / rate
                if due > elapsed:
                    time.sleep(due - elapsed)
            n = batch if not events else min(batch, events - done)
            call = [next(stream) for _ in range(n)]
            sent = now_us()
            system.publish(conn, call)
            committed = now_us()
            lines.append(f"C\t{committed - sent}\t{n}\n")
            lines.extend(f"E\t{e.id}\t{e.key or '-'}\t{e.n}\t{committed}\n" for e in call)
            done += n
    with open(path, "w") as f:
        f.writelines(lines)


def start_consumers(system, options, stop):
    procs = []
    for i in range(options.consumers):
        path = f"{options.out}.dispatcher-{i}.tsv"
        p = mp.Process(target=consumer_process, args=(system, options.conn, options, path, stop, i))
        p.start()
        procs.append(p)
    return procs


def start_publishers(system, options, stop, events=0, rate=0, duration_s=0, batch=1):
    procs = []
    for i in range(options.publishers):
        share = events // options.publishers + (1 if i < events % options.publishers else 0) if events else 0
        path = f"{options.out}.publisher-{i}.tsv"
        p = mp.Process(target=publisher_process,
                       args=(system, options.conn, options, path, i, share, rate / options.publishers, duration_s,
                             stop, batch))
        p.start()
        procs.append(p)
    return procs


def hook(system, name, *args):
    """Calls the system's optional `name` (begin, end, preloaded) if it has one."""
    call = getattr(system, name, None)
    if call is not None:
        call(*args)


def joined(procs):
    """Waits for every process; how many failed."""
    for p in procs:
        p.join()
    return sum(1 for p in procs if p.exitcode != 0)


# ------------------------------------------------------------------ the scenarios

def drain(system, options):
    with system.connect(options.conn) as conn:
        hook(system, "begin", conn, "drain")
        total = system.unfinished(conn)
        window = Window(conn)
        stop = mp.Event()
        consumers = start_consumers(system, options, stop)
        left = total
        while window.elapsed() < options.duration_s:
            asked = time.monotonic()
            left = system.unfinished(conn)
            if left == 0 or not any(p.is_alive() for p in consumers):  # done, or no one left to do it
                break
            # The check competes with the consumers for the machine: at most a tenth of a core
            # (a count over a large backlog takes a good part of a second). The rate is taken
            # to the last delivery handled, so a later check does not lengthen the drain.
            time.sleep(max(0.1, 10 * (time.monotonic() - asked)))
        elapsed = window.elapsed()
        wal = window.wal_bytes()
        stop.set()
        failed = joined(consumers)
        hook(system, "end", conn)
    write_summary(options.out, scenario="drain", deliveries=total, elapsed_s=elapsed, wal_bytes=wal,
                  drained=left == 0, left=left, processes_failed=failed, start_us=window.start_us)
    return 0 if failed == 0 else 1


def publish(system, options):
    with system.connect(options.conn) as conn:
        hook(system, "begin", conn, "publish")
        window = Window(conn)
        stop = mp.Event()
        failed = joined(start_publishers(system, options, stop, events=options.events, batch=options.batch))
        elapsed = window.elapsed()
        wal = window.wal_bytes()
        hook(system, "end", conn)
    write_summary(options.out, scenario="publish", events=options.events, elapsed_s=elapsed, wal_bytes=wal,
                  processes_failed=failed)
    return 0 if failed == 0 else 1


def mixed(system, options):
    with system.connect(options.conn) as conn:
        hook(system, "begin", conn, "mixed")
        window = Window(conn)
        stop_consumers, stop_publishers = mp.Event(), mp.Event()
        consumers = start_consumers(system, options, stop_consumers)
        # One event per transaction, whatever --batch says (it sizes the consumers' fetches).
        publishers = start_publishers(system, options, stop_publishers, rate=options.rate,
                                      duration_s=options.duration_s, batch=1)
        backlog_max = 0
        while window.elapsed() < options.duration_s:
            backlog_max = max(backlog_max, system.unfinished(conn))
            time.sleep(0.25)
        failed = joined(publishers)
        publish_elapsed = window.elapsed()
        drain_start = time.monotonic()
        left = system.unfinished(conn)
        while left and time.monotonic() - drain_start < options.drain_timeout_s:
            time.sleep(0.05)
            left = system.unfinished(conn)
            backlog_max = max(backlog_max, left)
        elapsed = window.elapsed()
        wal = window.wal_bytes()
        stop_consumers.set()
        failed += joined(consumers)
        hook(system, "end", conn)
    write_summary(options.out, scenario="mixed", offered_rate=options.rate, publish_elapsed_s=publish_elapsed,
                  elapsed_s=elapsed, wal_bytes=wal, backlog_max=backlog_max, drained=left == 0, left=left,
                  processes_failed=failed)
    return 0 if failed == 0 else 1


def main(system):
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["info", "reset", "preload", "drain", "publish", "mixed", "stored", "left"])
    ap.add_argument("--conn")
    ap.add_argument("--out")
    ap.add_argument("--events", type=int, default=0)
    ap.add_argument("--first", type=int, default=1, help="preload: the first event's number")
    ap.add_argument("--no-vacuum", action="store_true",
                    help="preload: no VACUUM or ANALYZE of the runner's own (the Python runners run none)")
    ap.add_argument("--consumers", type=int, default=1)
    ap.add_argument("--publishers", type=int, default=1)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--duration-s", type=float, default=600)
    ap.add_argument("--drain-timeout-s", type=float, default=120)
    ap.add_argument("--preset", choices=["tuned", "defaults"], default="defaults")
    o = ap.parse_args()
    if o.batch is None:  # publish: events per call; drain and mixed: the consumers' fetch
        o.batch = 1 if o.command == "publish" else system.default_batch
    if o.command == "info":
        print(json.dumps(system.info()))
        return 0
    system.options = o
    if o.command == "reset":
        with system.connect(o.conn) as conn:
            system.reset(conn)
        return 0
    if o.command == "preload":
        events = preload_events(o.events, o.first)
        with system.connect(o.conn) as conn:
            for i in range(0, len(events), 1000):
                system.publish(conn, events[i:i + 1000])
            hook(system, "preloaded", conn)
        return 0
    if o.command == "stored":
        with system.connect(o.conn) as conn:
            sys.stdout.writelines(f"{i}\n" for i in system.stored(conn))
        return 0
    if o.command == "left":
        with system.connect(o.conn) as conn:
            print("%d %d" % system.left(conn))
        return 0
    return {"drain": drain, "publish": publish, "mixed": mixed}[o.command](system, o)
