#!/usr/bin/python3
"""The commit log (src/pg/commit_order.hpp) hands out positions per (handler, lane) in the
order the transactions become visible, and makes publishers wait for nothing but another
transaction's commit. Checked against a database of its own, through the library's
relaybus_commit_order_note, declared here (no version of the extension's SQL declares it):

- order: 16 connections commit transactions that each touch 1-4 of 8 lanes over several
  statements, with sleeps between them, while a reader keeps reading the log: every read
  sees, in every lane, the positions 1..max without a gap, so no position ever appears
  below one a reader already saw; no transaction fails;
- waits: a transaction that noted a lane and stays open holds up nobody: another commits
  through the same lane at once;
- snapshots: a REPEATABLE READ or SERIALIZABLE transaction whose snapshot predates another
  transaction's commit in its lane still takes the positions after it;
- subtransactions: a note rolled back with a savepoint keeps its ordinal (the position is
  absent), and a rolled-back transaction leaves nothing noted for the next one;
- PREPARE TRANSACTION of a transaction that noted is refused with 0A000;
- the row is written as the role that noted (a SECURITY DEFINER publisher whose caller
  may not insert into the log commits), and a commit whose log write fails (the noting
  role may not insert) fails as a whole: the rows it wrote are gone;
- the commit's statement ignores the session's search_path: an operator + and a function
  unnest planted in a schema ahead of pg_catalog are not called;
- staged deliveries (commit_order::stage, the alternative measured beside the log): not
  visible to their own transaction, gone with a rolled-back savepoint, inserted at commit
  with positions 1, 2, ... per lane that a concurrent reader never sees with a gap;
- a partitioned table to write them to (storage changed by hand) fails the commit with
  XX000 instead of crashing the server.

  commit_order_check.py --conn CONNINFO   (a database of its own; superuser)
"""
import argparse
import random
import sys
import threading
import time

import psycopg

SETUP = """
DROP SCHEMA IF EXISTS co CASCADE;
CREATE SCHEMA co;
CREATE TABLE co.log (handler text NOT NULL, lane int2 NOT NULL, first_position int8 NOT NULL,
  span int4 NOT NULL, txn xid8 NOT NULL, PRIMARY KEY (handler, lane, first_position));
CREATE TABLE co.deliveries (handler text NOT NULL, lane int2 NOT NULL, txn xid8 NOT NULL,
  ordinal int4 NOT NULL, PRIMARY KEY (handler, lane, txn, ordinal));
CREATE TABLE co.staged (handler text NOT NULL, lane int2 NOT NULL, position int8 NOT NULL,
  event_id text NOT NULL, key text, PRIMARY KEY (handler, lane, position));
-- The same, partitioned (as a hand-made change of relaybus.deliveries would be): its index
-- on the parent has no pages to scan for a lane's last position.
CREATE TABLE co.staged_parts (handler text NOT NULL, lane int2 NOT NULL, position int8 NOT NULL,
  event_id text NOT NULL, key text, PRIMARY KEY (handler, lane, position)) PARTITION BY LIST (lane);
CREATE TABLE co.staged_parts_1 PARTITION OF co.staged_parts FOR VALUES IN (1);
CREATE FUNCTION co.stage(regclass, text, int2, text, text) RETURNS void
  AS 'relaybus', 'relaybus_commit_order_stage' LANGUAGE C VOLATILE;
CREATE FUNCTION co.note(regclass, text, int2) RETURNS int4
  AS 'relaybus', 'relaybus_commit_order_note' LANGUAGE C STRICT VOLATILE;
-- A publish: the delivery row with the transaction's id and its ordinal.
CREATE FUNCTION co.publish(h text, l int2) RETURNS int4 LANGUAGE sql AS $$
  INSERT INTO co.deliveries VALUES (h, l, pg_current_xact_id(), co.note('co.log', h, l))
  RETURNING ordinal $$;
"""

# Per (handler, lane): the logged ranges must tile 1..max.
GAPS = """
SELECT count(*) FROM (
  SELECT first_position, span,
         lag(first_position + span) OVER (PARTITION BY handler, lane ORDER BY first_position) AS expected
    FROM co.log) s
 WHERE first_position <> coalesce(expected, 1)"""

failures = 0


def check(ok, what):
    global failures
    print(("ok - " if ok else "not ok - ") + what, flush=True)
    if not ok:
        failures += 1


