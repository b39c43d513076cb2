#!/usr/bin/env python3
"""PgQ 3.5 (Debian's postgresql-15-pgq3, ticker pgqd) through its SQL API, as its docs
intend: pgq.insert_event to produce; pgq.next_batch, the batch's events, pgq.finish_batch
to consume. The runner protocol: README.md; what runners share: runner.py.

PgQ makes events visible only at a tick (a snapshot pgq.ticker() stores): a batch is the
events committed between a consumer's last tick and the next one. So every run has a
ticker: Debian's pgqd, started by begin() and stopped by end(), with its defaults or
with the tuned settings of PRESETS. The preload ends with one tick of its own, so the
drain starts, as relaybus's does, with all its events ready to consume.
"""
import atexit
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runner  # noqa: E402
import psycopg  # noqa: E402
from psycopg import conninfo as libpq  # noqa: E402

QUEUE, CONSUMER, TYPE = "bench", "c", "bench.event"
CURSOR = "bench_batch"
POLL_S = 0.01  # a consumer's sleep when next_batch has nothing (PgQ leaves it to the consumer)
HARNESS = runner.HARNESS

# The ticker of each preset: pgqd's settings (its ini) and the queue's (pgq.set_queue_config;
# the values of `defaults` are pgq.queue's column defaults, set again in case a previous
# run left tuned ones). pgqd calls pgq.ticker() every ticker_period seconds, which ticks
# once ticker_max_count events are new or the oldest new one is ticker_max_lag old.
PRESETS = {
    "defaults": dict(pgqd={}, queue=dict(ticker_max_count="500", ticker_max_lag="3 seconds",
                                         ticker_idle_period="1 minute")),
    # Tick every 10 ms whenever anything is new: max_lag 0 makes every pgq.ticker() call
    # with new events tick; idle queues still tick less and less often (idle_period).
    "tuned": dict(pgqd=dict(ticker_period="0.01"), queue=dict(ticker_max_count="500", ticker_max_lag="0",
                                                              ticker_idle_period="1 minute")),
}


def consumer_names(count):
    """The registered consumers of a run with `count` consumer processes: "c", "c-1", ..."""
    return [CONSUMER] + [f"{CONSUMER}-{i}" for i in range(1, count)]


# Which consumer handles an event when several share the queue: by its key (its id when it
# has none), so that every key stays with one consumer and keeps its order. The same
# expression, with the consumer count, serves unfinished().
SHARE_SQL = "(hashtext(coalesce({t}ev_extra1, {t}ev_extra2)) & 2147483647) % {count}"


def share_filter(count, index):
    """get_batch_cursor's extra where clause for consumer `index` of `count` (None: all)."""
    return None if count == 1 else SHARE_SQL.format(t="", count=count) + f" = {index}"


def pgq_version():
    """The installed extension's default_version (pgq.control), without a connection."""
    try:
        share = subprocess.run(["pg_config", "--sharedir"], capture_output=True, text=True).stdout.strip()
        with open(os.path.join(share, "extension", "pgq.control")) as f:
            return re.search(r"default_version\s*=\s*'([^']+)'", f.read()).group(1)
    except (OSError, AttributeError):
        return "3.5"


