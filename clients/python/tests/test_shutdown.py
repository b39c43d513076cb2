"""stop(): running handlers finish within the grace, the rest is released uncharged, the
completions are flushed and the lanes handed back; run_forever() does it on SIGTERM/SIGINT."""

import signal
import threading
import time

import psycopg
import pytest

from conftest import deliveries, held_lanes, publish_many, spawn_worker, unique, wait_until


def test_stop_lets_running_handlers_finish_and_frees_the_lanes(conninfo, admin, subscribe, workers):
    handler, event_type = subscribe()
    publish_many(conninfo, event_type, 3, key=lambda i: f"k{i}")
    running = threading.Semaphore(0)
    worker = workers(concurrency=3, completion_delay=5)  # completions would wait 5 s...

    @worker.handler(handler)
    def slow(event):
        running.release()
        time.sleep(0.5)

    worker.start()
    for _ in range(3):
        assert running.acquire(timeout=5)
    assert held_lanes(admin, worker.name) == 3
    began = time.monotonic()
    worker.stop(grace=5)
    assert time.monotonic() - began < 3  # ...but stop() flushes them at once
    assert worker.stats.succeeded == 3 and worker.stats.released == 0
    assert deliveries(admin, handler) == []
    assert held_lanes(admin, worker.name) == 0  # relinquished, free for others now


def test_handlers_past_the_grace_are_released_uncharged(conninfo, admin, subscribe, workers):
    handler, event_type = subscribe()
    effects = unique("effects")
    admin.execute(f"CREATE TABLE {effects} (event_id text)")
    ids = publish_many(conninfo, event_type, 2, key=lambda i: f"k{i}")
    stuck, started = threading.Event(), threading.Semaphore(0)
    worker = workers(concurrency=2)

    @worker.handler(handler, transactional=True)
    def hang(event, conn):
        conn.execute(f"INSERT INTO {effects} VALUES (%s)", (event.id,))
        started.release()
        stuck.wait(10)

    worker.start()
    for _ in range(2):
        assert started.acquire(timeout=5)
    began = time.monotonic()
    worker.stop(grace=0.3)
    assert time.monotonic() - began < 2  # bounded by the grace, not by the handlers
    assert worker.stats.released == 2
    # Released, not failed: pending, no attempt charged, no lane held...
    assert sorted(deliveries(admin, handler)) == sorted((i, "pending", 0, None) for i in ids)
    assert held_lanes(admin, worker.name) == 0
    # ...so another worker may take them at once, without waiting for a lease to expire.
    with psycopg.connect(conninfo, autocommit=True) as other:
        claimed = other.execute("SELECT event_id FROM relaybus.claim('next', 10, '30 seconds', "
                                "ARRAY[%s])", (handler,)).fetchall()
        assert sorted(r[0] for r in claimed) == sorted(ids)
        # The abandoned handlers now end; their transactions find the tokens spent and
        # roll back, so their writes do not survive.
        stuck.set()
        wait_until(lambda: worker.stats.lost == 2, timeout=5, what="the late handlers to roll back")
        assert admin.execute(f"SELECT count(*) FROM {effects}").fetchone()[0] == 0
        other.execute("SELECT relaybus.release(lease_token) FROM relaybus.claim('next', 10, "
                      "'30 seconds', ARRAY[%s])", (handler,))
        other.execute("SELECT relaybus.relinquish('next')")
    admin.execute(f"DROP TABLE {effects}")


def test_stop_is_idempotent_and_final(subscribe, workers):
    handler, _ = subscribe()
    worker = workers()
    worker.add_handler(handler, lambda event: None)
    worker.stop()  # before start: nothing to do
    worker.start()
    worker.stop()
    worker.stop()
    try:
        worker.start()
    except RuntimeError as exc:
        assert "cannot start again" in str(exc)
    else:
        raise AssertionError("a stopped worker started again")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_run_forever_stops_gracefully_on_a_signal(conninfo, admin, subscribe, tmp_path, signum):
    handler, event_type = subscribe()
    name = unique("w")
    marker = tmp_path / "running"
    process = spawn_worker(conninfo, name, handler, f"""
        pathlib.Path({str(marker)!r}).write_text(event.id)
        time.sleep(1.0)
    """)
    try:
        event_id = publish_many(conninfo, event_type, 1)[0]
        wait_until(marker.exists, timeout=10, what="the handler to start")
        process.send_signal(signum)
        out, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err.decode()
    assert out == b"" and err == b""  # the library prints nothing, warnings included
    assert marker.read_text() == event_id
    assert deliveries(admin, handler) == []  # the running handler finished and completed
    assert held_lanes(admin, name) == 0
