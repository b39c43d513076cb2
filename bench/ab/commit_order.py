#!/usr/bin/python3
"""How publishers of one database wait for each other, for each way of giving a lane's
deliveries positions in commit order (issue 33: "publishers of different keys never wait
for each other's transactions, and never deadlock"). Three publish paths, side by side on
one cluster, each in a schema of its own:

- relaybus: the installed extension's relaybus.publish (0.2.x: a counter row per key,
  locked until commit);
- counter: a counter row per lane (the design of the first positions prototype, removed
  since 0.3.0 superseded it), bumped by the publish and locked until commit;
- log: the commit log (src/pg/commit_order.hpp): the publish writes the event and its
  delivery with the transaction's id and an ordinal; the positions are handed out at
  commit, under a lock per lane held from PRE_COMMIT to the end of the commit;
- staged: the same lane locks, but the publish writes only the event and keeps its
  delivery in backend memory; at PRE_COMMIT the deliveries are inserted with their
  positions (commit_order::stage), so a window is one range scan.

  bench/ab/commit_order.py --conn CONNINFO [--seconds S] [--connections N]
                           [--paths relaybus,counter,log] [--throughput N]

Contention: N connections (32) run transactions of three statements each, with a sleep of
0-10 ms after each statement (application work inside the transaction); a statement
publishes one event, keyed (keys drawn from a million, so two transactions almost never
share one) or not, or five events in one statement, in random lane order. For S seconds
(20) per path it counts commits and deadlocks, and every 20 ms it samples every backend
waiting on a lock and who blocks it: a wait "on a commit" is one whose blocker is running
COMMIT; any other (the blocker idle in its transaction, or running a statement) is a
wait on another transaction's work, confirmed when the next sample shows the same waiter
behind the same blocker transaction, still outside COMMIT. Waits for locks held only for a
moment (a relation's extension) are counted apart.

--throughput N: then, one connection, N events one per transaction and N events 100 per
statement, per path, alternated twice; events/s and WAL bytes per event.
"""
import argparse
import json
import random
import statistics
import sys
import threading
import time
import uuid

import psycopg

LANES = 256
HANDLER = "bench.commit-order"

SCHEMAS = {
    "counter": """
DROP SCHEMA IF EXISTS co_counter CASCADE;
CREATE SCHEMA co_counter;
CREATE TABLE co_counter.events (id text PRIMARY KEY, type text NOT NULL, key text,
  payload jsonb NOT NULL, published_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE co_counter.lane_counters (handler text NOT NULL, lane int2 NOT NULL,
  next_position int8 NOT NULL DEFAULT 0, PRIMARY KEY (handler, lane)) WITH (fillfactor = 50);
CREATE TABLE co_counter.deliveries (handler text NOT NULL, lane int2 NOT NULL,
  position int8 NOT NULL, event_id text NOT NULL, key text,
  available_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (handler, lane, position));
INSERT INTO co_counter.lane_counters (handler, lane)
  SELECT 'bench.commit-order', g FROM generate_series(0, 255) g;
""",
    "staged": """
DROP SCHEMA IF EXISTS co_staged CASCADE;
CREATE SCHEMA co_staged;
CREATE TABLE co_staged.events (id text PRIMARY KEY, type text NOT NULL, key text,
  payload jsonb NOT NULL, published_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE co_staged.deliveries (handler text NOT NULL, lane int2 NOT NULL,
  position int8 NOT NULL, event_id text NOT NULL, key text,
  available_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (handler, lane, position));
CREATE FUNCTION co_staged.stage(regclass, text, int2, text, text) RETURNS void
  AS 'relaybus', 'relaybus_commit_order_stage' LANGUAGE C VOLATILE;
""",
  "log": """
DROP SCHEMA IF EXISTS co_log CASCADE;
CREATE SCHEMA co_log;
CREATE TABLE co_log.events (id text PRIMARY KEY, type text NOT NULL, key text,
  payload jsonb NOT NULL, published_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE co_log.deliveries (handler text NOT NULL, lane int2 NOT NULL, txn xid8 NOT NULL,
  ordinal int4 NOT NULL, event_id text NOT NULL, key text,
  available_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (handler, lane, txn, ordinal));
CREATE TABLE co_log.lane_commits (handler text NOT NULL, lane int2 NOT NULL,
  first_position int8 NOT NULL, span int4 NOT NULL, txn xid8 NOT NULL,
  PRIMARY KEY (handler, lane, first_position));
CREATE FUNCTION co_log.note(regclass, text, int2) RETURNS int4
  AS 'relaybus', 'relaybus_commit_order_note' LANGUAGE C STRICT VOLATILE;
""",
}

