"""Logs go to logging.getLogger("relaybus") and nowhere else: an application that did not
configure logging sees nothing printed, even for failures and dead letters. An expected
retry is one WARNING line, numbered as the API numbers attempts; its traceback is for DEBUG,
a dead letter's for ERROR."""

import io
import logging
import signal

from conftest import deliveries, spawn_worker, unique, wait_until, publish_many


def test_nothing_is_printed_without_logging_configured(conninfo, admin, subscribe):
    handler, event_type = subscribe(max_attempts=2, backoff_base="0")
    process = spawn_worker(conninfo, unique("w"), handler, """
        raise RuntimeError("always fails")
    """)
    try:
        publish_many(conninfo, event_type, 1)
        # A retry (WARNING) and then a dead letter (ERROR) are logged on the way.
        wait_until(lambda: [d for d in deliveries(admin, handler) if d[1] == "dead"],
                   timeout=10, what="the dead letter")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert (out, err) == (b"", b"")


def test_records_carry_the_relaybus_logger_name(conninfo, subscribe, workers, caplog):
    handler, event_type = subscribe(max_attempts=1)
    publish_many(conninfo, event_type, 1)
    worker = workers()
    worker.add_handler(handler, lambda event: 1 / 0)
    with caplog.at_level("INFO", logger="relaybus"):
        worker.start()
        wait_until(lambda: worker.stats.dead == 1, what="the dead letter")
        worker.stop()
    names = {record.name for record in caplog.records}
    assert names == {"relaybus"}
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert "started" in messages and "ZeroDivisionError" in messages and "stopped" in messages


class _Captured:
    """What an application sees with logging configured at ``level``: the relaybus
    records formatted as one text, as a StreamHandler with a Formatter writes them."""

    def __init__(self, level):
        self.level = level
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        self.records = []
        self.handler.addFilter(lambda record: self.records.append(record) or True)
        self.logger = logging.getLogger("relaybus")

    def __enter__(self):
        self.saved = self.logger.level
        self.logger.setLevel(self.level)
        self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.saved)

    @property
    def text(self):
        return self.stream.getvalue()


def _fail_twice_then_succeed(worker, handler, seen):
    @worker.handler(handler)
    def flaky(event):
        seen.append(event.attempts)
        if event.attempts < 2:
            raise ConnectionError(f"smtp down\non try with attempts={event.attempts}")


def test_an_expected_retry_is_one_warning_line_without_traceback(conninfo, subscribe, workers):
    handler, event_type = subscribe(max_attempts=5, backoff_base="0")
    event_id = publish_many(conninfo, event_type, 1)[0]
    seen = []
    worker = workers()
    _fail_twice_then_succeed(worker, handler, seen)
    with _Captured(logging.INFO) as log:
        worker.start()
        wait_until(lambda: worker.stats.succeeded == 1, what="the third try's success")
        worker.stop()
    assert seen == [0, 1, 2]

    retries = [r for r in log.records if "will retry" in r.getMessage()]
    assert [r.levelno for r in retries] == [logging.WARNING, logging.WARNING]
    assert all(r.exc_info is None for r in retries)
    # One line each, in what the application prints: no traceback, and the error's own line
    # break does not start a second line.
    retry_lines = [line for line in log.text.splitlines() if "will retry" in line]
    assert len(retry_lines) == 2
    assert "Traceback" not in log.text and "\non try" not in log.text
    # attempts= numbers attempts as the API does: what claim returned and the handler saw
    # (0 on the first try), never "attempt 1" for attempts == 0.
    assert f"failed on event {event_id}, attempts=0, will retry" in retry_lines[0]
    assert f"failed on event {event_id}, attempts=1, will retry" in retry_lines[1]
    assert "ConnectionError: smtp down\\non try with attempts=0" in retry_lines[0]
    assert "attempt 1" not in log.text


def test_the_retry_traceback_is_logged_at_debug(conninfo, subscribe, workers):
    handler, event_type = subscribe(max_attempts=5, backoff_base="0")
    publish_many(conninfo, event_type, 1)
    worker = workers()
    _fail_twice_then_succeed(worker, handler, [])
    with _Captured(logging.DEBUG) as log:
        worker.start()
        wait_until(lambda: worker.stats.succeeded == 1, what="the third try's success")
        worker.stop()
    tracebacks = [r for r in log.records if r.levelno == logging.DEBUG and r.exc_info]
    assert [r.getMessage().rsplit("attempts=", 1)[1] for r in tracebacks] == ["0:", "1:"]
    assert all(isinstance(r.exc_info[1], ConnectionError) for r in tracebacks)
    assert log.text.count("Traceback (most recent call last)") == 2


def test_a_dead_letter_is_an_error_with_its_traceback(conninfo, subscribe, workers):
    handler, event_type = subscribe(max_attempts=2, backoff_base="0")
    event_id = publish_many(conninfo, event_type, 1)[0]
    worker = workers()
    worker.add_handler(handler, lambda event: 1 / 0)
    with _Captured(logging.INFO) as log:
        worker.start()
        wait_until(lambda: worker.stats.dead == 1, what="the dead letter")
        worker.stop()
    retry, dead = [r for r in log.records if event_id in r.getMessage()]
    assert (retry.levelno, retry.exc_info) == (logging.WARNING, None)
    assert "attempts=0, will retry" in retry.getMessage()
    assert dead.levelno == logging.ERROR and dead.exc_info is not None
    assert "attempts=1, and it is dead (max_attempts reached)" in dead.getMessage()
    assert log.text.count("Traceback (most recent call last)") == 1


def test_a_burial_is_an_error_with_its_traceback(conninfo, subscribe, workers):
    handler, event_type = subscribe()
    event_id = publish_many(conninfo, event_type, 1)[0]
    worker = workers(bury_on=(KeyError,))
    worker.add_handler(handler, lambda event: event.payload["order_id"])
    with _Captured(logging.INFO) as log:
        worker.start()
        wait_until(lambda: worker.stats.buried == 1, what="the burial")
        worker.stop()
    [dead] = [r for r in log.records if event_id in r.getMessage()]
    assert dead.levelno == logging.ERROR and dead.exc_info is not None
    assert "attempts=0, and it is dead (buried): KeyError: 'order_id'" in dead.getMessage()