def order(conninfo):
    stop = time.monotonic() + 8
    errors, commits = [], [0]
    lock = threading.Lock()

    def publisher():
        with psycopg.connect(conninfo) as c:
            while time.monotonic() < stop:
                try:
                    for lane in random.sample(range(8), random.randint(1, 4)):
                        for handler in random.sample(["a", "b"], random.randint(1, 2)):
                            c.execute("SELECT co.publish(%s, %s::int2)", (handler, lane))
                        time.sleep(random.uniform(0, 0.004))
                    c.commit()
                    with lock:
                        commits[0] += 1
                except psycopg.Error as e:
                    c.rollback()
                    with lock:
                        errors.append(str(e).splitlines()[0])

    threads = [threading.Thread(target=publisher) for _ in range(16)]
    for t in threads:
        t.start()
    reads = bad_reads = 0
    with psycopg.connect(conninfo, autocommit=True) as reader:
        while time.monotonic() < stop:
            reads += 1
            if reader.execute(GAPS).fetchone()[0] != 0:
                bad_reads += 1
    for t in threads:
        t.join()
    check(not errors, f"16 publishers over 8 lanes: {commits[0]} commits, no errors {sorted(set(errors))[:3]}")
    check(commits[0] > 100, "the publishers made progress")
    check(reads > 50 and bad_reads == 0,
          f"{reads} reads during the run saw every lane's positions without a gap ({bad_reads} did not)")
    with psycopg.connect(conninfo, autocommit=True) as c:
        check(c.execute(GAPS).fetchone()[0] == 0, "after the run, the ranges tile every lane from 1")
        spans_match = c.execute("""
          SELECT bool_and(n = span) FROM co.log g
            JOIN (SELECT handler, lane, txn, count(*) AS n FROM co.deliveries GROUP BY 1, 2, 3) d
              USING (handler, lane, txn) WHERE g.handler IN ('a', 'b')""").fetchone()[0]
        rows_logged = c.execute("""
          SELECT count(*) = 0 FROM co.deliveries d
           WHERE NOT EXISTS (SELECT 1 FROM co.log g WHERE (g.handler, g.lane, g.txn) = (d.handler, d.lane, d.txn))
        """).fetchone()[0]
        check(spans_match and rows_logged, "each range's span is its transaction's deliveries in that lane, and every delivery is logged")


def waits(conninfo):
    with psycopg.connect(conninfo) as open_txn, psycopg.connect(conninfo, autocommit=True) as other:
        open_txn.execute("SELECT co.publish('a', 5::int2)")
        other.execute("SET statement_timeout = '2s'")
        try:
            other.execute("SELECT co.publish('a', 5::int2)")
            check(True, "a publisher commits through a lane another open transaction noted, without waiting")
        except psycopg.errors.QueryCanceled:
            check(False, "a publisher commits through a lane another open transaction noted, without waiting")
        open_txn.commit()
        first = other.execute("SELECT txn::text FROM co.log WHERE handler = 'a' AND lane = 5 ORDER BY first_position DESC LIMIT 2").fetchall()
        check(len(first) == 2, "both got their positions")


def snapshots(conninfo):
    for level in ("REPEATABLE READ", "SERIALIZABLE"):
        with psycopg.connect(conninfo) as old, psycopg.connect(conninfo, autocommit=True) as other:
            old.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
            before = old.execute("SELECT coalesce(max(first_position + span), 1) FROM co.log WHERE handler = 'a' AND lane = 6").fetchone()[0]
            old.execute("SELECT co.publish('a', 6::int2)")
            other.execute("SELECT co.publish('a', 6::int2)")  # commits first, after old's snapshot
            try:
                old.commit()
                ok = True
            except psycopg.Error as e:
                ok = False
                print("#", e)
            check(ok, f"a {level} publisher whose snapshot predates another commit in its lane commits")
            rows = other.execute("SELECT first_position FROM co.log WHERE handler = 'a' AND lane = 6 AND first_position >= %s ORDER BY 1", (before,)).fetchall()
            check([r[0] for r in rows] == [before, before + 1],
                  f"{level}: the later commit took the later position ({rows})")
            check(other.execute(GAPS).fetchone()[0] == 0, f"{level}: no gap")