# Each path: one event, and many in one statement (ids, keys, payloads in input order).
ONE = {
    "relaybus": "SELECT relaybus.publish('bench.event', %(payload)s::jsonb, %(key)s, %(id)s)",
    "counter": """
WITH lane AS (
  UPDATE co_counter.lane_counters SET next_position = next_position + 1
   WHERE handler = 'bench.commit-order' AND lane = (hashtext(coalesce(%(key)s::text, %(id)s::text)) & 255)::int2
  RETURNING lane, next_position),
event AS (INSERT INTO co_counter.events (id, type, key, payload)
  VALUES (%(id)s::text, 'bench.event', %(key)s::text, %(payload)s::jsonb))
INSERT INTO co_counter.deliveries (handler, lane, position, event_id, key)
SELECT 'bench.commit-order', lane, next_position, %(id)s::text, %(key)s::text FROM lane""",
    "staged": """
WITH event AS (INSERT INTO co_staged.events (id, type, key, payload)
  VALUES (%(id)s::text, 'bench.event', %(key)s::text, %(payload)s::jsonb))
SELECT co_staged.stage('co_staged.deliveries', 'bench.commit-order',
       (hashtext(coalesce(%(key)s::text, %(id)s::text)) & 255)::int2, %(id)s::text, %(key)s::text)""",
    "log": """
WITH event AS (INSERT INTO co_log.events (id, type, key, payload)
  VALUES (%(id)s::text, 'bench.event', %(key)s::text, %(payload)s::jsonb)),
lane AS (SELECT (hashtext(coalesce(%(key)s::text, %(id)s::text)) & 255)::int2 AS lane)
INSERT INTO co_log.deliveries (handler, lane, txn, ordinal, event_id, key)
SELECT 'bench.commit-order', lane, pg_current_xact_id(),
       co_log.note('co_log.lane_commits', 'bench.commit-order', lane), %(id)s::text, %(key)s::text
  FROM lane""",
}

MANY = {
    "relaybus": """
SELECT count(*) FROM relaybus.publish_batch((
  SELECT jsonb_agg(jsonb_build_object('type', 'bench.event', 'id', u.id, 'key', u.key, 'payload', u.payload) ORDER BY u.n)
    FROM unnest(%(ids)s::text[], %(keys)s::text[], %(payloads)s::jsonb[]) WITH ORDINALITY u(id, key, payload, n)))""",
    "counter": """
WITH input AS (
  SELECT u.id, u.key, u.payload, u.n, (hashtext(coalesce(u.key, u.id)) & 255)::int2 AS lane
    FROM unnest(%(ids)s::text[], %(keys)s::text[], %(payloads)s::jsonb[]) WITH ORDINALITY AS u(id, key, payload, n)),
counts AS (SELECT lane, count(*) AS k FROM input GROUP BY lane),
locked AS (
  SELECT l.lane FROM co_counter.lane_counters l
   WHERE l.handler = 'bench.commit-order' AND l.lane IN (SELECT lane FROM counts)
   ORDER BY l.lane FOR NO KEY UPDATE),
bumped AS (
  UPDATE co_counter.lane_counters l SET next_position = l.next_position + c.k
    FROM counts c WHERE l.handler = 'bench.commit-order' AND l.lane = c.lane
     AND l.lane IN (SELECT lane FROM locked)
  RETURNING l.lane, l.next_position),
event AS (
  INSERT INTO co_counter.events (id, type, key, payload)
  SELECT id, 'bench.event', key, payload FROM input ORDER BY n)
INSERT INTO co_counter.deliveries (handler, lane, position, event_id, key)
SELECT 'bench.commit-order', i.lane,
       b.next_position - count(*) OVER (PARTITION BY i.lane) + row_number() OVER (PARTITION BY i.lane ORDER BY i.n),
       i.id, i.key
  FROM input i JOIN bumped b ON b.lane = i.lane ORDER BY i.n""",
    "staged": """
WITH input AS (
  SELECT u.id, u.key, u.payload, u.n, (hashtext(coalesce(u.key, u.id)) & 255)::int2 AS lane
    FROM unnest(%(ids)s::text[], %(keys)s::text[], %(payloads)s::jsonb[]) WITH ORDINALITY AS u(id, key, payload, n)),
event AS (
  INSERT INTO co_staged.events (id, type, key, payload)
  SELECT id, 'bench.event', key, payload FROM input ORDER BY n)
SELECT count(co_staged.stage('co_staged.deliveries', 'bench.commit-order', s.lane, s.id, s.key))
  FROM (SELECT * FROM input ORDER BY n OFFSET 0) s""",
    "log": """
WITH input AS (
  SELECT u.id, u.key, u.payload, u.n, (hashtext(coalesce(u.key, u.id)) & 255)::int2 AS lane
    FROM unnest(%(ids)s::text[], %(keys)s::text[], %(payloads)s::jsonb[]) WITH ORDINALITY AS u(id, key, payload, n)),
event AS (
  INSERT INTO co_log.events (id, type, key, payload)
  SELECT id, 'bench.event', key, payload FROM input ORDER BY n)
INSERT INTO co_log.deliveries (handler, lane, txn, ordinal, event_id, key)
SELECT 'bench.commit-order', s.lane, pg_current_xact_id(),
       co_log.note('co_log.lane_commits', 'bench.commit-order', s.lane), s.id, s.key
  FROM (SELECT * FROM input ORDER BY n OFFSET 0) s""",
}