def die_with_parent():
    """In pgqd's child: SIGTERM when the runner dies, so no ticker outlives its run."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Pgqd:
    """Debian's pgqd for one database: an ini in a temporary directory, the process in the
    foreground (so it is ours to stop), ready once it has found the pgq schema."""

    def __init__(self, conninfo, settings):
        params = libpq.conninfo_to_dict(conninfo)
        db = params.pop("dbname")
        self.dir = tempfile.mkdtemp(prefix="relaybus-pgqd-")
        self.log = os.path.join(self.dir, "pgqd.log")
        lines = ["[pgqd]", f"logfile = {self.log}", f"pidfile = {os.path.join(self.dir, 'pgqd.pid')}",
                 f"base_connstr = {libpq.make_conninfo(**params)}", f"initial_database = {db}",
                 f"database_list = {db}", "syslog = 0"]
        lines += [f"{k} = {v}" for k, v in settings.items()]
        self.ini = os.path.join(self.dir, "pgqd.ini")
        with open(self.ini, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.proc = None

    def start(self, timeout_s=15):
        self.proc = subprocess.Popen(["pgqd", "-q", self.ini], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgqd exited with {self.proc.returncode}: {self.tail()}")
            if "pgq version ok" in self.tail():
                return
            time.sleep(0.02)
        raise RuntimeError(f"pgqd not ready after {timeout_s} s: {self.tail()}")

    def tail(self):
        try:
            with open(self.log) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


class PgQ:
    default_batch = 500

    def connect(self, conninfo):
        return psycopg.connect(conninfo, autocommit=True)

    def info(self):
        return dict(
            name="PgQ", version=pgq_version(), ordered_keys=True, acknowledges="batches",
            notes="publish: pgq.insert_event(queue, type, data, key, id, NULL, NULL), one per transaction; "
                  "100 per statement as SELECT count(pgq.insert_event(...)) FROM unnest(...) (its public "
                  "API; COPY into pgq.current_event_table() needs a second statement). Consume: "
                  "pgq.next_batch, then in one transaction pgq.get_batch_cursor (--batch events per fetch) "
                  "and pgq.finish_batch; a batch is what was committed between two ticks and is "
                  "acknowledged as a whole (a failure redelivers the batch, or event_retry per event). "
                  "Ticker: pgqd for every run; defaults = pgqd's defaults (ticker_period 1 s) and the "
                  "queue's (ticker_max_count 500, ticker_max_lag 3 s); tuned = ticker_period 0.01 s, "
                  "ticker_max_lag 0 (a tick every 10 ms while events arrive). The preload ends with one "
                  "tick (force_tick + ticker). Every registered consumer gets every event (no competing "
                  "consumers in pgq; pgq_coop is not packaged): K consumer processes are K registered "
                  "consumers, each handling the events whose hashtext(key or id) % K is its own "
                  "(get_batch_cursor's extra where). ordered_keys: a batch comes in ev_id order (insertion "
                  "order), batches in tick order, and a key goes to one consumer, so a key's events are "
                  "handled in the order they were inserted - which is publish order because each key has "
                  "one publisher; PgQ has no per-key order of its own across concurrent producers. "
                  "A consumer polls next_batch every 10 ms when idle.")

    # ------------------------------------------------------------------ reset, publish

    def reset(self, conn):
        """Drops and recreates the queue in one transaction: drop_queue locks the queue's row
        first, as pgqd's maintenance (rotation) does before it locks the event tables, and the
        ticker's tick insert waits on that row, so neither deadlocks with us; a lock wait that
        times out anyway is tried again."""
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgq")
        for attempt in range(5):
            try:
                with conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '10s'")
                    conn.execute("SELECT pgq.drop_queue(queue_name, true) FROM pgq.queue WHERE queue_name = %s",
                                 (QUEUE,))
                    conn.execute("SELECT pgq.create_queue(%s)", (QUEUE,))
                    conn.execute("SELECT pgq.register_consumer(%s, %s)", (QUEUE, CONSUMER))
                return
            except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def publish(self, conn, events):
        """ev_type = the type, ev_data = the payload, ev_extra1 = the key, ev_extra2 = the id."""
        if len(events) == 1:
            e = events[0]
            conn.execute("SELECT pgq.insert_event(%s, %s, %s, %s, %s, NULL, NULL)",
                         (QUEUE, TYPE, e.payload, e.key, e.id))
            return
        conn.execute("SELECT count(pgq.insert_event(%s, %s, u.data, u.key, u.id, NULL, NULL))"
                     " FROM unnest(%s::text[], %s::text[], %s::text[]) AS u(data, key, id)",
                     (QUEUE, TYPE, [e.payload for e in events], [e.key for e in events], [e.id for e in events]))

    def preloaded(self, conn):
        """One tick over the preload (no pgqd runs between runs): force_tick makes the next
        pgq.ticker() tick however few events are new, as its docs say."""
        conn.execute("SELECT pgq.force_tick(%s)", (QUEUE,))
        if conn.execute("SELECT pgq.ticker(%s)", (QUEUE,)).fetchone()[0] is None:
            raise RuntimeError("pgq.ticker() made no tick after the preload")

    # ------------------------------------------------------------------ a run's ticker

    def begin(self, conn, scenario):
        """The preset's queue settings, the extra consumers of a drain (registered at the first
        one's position, so they see the same events), then pgqd."""
        preset = PRESETS[self.options.preset]
        for name, value in preset["queue"].items():
            conn.execute(f"SELECT {HARNESS} pgq.set_queue_config(%s, %s, %s)", (QUEUE, name, value))
        if scenario == "drain":
            for name in consumer_names(self.options.consumers)[1:]:
                conn.execute(f"SELECT {HARNESS} pgq.register_consumer_at(%s, %s, (SELECT s.sub_last_tick"
                             " FROM pgq.subscription s JOIN pgq.consumer c ON c.co_id = s.sub_consumer"
                             " JOIN pgq.queue q ON q.queue_id = s.sub_queue"
                             " WHERE q.queue_name = %s AND c.co_name = %s))", (QUEUE, name, QUEUE, CONSUMER))
        self.ticker = Pgqd(self.options.conn, preset["pgqd"])
        self.ticker.start()

    def end(self, conn):
        self.ticker.stop()

    # ------------------------------------------------------------------ consume

    def consume(self, conninfo, options, handled, should_stop, index):
        name = consumer_names(options.consumers)[index]
        where = share_filter(options.consumers, index)
        with self.connect(conninfo) as conn:
            while not should_stop():
                # Autocommit: the batch stays this consumer's until finish_batch, so a consumer
                # that dies before it gets the same batch again.
                batch = conn.execute("SELECT pgq.next_batch(%s, %s)", (QUEUE, name)).fetchone()[0]
                if batch is None:
                    time.sleep(POLL_S)
                    continue
                with conn.transaction():  # the cursor lives in it; finish_batch commits with it
                    self.handle_batch(conn, batch, options.batch, where, handled)
                    conn.execute("SELECT pgq.finish_batch(%s::bigint)", (batch,))

    @staticmethod
    def handle_batch(conn, batch, fetch, where, handled):
        # The first `fetch` rows come with the call, the rest by FETCH; both have the columns
        # of pgq.event_template: ev_id, ev_time, ev_txid, ev_retry, ev_type, ev_data, ev_extra1..4.
        rows = conn.execute("SELECT * FROM pgq.get_batch_cursor(%s::bigint, %s::text, %s::int4, %s::text)",
                            (batch, CURSOR, fetch, where)).fetchall()
        while True:
            for r in rows:
                handled(r[7], r[6], json.loads(r[5])["n"], r[3] or 0)
            if len(rows) < fetch:
                return
            rows = conn.execute(f"FETCH {int(fetch)} FROM {CURSOR}").fetchall()

    # ------------------------------------------------------------------ what is there

    @staticmethod
    def event_table(conn):
        """The queue's parent event table (its rotated tables inherit from it)."""
        name = conn.execute(f"SELECT {HARNESS} queue_data_pfx FROM pgq.queue WHERE queue_name = %s",
                            (QUEUE,)).fetchone()[0]
        if not re.fullmatch(r"pgq\.event_\d+", name):
            raise RuntimeError(f"unexpected event table {name}")
        return name

    def unfinished(self, conn):
        """Events that no finished batch covered: for each event, the consumer it belongs to
        (SHARE_SQL over the registered consumers) has not passed a tick that sees it. Counts
        what was not ticked yet too: a mixed run waits for the ticker."""
        share = SHARE_SQL.format(t="e.", count="k.n").replace("%", "%%")  # a literal % for psycopg
        return conn.execute(
            f"SELECT {HARNESS} count(*) FROM {self.event_table(conn)} e,"
            " (SELECT CASE WHEN c.co_name = %s THEN 0 ELSE split_part(c.co_name, '-', 2)::int END AS share,"
            "         t.tick_snapshot AS snap"
            "    FROM pgq.queue q JOIN pgq.subscription s ON s.sub_queue = q.queue_id"
            "    JOIN pgq.consumer c ON c.co_id = s.sub_consumer"
            "    JOIN pgq.tick t ON t.tick_queue = s.sub_queue AND t.tick_id = s.sub_last_tick"
            "   WHERE q.queue_name = %s) p,"
            " (SELECT count(*) AS n FROM pgq.queue q JOIN pgq.subscription s ON s.sub_queue = q.queue_id"
            "   WHERE q.queue_name = %s) k"
            f" WHERE p.share = {share}"
            # every event the snapshot does not see has a txid from its xmin on: the ev_txid
            # index finds them, so the count is cheap once the consumers have caught up
            "   AND e.ev_txid >= txid_snapshot_xmin(p.snap) AND NOT txid_visible_in_snapshot(e.ev_txid, p.snap)",
            (CONSUMER, QUEUE, QUEUE)).fetchone()[0]

    def stored(self, conn):
        return [r[0] for r in conn.execute(f"SELECT {HARNESS} ev_extra2 FROM {self.event_table(conn)}")]

    def left(self, conn):
        # PgQ has no dead letters: a failed event goes to its retry queue, back in the queue later.
        return self.unfinished(conn), 0


if __name__ == "__main__":
    sys.exit(runner.main(PgQ()))