def subtransactions(conninfo):
    with psycopg.connect(conninfo) as c:
        c.execute("SAVEPOINT s")
        first = c.execute("SELECT co.publish('s', 1::int2)").fetchone()[0]
        c.execute("ROLLBACK TO SAVEPOINT s")
        second = c.execute("SELECT co.publish('s', 1::int2)").fetchone()[0]
        c.commit()
        check((first, second) == (0, 1), f"a note rolled back with its savepoint keeps its ordinal ({first}, {second})")
        span = c.execute("SELECT span FROM co.log WHERE handler = 's' AND lane = 1").fetchone()[0]
        n = c.execute("SELECT count(*) FROM co.deliveries WHERE handler = 's' AND lane = 1").fetchone()[0]
        c.commit()
        check((span, n) == (2, 1), f"the range spans both ordinals, one delivery exists: position 1 is absent (span {span}, rows {n})")
        c.execute("SELECT co.publish('r', 1::int2)")
        c.rollback()
        again = c.execute("SELECT co.publish('r', 1::int2)").fetchone()[0]
        c.commit()
        rows = c.execute("SELECT first_position, span FROM co.log WHERE handler = 'r'").fetchall()
        c.commit()
        check(again == 0 and rows == [(1, 1)], f"a rolled-back transaction leaves nothing noted ({again}, {rows})")


def prepare(conninfo):
    with psycopg.connect(conninfo) as c:
        c.execute("SELECT co.publish('p', 1::int2)")
        try:
            c.execute("PREPARE TRANSACTION 'co_check'")
            check(False, "PREPARE TRANSACTION after a note is refused")
        except psycopg.Error as e:
            check(e.sqlstate == "0A000", f"PREPARE TRANSACTION after a note is refused with 0A000 ({e.sqlstate}: {str(e).splitlines()[0]})")
        c.rollback()
        left = c.execute("SELECT count(*) FROM co.deliveries WHERE handler = 'p'").fetchone()[0]
        c.commit()
        check(left == 0, "and the refused transaction wrote nothing")


def roles(conninfo):
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute("""
          DROP ROLE IF EXISTS co_caller; CREATE ROLE co_caller;
          GRANT USAGE ON SCHEMA co TO co_caller;
          CREATE FUNCTION co.publish_definer(h text, l int2) RETURNS int4 LANGUAGE sql
            SECURITY DEFINER SET search_path = pg_catalog AS $$ SELECT co.publish(h, l) $$;
          REVOKE ALL ON FUNCTION co.publish_definer(text, int2) FROM PUBLIC;
          GRANT EXECUTE ON FUNCTION co.publish_definer(text, int2) TO co_caller;
          GRANT EXECUTE ON FUNCTION co.publish(text, int2) TO co_caller;
          GRANT INSERT, SELECT ON co.deliveries TO co_caller;""")
    with psycopg.connect(conninfo) as c:
        c.execute("SET ROLE co_caller")
        c.execute("SELECT co.publish_definer('d', 2::int2)")
        try:
            c.commit()
            check(True, "a SECURITY DEFINER publisher's log row is written as its owner, not as the caller")
        except psycopg.Error as e:
            check(False, f"a SECURITY DEFINER publisher's log row is written as its owner ({e})")
        c.execute("SET ROLE co_caller")
        c.execute("SELECT co.publish('u', 2::int2)")  # as co_caller, who may not insert into co.log
        try:
            c.commit()
            check(False, "a commit whose log write is refused fails")
        except psycopg.Error as e:
            check(e.sqlstate == "42501", f"a commit whose log write is refused fails with 42501 ({e.sqlstate})")
        n = c.execute("SELECT count(*) FROM co.deliveries WHERE handler = 'u'").fetchone()[0]
        c.commit()
        check(n == 0, "and its delivery rows are gone with it")


def search_path(conninfo):
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute("""
          DROP SCHEMA IF EXISTS evil CASCADE; CREATE SCHEMA evil;
          CREATE FUNCTION evil.plus(int8, int4) RETURNS int8 LANGUAGE plpgsql AS
            $$ BEGIN RAISE EXCEPTION 'evil + called'; END $$;
          CREATE OPERATOR evil.+ (LEFTARG = int8, RIGHTARG = int4, FUNCTION = evil.plus);
          CREATE FUNCTION evil.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS
            $$ BEGIN RAISE EXCEPTION 'evil unnest called'; END $$;""")
    with psycopg.connect(conninfo) as c:
        c.execute("SET search_path = evil, pg_catalog, co")
        c.execute("SELECT co.publish('e', 3::int2)")
        c.execute("SELECT co.publish('e', 3::int2)")
        try:
            c.commit()
            check(True, "the commit's log write ignores operators and functions planted ahead of pg_catalog")
        except psycopg.Error as e:
            check(False, f"the commit's log write ignores planted operators ({e})")


