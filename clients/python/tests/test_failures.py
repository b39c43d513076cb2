"""A handler exception fails the attempt with its text; at max_attempts the delivery is a
dead letter, and the worker logs it. Bury and bury_on dead-letter at once."""

import logging

import psycopg

import relaybus
from conftest import deliveries, wait_until


def _publish(conninfo, event_type, **fields):
    with psycopg.connect(conninfo) as conn:
        return relaybus.publish(conn, event_type, {"order": 7}, **fields)


def _dead(admin, handler):
    return admin.execute("SELECT event_id, attempts, last_error FROM relaybus.list_deliveries("
                         "'dead', %s)", (handler,)).fetchall()


def test_failures_retry_then_dead_letter_with_the_error_text(conninfo, admin, subscribe, workers,
                                                              caplog):
    handler, event_type = subscribe(max_attempts=3, backoff_base="0")
    event_id = _publish(conninfo, event_type)
    calls = []
    worker = workers()

    @worker.handler(handler)
    def decline(event):
        calls.append(event.attempts)
        raise ValueError(f"card declined for order {event.payload['order']}")

    with caplog.at_level(logging.INFO, logger="relaybus"):
        worker.start()
        wait_until(lambda: _dead(admin, handler), what="the dead letter")
        worker.stop()

    assert calls == [0, 1, 2]  # three attempts, each told how many came before
    assert _dead(admin, handler) == [(event_id, 3, "ValueError: card declined for order 7")]
    stats = worker.stats
    assert (stats.failed, stats.retried, stats.dead) == (3, 2, 1)
    dead_logs = [r for r in caplog.records if r.name == "relaybus" and r.levelno == logging.ERROR]
    assert len(dead_logs) == 1
    assert event_id in dead_logs[0].getMessage() and "is dead" in dead_logs[0].getMessage()
    assert dead_logs[0].exc_info is not None  # with the handler's traceback


def test_bury_dead_letters_at_once(conninfo, admin, subscribe, workers):
    handler, event_type = subscribe(max_attempts=25)
    event_id = _publish(conninfo, event_type)
    worker = workers()

    @worker.handler(handler)
    def reject(event):
        raise relaybus.Bury("order 7 does not exist")

    worker.start()
    wait_until(lambda: _dead(admin, handler), what="the dead letter")
    # The counters move once the settler has read the server's answer, a moment after the
    # dead letter is visible: stopping waits for the settler.
    worker.stop()
    assert _dead(admin, handler) == [(event_id, 1, "order 7 does not exist")]
    assert worker.stats.buried == 1 and worker.stats.failed == 0


def test_bury_on_exception_classes(conninfo, admin, subscribe, workers):
    handler, event_type = subscribe(max_attempts=25, backoff_base="0")
    permanent = _publish(conninfo, event_type, key="a")
    transient = _publish(conninfo, event_type, key="b")
    worker = workers(bury_on=(LookupError,))
    attempts = {}

    @worker.handler(handler, bury_on=[PermissionError])
    def handle(event):
        attempts[event.id] = event.attempts + 1
        if event.id == permanent:
            raise KeyError("customer")  # a LookupError: the worker's bury_on
        if event.attempts < 2:
            raise ConnectionError("smtp down")  # not listed: retried
        return None

    worker.start()
    # Nothing left but the dead letter: not waiting ('pending') and not running ('processing').
    wait_until(lambda: _dead(admin, handler) and not [d for d in deliveries(admin, handler)
                                                      if d[1] != "dead"],
               what="one dead letter and one success")
    assert _dead(admin, handler) == [(permanent, 1, "KeyError: 'customer'")]
    assert attempts[transient] == 3


def test_a_failure_in_one_handler_does_not_stop_the_others(conninfo, subscribe, workers):
    handler, event_type = subscribe(max_attempts=1)
    for _ in range(5):
        _publish(conninfo, event_type)
    worker = workers(concurrency=2)
    worker.add_handler(handler, lambda event: 1 / 0)
    worker.start()
    wait_until(lambda: worker.stats.dead == 5, what="five dead letters")
    assert worker.stats.claimed == 5
