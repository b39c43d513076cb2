"""An attempt counts as ended only once the server ended it: an error text PostgreSQL
refuses, an exception whose str() raises, or a database out of reach never leaves a
delivery in flight (its key blocked) while the worker believes it settled."""

import logging
import time

import psycopg

import relaybus
import relaybus.connections
import relaybus.handler_runner
import relaybus.worker
from conftest import deliveries, unique, wait_until
from relaybus.wakeups import NotificationWait


def _publish_on_key(conninfo, event_type, count, key="k1"):
    with psycopg.connect(conninfo) as conn:
        with conn.transaction():
            return [relaybus.publish(conn, event_type, {"n": i}, key=key) for i in range(count)]


def _status(admin, handler):
    return {row[0]: row[1:] for row in deliveries(admin, handler)}


def test_an_error_text_with_nul_is_stored_escaped_and_the_key_moves_on(
        conninfo, admin, subscribe, workers):
    handler, event_type = subscribe(max_attempts=2, backoff_base="0")
    garbage, after = _publish_on_key(conninfo, event_type, 2)
    ran = []
    worker = workers()

    @worker.handler(handler)
    def handle(event):
        ran.append(event.id)
        if event.id == garbage:
            raise ValueError("binary garbage \x00 in response")

    worker.start()
    wait_until(lambda: after in ran, what="the key's next event")
    wait_until(lambda: worker.in_flight == 0, what="nothing in flight")
    assert ran == [garbage, garbage, after]  # retried, dead, then the key moved on
    assert deliveries(admin, handler) == [
        (garbage, "dead", 2, "ValueError: binary garbage \\x00 in response")]


class _Unprintable(Exception):
    def __init__(self, response):
        super().__init__()
        self.response = response

    def __str__(self):
        return self.response["message"]  # the response has none: KeyError


def test_an_exception_whose_str_raises_still_fails_the_attempt(
        conninfo, admin, subscribe, workers, caplog):
    handler, event_type = subscribe(max_attempts=1)
    first, second = _publish_on_key(conninfo, event_type, 2)
    ran = []
    worker = workers(shutdown_grace=5)

    @worker.handler(handler)
    def handle(event):
        ran.append(event.id)
        raise _Unprintable({"status": 500})

    worker.start()
    wait_until(lambda: len(ran) == 2 and worker.in_flight == 0, what="both attempts ended")
    began = time.monotonic()
    worker.stop()
    assert time.monotonic() - began < 2  # no running handler left to wait for
    text = "_Unprintable: _Unprintable() (its str() raised KeyError)"
    assert deliveries(admin, handler) == sorted([(first, "dead", 1, text),
                                                 (second, "dead", 1, text)])
    assert any("is dead" in r.getMessage() and r.exc_info for r in caplog.records)


def test_an_error_outside_the_handler_is_logged_and_fails_the_attempt(
        conninfo, admin, subscribe, workers, monkeypatch, caplog):
    handler, event_type = subscribe(max_attempts=1)
    (event_id,) = _publish_on_key(conninfo, event_type, 1)

    def broken(spec, event, connections):
        raise RuntimeError("bug in the runner")
    monkeypatch.setattr(relaybus.worker, "run_handler", broken)
    worker = workers(shutdown_grace=5)
    worker.add_handler(handler, lambda event: None)
    worker.start()
    wait_until(lambda: deliveries(admin, handler) and worker.in_flight == 0, what="the failure")
    began = time.monotonic()
    worker.stop()
    assert time.monotonic() - began < 2
    assert deliveries(admin, handler) == [(event_id, "dead", 1, "RuntimeError: bug in the runner")]
    logged = [r for r in caplog.records if "raised outside the handler" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