STAGED_GAPS = """
SELECT count(*) FROM (
  SELECT position, lag(position) OVER (PARTITION BY handler, lane ORDER BY position) AS before
    FROM co.staged) s
 WHERE position <> coalesce(before, 0) + 1"""


def partitioned(conninfo):
    """A partitioned table to write staged deliveries to: the commit fails with XX000 and
    rolls back; the backend (and the server) live on. It read the parent's index pages,
    which do not exist, and crashed the server (signal 11)."""
    with psycopg.connect(conninfo) as c:
        started = c.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        c.commit()
        c.execute("SELECT co.stage('co.staged_parts', 'x', 1::int2, 'p-1', NULL)")
        try:
            c.commit()
            check(False, "a commit of a delivery staged for a partitioned table is refused")
        except psycopg.errors.InternalError as e:
            check(e.sqlstate == "XX000" and "not a plain table" in str(e),
                  f"a commit of a delivery staged for a partitioned table fails with XX000: {e}")
    with psycopg.connect(conninfo, autocommit=True) as c:
        again = c.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        rows = c.execute("SELECT count(*) FROM co.staged_parts").fetchone()[0]
    check(again == started and rows == 0, "the server did not restart, and nothing was written")


def staged(conninfo):
    """commit_order::stage: deliveries kept until commit, inserted with their positions."""
    with psycopg.connect(conninfo) as c:
        c.execute("SAVEPOINT s")
        c.execute("SELECT co.stage('co.staged', 'x', 1::int2, 'gone', NULL)")
        c.execute("ROLLBACK TO SAVEPOINT s")
        c.execute("SAVEPOINT t")
        c.execute("SELECT co.stage('co.staged', 'x', 1::int2, 'kept-1', 'k')")
        c.execute("RELEASE SAVEPOINT t")
        c.execute("SELECT co.stage('co.staged', 'x', 1::int2, 'kept-2', NULL)")
        own = c.execute("SELECT count(*) FROM co.staged WHERE handler = 'x'").fetchone()[0]
        c.commit()
        rows = c.execute("SELECT position, event_id, key FROM co.staged WHERE handler = 'x' ORDER BY position").fetchall()
        c.commit()
        check(own == 0, "a transaction does not see its own staged deliveries before it commits")
        check(rows == [(1, "kept-1", "k"), (2, "kept-2", None)],
              f"a staged delivery rolled back with its savepoint is gone, the rest take positions 1.. in order ({rows})")
    stop = time.monotonic() + 5
    errors, commits = [], [0]
    lock = threading.Lock()

    def publisher(n):
        i = 0
        with psycopg.connect(conninfo) as c:
            while time.monotonic() < stop:
                try:
                    for lane in random.sample(range(4), random.randint(1, 3)):
                        i += 1
                        c.execute("SELECT co.stage('co.staged', 'y', %s::int2, %s, NULL)", (lane, f"{n}-{i}"))
                        time.sleep(random.uniform(0, 0.003))
                    c.commit()
                    with lock:
                        commits[0] += 1
                except psycopg.Error as e:
                    c.rollback()
                    with lock:
                        errors.append(str(e).splitlines()[0])

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    reads = bad = 0
    with psycopg.connect(conninfo, autocommit=True) as reader:
        while time.monotonic() < stop:
            reads += 1
            bad += reader.execute(STAGED_GAPS).fetchone()[0] != 0
    for t in threads:
        t.join()
    check(not errors and commits[0] > 50, f"8 staging publishers over 4 lanes: {commits[0]} commits, no errors {sorted(set(errors))[:3]}")
    check(reads > 20 and bad == 0, f"{reads} reads saw every lane's staged positions without a gap ({bad} did not)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--conn", required=True)
    conninfo = p.parse_args().conn
    with psycopg.connect(conninfo, autocommit=True) as c:
        c.execute("SET client_min_messages = warning")
        c.execute(SETUP)
    for part in (subtransactions, waits, snapshots, prepare, roles, search_path, order, staged,
                 partitioned):
        part(conninfo)
    print(f"# {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
