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


def test_a_refused_error_text_is_dropped_then_the_failure_released(
        conninfo, admin, subscribe, workers, monkeypatch, caplog):
    handler, event_type = subscribe(max_attempts=5, backoff_base="0")
    (event_id,) = _publish_on_key(conninfo, event_type, 1)
    # As if error_text let a NUL through: fail(token, text) is refused (not a connection
    # error), so the settler sends fail(token, NULL).
    monkeypatch.setattr(relaybus.handler_runner, "error_text", lambda exc: str(exc))
    worker = workers()
    calls = []

    @worker.handler(handler)
    def handle(event):
        calls.append(event.attempts)
        if len(calls) == 1:
            raise ValueError("nul \x00 here")
        return None

    worker.start()
    wait_until(lambda: len(calls) == 2 and worker.in_flight == 0, what="the retry")
    assert calls == [0, 1]  # failed (charged, without its text), then retried
    assert deliveries(admin, handler) == []
    assert any("refused with its error text" in r.getMessage() for r in caplog.records)
    worker.stop()

    # Now every fail of this handler is refused on the server: the attempt is released.
    # A fail writes the delivery's exception row with the attempt charged (a release writes
    # it with none), so a constraint there refuses exactly the fails.
    admin.execute(f"ALTER TABLE relaybus.exceptions ADD CONSTRAINT {handler}_no_fail "
                  f"CHECK (handler <> '{handler}' OR attempts = 0) NOT VALID")
    try:
        (event_id,) = _publish_on_key(conninfo, event_type, 1)
        worker = workers()
        worker.add_handler(handler, lambda event: 1 / 0)
        with caplog.at_level(logging.INFO, logger="relaybus"):
            worker.start()
            wait_until(lambda: worker.stats.released >= 1, what="the release")
            worker.stop()
        assert worker.in_flight == 0
        assert deliveries(admin, handler) == [(event_id, "pending", 0, None)]
        assert any("released instead" in r.getMessage() and "division by zero" in r.getMessage()
                   for r in caplog.records)
    finally:
        admin.execute(f"ALTER TABLE relaybus.exceptions DROP CONSTRAINT {handler}_no_fail")


class _Unreachable:
    """Makes every new connection of the worker fail while ``down`` is true."""

    def __init__(self, monkeypatch):
        self.down = False
        real = relaybus.connections.connect

        def connect(conninfo):
            if self.down:
                raise psycopg.OperationalError("connection refused (test)")
            return real(conninfo)
        monkeypatch.setattr(relaybus.connections, "connect", connect)


def test_a_failure_is_sent_once_the_database_is_back_however_long_it_takes(
        conninfo, admin, subscribe, workers, monkeypatch):
    handler, event_type = subscribe(max_attempts=5, backoff_base="0")
    first, second = _publish_on_key(conninfo, event_type, 2)
    network = _Unreachable(monkeypatch)
    ran = []
    worker = workers()

    @worker.handler(handler)
    def handle(event):
        ran.append(event.id)
        if len(ran) == 1:
            network.down = True  # the settler opens its connection for this failure
            raise ConnectionError("smtp down")

    worker.start()
    wait_until(lambda: ran, what="the first attempt")
    time.sleep(2.5)  # longer than the old four tries (0.2 + 0.4 + 0.8 s)
    assert worker.in_flight == 1  # not settled: on the server it is still in flight
    assert _status(admin, handler)[first] == ("processing", 0, None)
    network.down = False
    wait_until(lambda: second in ran and worker.in_flight == 0, timeout=10,
               what="the failure sent and the key's next event run")
    assert ran == [first, first, second]


def test_at_stop_an_unsendable_ending_is_given_up_and_logged(
        conninfo, admin, subscribe, workers, monkeypatch, caplog):
    handler, event_type = subscribe(max_attempts=5, backoff_base="0")
    (event_id,) = _publish_on_key(conninfo, event_type, 1)
    network = _Unreachable(monkeypatch)
    worker = workers()

    @worker.handler(handler)
    def handle(event):
        network.down = True
        raise ConnectionError("smtp down")

    worker.start()
    wait_until(lambda: worker.stats.claimed == 1, what="the claim")
    time.sleep(0.5)
    began = time.monotonic()
    worker.stop()
    assert time.monotonic() - began < 4
    assert worker.in_flight == 1
    assert any("giving up on the fail of event" in r.getMessage() and "lease" in r.getMessage()
               for r in caplog.records if r.levelno == logging.ERROR)
    # Left to the lease: still in flight on the server, nothing charged.
    assert _status(admin, handler)[event_id] == ("processing", 0, None)


def test_a_connection_whose_listen_fails_is_closed(conninfo, subscribe, workers, monkeypatch):
    handler, _ = subscribe()
    opened = []
    real_connect = relaybus.connections.connect

    def connect(conninfo):
        conn = real_connect(conninfo)
        opened.append(conn)
        return conn
    monkeypatch.setattr(relaybus.connections, "connect", connect)
    real_listen = NotificationWait.listen
    listens = []

    def listen(self, conn):
        listens.append(conn)
        if len(listens) == 1:
            raise psycopg.OperationalError("LISTEN failed (test)")
        return real_listen(self, conn)
    monkeypatch.setattr(NotificationWait, "listen", listen)
    worker = workers(name=unique("w"))
    worker.add_handler(handler, lambda event: None)
    worker.start()
    wait_until(lambda: len(listens) == 2, what="the claim loop to reconnect")
    assert listens[0].closed  # not left open behind the new one
    assert not listens[1].closed
