"""Logs go to logging.getLogger("relaybus") and nowhere else: an application that did not
configure logging sees nothing printed, even for failures and dead letters."""

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
