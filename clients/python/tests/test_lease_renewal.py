"""Handlers that run longer than the lease keep their lanes: the worker renews them."""

import threading
import time

import psycopg

from conftest import deliveries, publish_many, wait_until


def start_slow_worker(workers, subscribe, conninfo, events, runtime, **options):
    """A started worker whose handler sleeps `runtime` seconds on each of `events` keyed
    deliveries; returns (worker, handler, runs: (event id, attempts) per call) once the
    first handler has begun."""
    handler, event_type = subscribe()
    publish_many(conninfo, event_type, events, key=lambda i: f"slow-{i}")
    started, runs = threading.Event(), []
    worker = workers(**options)

    @worker.handler(handler)
    def slow(event):
        runs.append((event.id, event.attempts))
        started.set()
        time.sleep(runtime)

    worker.start()
    assert started.wait(5)
    return worker, handler, runs


def rival_claims(conninfo, handler, seconds, worker, attempts):
    """What a rival worker's claims take of handler's deliveries over `seconds`, claiming
    every 0.1 s, once `worker` has ended `attempts` attempts (completed or lost)."""
    taken = []
    with psycopg.connect(conninfo, autocommit=True) as rival:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            taken += rival.execute("SELECT event_id FROM relaybus.claim('rival', 10, '10 seconds', "
                                   "ARRAY[%s])", (handler,)).fetchall()
            time.sleep(0.1)
        wait_until(lambda: worker.stats.completed + worker.stats.lost == attempts,
                   what="the slow handlers' attempts to end")
        rival.execute("SELECT relaybus.relinquish('rival')")
    return taken


def test_a_slow_handler_keeps_its_lanes(conninfo, admin, subscribe, workers):
    lease, runtime = 1.0, 2.5  # each handler outlives two leases and a half
    worker, handler, runs = start_slow_worker(workers, subscribe, conninfo, 3, runtime,
                                              lease=lease, concurrency=3)
    # A rival worker keeps trying to take the lanes while the handlers run. Without
    # renewal the leases lapse after 1 s and its claim takes the lanes over, charging
    # each in-flight delivery an attempt. The renewals go over the renewer's own
    # connection, not the one that claimed: only the holder ties them to these lanes.
    taken = rival_claims(conninfo, handler, runtime, worker, 3)

    assert taken == []
    assert sorted(attempts for _, attempts in runs) == [0, 0, 0]  # each ran once, uncharged
    stats = worker.stats
    assert stats.lost == 0 and stats.completed == 3
    assert stats.renewals >= 3  # every lease / 3 while the handlers ran
    assert deliveries(admin, handler) == []


def test_an_idle_worker_renews_nothing(subscribe, workers):
    handler, _ = subscribe()
    worker = workers(lease=0.3)
    worker.add_handler(handler, lambda event: None)
    worker.start()
    time.sleep(0.5)
    assert worker.stats.renewals == 0


def test_claims_that_renew_the_lanes_spare_the_renewals(conninfo, subscribe, workers):
    # On 0.3.0 every claim renews the lanes the worker holds. A worker with free places
    # keeps claiming (every poll interval here) while a slow handler runs past two leases:
    # its lane stays leased by those claims alone, and the renewer sends no extend_lease,
    # each of which would rewrite every lease row once more.
    lease, runtime = 1.0, 2.5
    worker, handler, runs = start_slow_worker(workers, subscribe, conninfo, 1, runtime, lease=lease,
                                              concurrency=4, poll_interval=0.1)
    taken = rival_claims(conninfo, handler, runtime, worker, 1)
    assert taken == [] and [attempts for _, attempts in runs] == [0]
    stats = worker.stats
    assert stats.completed == 1 and stats.lost == 0
    assert stats.claims > 10  # the claims went on while the handler ran
    assert stats.renewals == 0