# Every backend waiting for a lock, with each backend that blocks it: the blocker's state,
# statement and transaction id, and the lock waited for. One statement, so one snapshot of
# the activity view.
WAITS = """
SELECT w.pid, b.pid, b.backend_xid::text, b.state, left(b.query, 40), l.locktype, l.objsubid
  FROM pg_stat_activity w
  CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS bp(pid)
  JOIN pg_stat_activity b ON b.pid = bp.pid
  LEFT JOIN LATERAL (SELECT locktype, objsubid FROM pg_locks l
                      WHERE l.pid = w.pid AND NOT l.granted LIMIT 1) l ON true
 WHERE w.datname = current_database() AND w.wait_event_type = 'Lock'"""

# Locks PostgreSQL holds for a moment, not to the end of a transaction: a wait for one is
# not a wait for another transaction.
BRIEF = ("extend", "page")


def reset(conninfo, path):
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("SET client_min_messages = warning")
        if path == "relaybus":
            c.execute("TRUNCATE relaybus.deliveries, relaybus.events, relaybus.key_counters")
            c.execute("SELECT relaybus.subscribe(%s, ARRAY['bench.event'])", (HANDLER,))
        else:
            c.execute(SCHEMAS[path])


def event(keyed):
    return dict(id=uuid.uuid4().hex, key=f"k{random.randrange(1_000_000)}" if keyed else None,
                payload=json.dumps({"n": 1}))


def statement(conn, path):
    kind = random.random()
    if kind < 0.8:
        conn.execute(ONE[path], event(random.random() < 0.5))
    else:
        events = [event(random.random() < 0.5) for _ in range(5)]
        conn.execute(MANY[path], dict(ids=[e["id"] for e in events], keys=[e["key"] for e in events],
                                      payloads=[e["payload"] for e in events]))


