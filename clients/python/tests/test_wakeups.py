"""LISTEN wake-ups: an idle worker claims within milliseconds of a commit, not at its next
poll; polling still finds work without them; a dead listening connection is replaced."""

import threading
import time

import psycopg

import relaybus
from conftest import unique, wait_until


def _idle(worker):
    # The first claim came back empty, so the loop is in its wait.
    wait_until(lambda: worker.stats.claims >= 1, what="the first claim")
    time.sleep(0.1)


def _publish_and_time(conninfo, event_type, handled: threading.Event) -> float:
    handled.clear()
    with psycopg.connect(conninfo) as conn:
        relaybus.publish(conn, event_type, {})
        conn.commit()
        committed = time.monotonic()
    assert handled.wait(5), "not handled within 5 s"
    return handled.at - committed


class _Stamp(threading.Event):
    def set(self):
        self.at = time.monotonic()
        super().set()


def test_a_commit_wakes_an_idle_worker_long_before_its_poll(conninfo, subscribe, workers):
    handler, event_type = subscribe()
    poll = 10.0
    handled = _Stamp()
    worker = workers(poll_interval=poll)
    worker.add_handler(handler, lambda event: handled.set())
    worker.start()
    latencies = []
    for _ in range(5):
        _idle(worker)
        latencies.append(_publish_and_time(conninfo, event_type, handled))
    assert max(latencies) < 0.5, latencies  # vs 10 s when only the poll finds the work
    assert worker.stats.wakeups >= 5


def test_without_listen_the_poll_finds_the_work(conninfo, subscribe, workers):
    handler, event_type = subscribe()
    handled = _Stamp()
    worker = workers(poll_interval=0.3, listen=False)
    worker.add_handler(handler, lambda event: handled.set())
    worker.start()
    _idle(worker)
    latency = _publish_and_time(conninfo, event_type, handled)
    assert latency < 1.5
    assert worker.stats.wakeups == 0


def test_notifications_for_other_handlers_do_not_wake_it(conninfo, subscribe, workers):
    mine, _ = subscribe()
    _, other_type = subscribe()
    worker = workers(poll_interval=10.0)
    worker.add_handler(mine, lambda event: None)
    worker.start()
    _idle(worker)
    claims = worker.stats.claims
    with psycopg.connect(conninfo) as conn:
        relaybus.publish(conn, other_type, {})
    time.sleep(0.3)
    assert worker.stats.claims == claims and worker.stats.wakeups == 0


def test_a_killed_listening_connection_is_replaced(conninfo, admin, subscribe, workers):
    handler, event_type = subscribe()
    handled = _Stamp()
    worker = workers(poll_interval=10.0)  # only the reconnect, not a poll, can save it
    worker.add_handler(handler, lambda event: handled.set())
    worker.start()
    _idle(worker)
    killed = admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = %s AND query LIKE '%%relaybus.claim%%'",
        (f"relaybus-py {worker.name}",)).fetchone()[0]
    assert killed == 1
    # The dead socket ends the wait at once; the worker reconnects and listens again.
    wait_until(lambda: worker.stats.claims >= 2, timeout=3, what="a claim on a new connection")
    _idle(worker)
    assert _publish_and_time(conninfo, event_type, handled) < 0.5


def test_a_strangers_notification_flood_costs_at_most_a_claim_per_wakeup_interval(
        conninfo, dbname, admin, subscribe, workers):
    # Every role may NOTIFY any channel: this one has LOGIN and no relaybus right at all.
    stranger = unique("relaybus_py_stranger")
    admin.execute(f'CREATE ROLE "{stranger}" LOGIN')
    try:
        assert admin.execute("SELECT has_schema_privilege(%s, 'relaybus', 'USAGE')",
                             (stranger,)).fetchone()[0] is False
        handler, event_type = subscribe()
        interval = 0.05
        handled = _Stamp()
        worker = workers(poll_interval=10.0, wakeup_interval=interval)
        worker.add_handler(handler, lambda event: handled.set())
        worker.start()
        _idle(worker)
        before = worker.stats.claims
        started = time.monotonic()
        with psycopg.connect(dbname=dbname, user=stranger, autocommit=True) as conn:
            for i in range(200):  # each its own transaction, so none is folded into another
                # Half name the worker's handler: this runtime reads the payload.
                conn.execute("SELECT pg_notify('relaybus', %s)",
                             (handler if i % 2 == 0 else f"noise {i}",))
                time.sleep(0.001)
        elapsed = time.monotonic() - started
        time.sleep(3 * interval)  # the last notifications are answered after the spacing
        made = worker.stats.claims - before
        assert 1 <= made <= elapsed / interval + 3, (made, elapsed)
        # A real publish right after the flood still wakes it, far sooner than the poll.
        assert _publish_and_time(conninfo, event_type, handled) < 0.5
    finally:
        admin.execute(f'DROP ROLE "{stranger}"')
