"""The holder: instances that share a name, and one instance's several connections, never
take over each other's lanes (a takeover would charge attempts and lose completions)."""

import threading
import time
from collections import Counter

from conftest import deliveries, held_lanes, publish_many, spawn_worker, unique, wait_until


def _kill_claim_connection(admin, worker_name) -> int:
    return admin.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = %s AND query LIKE '%%relaybus.claim%%'",
        (f"relaybus-py {worker_name}",)).fetchone()[0]


def _recorder():
    lock, runs = threading.Lock(), []

    def record(worker_tag):
        def handle(event):
            with lock:
                runs.append((event.id, event.attempts, worker_tag))
            time.sleep(0.002)
        return handle
    return runs, record


def test_two_instances_with_one_name_share_the_work(conninfo, admin, subscribe, workers):
    handler, event_type = subscribe()
    count = 300
    published = publish_many(conninfo, event_type, count, key=lambda i: f"k{i % 30}")
    runs, record = _recorder()
    name = unique("shared")
    first = workers(name=name, concurrency=4, batch_size=8)
    second = workers(name=name, concurrency=4, batch_size=8)
    assert first.holder != second.holder
    first.add_handler(handler, record("first"))
    second.add_handler(handler, record("second"))
    first.start()
    second.start()
    wait_until(lambda: first.stats.completed + second.stats.completed == count, timeout=20,
               what="every event completed")

    assert sorted(r[0] for r in runs) == sorted(published)  # each event ran exactly once
    assert {r[1] for r in runs} == {0}                      # and no attempt was charged
    by_worker = Counter(r[2] for r in runs)
    assert by_worker["first"] > 0 and by_worker["second"] > 0  # both did work
    assert first.stats.lost == second.stats.lost == 0
    assert deliveries(admin, handler) == []


def test_one_worker_survives_losing_its_claim_connection_mid_run(conninfo, admin, subscribe,
                                                                  workers):
    # Without a holder the lanes belong to the backend that claimed them: when it dies,
    # the next claim of the same name takes them over as orphans and charges every
    # delivery in flight. With the worker's holder the new connection just carries on.
    handler, event_type = subscribe()
    count = 40
    published = publish_many(conninfo, event_type, count, key=lambda i: f"k{i}")
    runs, record = _recorder()
    release = threading.Event()
    # Room for more than is published, so the loop keeps claiming while all are in flight.
    worker = workers(concurrency=count, batch_size=2 * count)

    def blocked(event):
        record("only")(event)
        release.wait(10)

    worker.add_handler(handler, blocked)
    worker.start()
    wait_until(lambda: len(runs) == count, what="every handler running")
    assert held_lanes(admin, worker.name) > 0
    assert _kill_claim_connection(admin, worker.name) == 1
    # The claim loop reconnects and claims again, while all deliveries are in flight.
    wait_until(lambda: worker.stats.claims >= 2, timeout=5, what="a claim on a new connection")
    time.sleep(0.2)
    release.set()
    wait_until(lambda: worker.stats.completed + worker.stats.lost >= count, timeout=10,
               what="every attempt ended")
    assert worker.stats.lost == 0
    assert sorted(r[0] for r in runs) == sorted(published) and {r[1] for r in runs} == {0}
    assert deliveries(admin, handler) == []


def test_a_crashed_instance_never_strands_its_deliveries(conninfo, admin, subscribe, workers,
                                                         tmp_path):
    # The successor reuses the name, as a restarted process would. Its own holder makes it
    # another incarnation, so once the crashed one's lease expires it takes the lanes over
    # (one attempt charged) and runs the delivery. Sharing the holder would make it adopt
    # the lanes instead, with the dead process's delivery still in flight for ever.
    handler, event_type = subscribe()
    name = unique("restarted")
    marker = tmp_path / "running"
    process = spawn_worker(conninfo, name, handler, f"""
        pathlib.Path({str(marker)!r}).write_text(event.id)
        time.sleep(60)
    """, lease=0.5)
    try:
        event_id = publish_many(conninfo, event_type, 1)[0]
        wait_until(marker.exists, timeout=10, what="the first instance to start the handler")
        process.kill()  # no stop(): nothing released, nothing relinquished
        process.wait(5)
    finally:
        if process.poll() is None:
            process.kill()
    runs, record = _recorder()
    successor = workers(name=name, lease=0.5, poll_interval=0.2)
    successor.add_handler(handler, record("successor"))
    successor.start()
    wait_until(lambda: successor.stats.completed == 1, timeout=5,
               what="the successor to take over and complete")
    assert [(r[0], r[1]) for r in runs] == [(event_id, 1)]  # charged once for the crash
    assert deliveries(admin, handler) == []