def contention(conninfo, path, seconds, connections):
    reset(conninfo, path)
    stop = time.monotonic() + seconds
    counts = dict(commits=0, deadlocks=0, other_errors=0)
    lock = threading.Lock()
    errors = []

    def publisher():
        with psycopg.connect(conninfo) as conn:
            while time.monotonic() < stop:
                try:
                    for _ in range(3):
                        statement(conn, path)
                        time.sleep(random.uniform(0, 0.010))
                    conn.commit()
                    with lock:
                        counts["commits"] += 1
                except psycopg.errors.DeadlockDetected:
                    conn.rollback()
                    with lock:
                        counts["deadlocks"] += 1
                except psycopg.Error as e:
                    conn.rollback()
                    with lock:
                        counts["other_errors"] += 1
                        errors.append(str(e).splitlines()[0])

    threads = [threading.Thread(target=publisher) for _ in range(connections)]
    for t in threads:
        t.start()
    # A sample's pair (waiter, blocker, blocker's transaction) counts as a wait on another
    # transaction's work only if the blocker is outside COMMIT and the same pair, with the
    # same blocker transaction outside COMMIT, is seen again in the next sample (20 ms
    # later): the activity view and pg_blocking_pids are not read at one instant, so a
    # single sample can pair a lock held at commit with the blocker's next transaction.
    samples = 0
    tally = dict(on_commit=0, on_work_samples=0, on_work_confirmed=0, brief=0)
    kinds = {}
    previous = set()
    with psycopg.connect(conninfo, autocommit=True) as watcher:
        while time.monotonic() < stop:
            samples += 1
            current = set()
            for waiter, blocker, xid, state, query, locktype, objsubid in watcher.execute(WAITS):
                kind = f"{locktype}{'/' + str(objsubid) if locktype == 'advisory' else ''}"
                if locktype in BRIEF:
                    tally["brief"] += 1
                    kinds[kind + ":brief"] = kinds.get(kind + ":brief", 0) + 1
                    continue
                on_commit = state == "active" and (query or "").strip().upper().startswith("COMMIT")
                kind += ":commit" if on_commit else f":{state}"
                kinds[kind] = kinds.get(kind, 0) + 1
                if on_commit:
                    tally["on_commit"] += 1
                    continue
                tally["on_work_samples"] += 1
                pair = (waiter, blocker, xid)
                if xid is not None and pair in previous:
                    tally["on_work_confirmed"] += 1
                current.add(pair)
            previous = current
            time.sleep(0.02)
    for t in threads:
        t.join()
    return dict(path=path, seconds=seconds, connections=connections, **counts, samples=samples,
                **tally, kinds=kinds,
                errors=sorted(set(errors))[:5])


def wal_lsn(c):
    return c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]


def throughput(conninfo, path, n):
    reset(conninfo, path)
    out = {}
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("CHECKPOINT")
        events = [event(i % 2 == 0) for i in range(n)]
        start_lsn, start = wal_lsn(c), time.perf_counter()
        for e in events:
            c.execute(ONE[path], e)
        elapsed = time.perf_counter() - start
        wal = c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (start_lsn,)).fetchone()[0]
        out["one_per_txn"] = dict(rate=n / elapsed, wal_per_event=float(wal) / n)
        events = [event(i % 2 == 0) for i in range(n)]
        start_lsn, start = wal_lsn(c), time.perf_counter()
        for s in range(0, n, 100):
            chunk = events[s:s + 100]
            c.execute(MANY[path], dict(ids=[e["id"] for e in chunk], keys=[e["key"] for e in chunk],
                                       payloads=[e["payload"] for e in chunk]))
        elapsed = time.perf_counter() - start
        wal = c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (start_lsn,)).fetchone()[0]
        out["hundred_per_statement"] = dict(rate=n / elapsed, wal_per_event=float(wal) / n)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conn", required=True)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--paths", default="relaybus,counter,log,staged")
    p.add_argument("--throughput", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    paths = args.paths.split(",")
    results = {"contention": [], "throughput": {}}
    if args.seconds > 0:
        for path in paths:
            r = contention(args.conn, path, args.seconds, args.connections)
            results["contention"].append(r)
            print(json.dumps(r), flush=True)
    if args.throughput:
        for rnd in range(args.rounds):
            for path in paths:
                r = throughput(args.conn, path, args.throughput)
                results["throughput"].setdefault(path, []).append(r)
                print(json.dumps(dict(round=rnd, path=path, **r)), flush=True)
        for path, runs in results["throughput"].items():
            for k in ("one_per_txn", "hundred_per_statement"):
                print(f"{path:9} {k:22} rate median {statistics.median(r[k]['rate'] for r in runs):9.0f}/s "
                      f"WAL/event {statistics.median(r[k]['wal_per_event'] for r in runs):6.0f} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
