#!/usr/bin/python3
"""Two connections of one worker, and how they lock and judge its lanes
(test/integration/lane_locks.sh runs it in a database of its own).

order-*: every statement that waits for lane locks takes them in one order (handler in
  byte order, then lane). extend_lease used to lock in the table's physical order (the
  order handlers were subscribed in) while claim and relinquish sorted: with handlers
  subscribed as 'zz' then 'aa', a renewal on one connection and a claim or a relinquish
  on another deadlocked (40P01), so the C++ runtime's lease renewer lost renewals. Each
  case holds the worker's 'aa' lane in the second connection (as a claim that has locked
  its first lane), starts extend_lease in the first, then runs the claim or relinquish.
alive-*: a claim or extend_lease in a transaction that had already read backend activity
  judged a connection opened since then dead (PostgreSQL keeps that read for the rest of
  the transaction), took over its lanes and charged its delivery an attempt.

Prints "ok - ..." / "not ok - ..." per check and a closing "N passed, N failed".
"""
import sys
import threading
import time

import psycopg

CONNINFO = sys.argv[1]
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok - {what}")
    else:
        failed += 1
        print(f"not ok - {what}")


def connect():
    return psycopg.connect(CONNINFO, autocommit=True)


def setup(c, handlers, events):
    c.execute("SET client_min_messages = warning")
    # 0.2's per-key counters; 0.3.0's lane progress and exception rows.
    version = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'relaybus'").fetchone()[0]
    internal = "relaybus.key_counters" if version.startswith("0.2") else "relaybus.lane_progress, relaybus.exceptions"
    c.execute(f"TRUNCATE relaybus.deliveries, relaybus.events, {internal}")
    c.execute("SELECT relaybus.unsubscribe(handler) FROM relaybus.subscriptions")
    c.execute("DELETE FROM relaybus.lanes")
    for h in handlers:  # in this order: the lanes table's physical order
        c.execute("SELECT relaybus.subscribe(%s, ARRAY[%s])", (h, h + ".t"))
    for h, id_ in events:
        c.execute("SELECT relaybus.publish(%s, '{}', NULL, %s)", (h + ".t", id_))


def order_case(second_statement, label):
    with connect() as a, connect() as b:
        setup(a, ["zz", "aa"], [("zz", "z1"), ("aa", "a1")])
        got = a.execute("SELECT count(*) FROM relaybus.claim('w', 10, '30 seconds', NULL, 'H')").fetchone()[0]
        check(got == 2, f"{label}: setup: the worker holds a lane of zz and of aa")
        a.execute("SET deadlock_timeout = '200ms'")
        b.execute("SET deadlock_timeout = '200ms'")
        b.execute("BEGIN")
        b.execute("SELECT 1 FROM relaybus.lanes WHERE handler = 'aa' AND lease_owner = 'w' FOR NO KEY UPDATE")
        result = {}

        def renew():
            try:
                result["renewed"] = a.execute("SELECT relaybus.extend_lease('w', '30 seconds', 'H')").fetchone()[0]
            except psycopg.Error as e:
                result["renew_error"] = e.sqlstate

        t = threading.Thread(target=renew)
        t.start()
        time.sleep(0.5)  # the renewal waits for 'aa' now (before the fix: holding 'zz')
        try:
            b.execute(second_statement).fetchall()
            b.execute("COMMIT")
        except psycopg.Error as e:
            result["second_error"] = e.sqlstate
            b.execute("ROLLBACK")
        t.join(10)
        check(not t.is_alive(), f"{label}: extend_lease returned")
        check("renew_error" not in result and "second_error" not in result,
              f"{label}: no deadlock (errors: {result.get('renew_error')}, {result.get('second_error')})")


def alive_case(in_x, label):
    """X reads backend activity, Y connects and claims, X claims (or renews) as the same
    worker name without a holder, in the same transaction."""
    with connect() as x:
        setup(x, ["h1"], [("h1", "e1")])
        x.execute("BEGIN")
        x.execute("SELECT count(*) FROM pg_stat_activity").fetchone()
        with connect() as y:
            rows = y.execute("SELECT lease_token FROM relaybus.claim('w2', 10, '30 seconds')").fetchall()
            check(len(rows) == 1, f"{label}: setup: Y claimed e1")
            x.execute(in_x).fetchall()
            x.execute("COMMIT")
            row = x.execute("SELECT status, attempts, lease_owner FROM relaybus.list_deliveries(NULL, 'h1') "
                            "WHERE event_id = 'e1'").fetchone()
            check(row == ("processing", 0, "w2"),
                  f"{label}: Y's delivery was not charged or taken over (status, attempts, lease_owner = {row})")
            done = y.execute("SELECT relaybus.complete(%s)", (rows[0][0],)).fetchone()[0]
            check(done is True, f"{label}: Y's completion is accepted")


def alive_extend_case(label):
    """The same for extend_lease: a worker name's connections renew each other's
    backend-bound lanes while their backends live."""
    with connect() as x:
        setup(x, ["h1"], [("h1", "e1")])
        x.execute("BEGIN")
        x.execute("SELECT count(*) FROM pg_stat_activity").fetchone()
        with connect() as y:
            y.execute("SELECT count(*) FROM relaybus.claim('w3', 10, '30 seconds')").fetchone()
            renewed = x.execute("SELECT relaybus.extend_lease('w3', '1 hour')").fetchone()[0]
            x.execute("COMMIT")
            check(renewed == 1, f"{label}: the live connection's lane was renewed (renewed {renewed})")


order_case("SELECT * FROM relaybus.claim('w', 10, '30 seconds', NULL, 'H')", "order-claim")
order_case("SELECT relaybus.relinquish('w', 'H')", "order-relinquish")
alive_case("SELECT * FROM relaybus.claim('w2', 10, '30 seconds')", "alive-claim")
alive_extend_case("alive-extend")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
