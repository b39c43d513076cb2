"""Per-key order holds across the handler's runs, with several handlers running at once and
failed attempts retried in between."""

import random
import threading
import time
from collections import defaultdict

from conftest import deliveries, publish_many, wait_until


def test_each_key_runs_in_publish_order_one_at_a_time(conninfo, admin, subscribe, workers):
    handler, event_type = subscribe(backoff_base="0")  # retries due at once
    keys, per_key = 6, 25
    publish_many(conninfo, event_type, keys * per_key, key=lambda i: f"key-{i % keys}")

    lock = threading.Lock()
    running = set()            # keys with a handler running now
    overlaps = []              # a key's handler started while another of that key ran
    succeeded = defaultdict(list)  # key -> n of each successful run, in run order
    failed_once = set()

    worker = workers(concurrency=8, batch_size=16)

    @worker.handler(handler)
    def handle(event):
        n = event.payload["n"]
        with lock:
            if event.key in running:
                overlaps.append((event.key, n))
            running.add(event.key)
        try:
            time.sleep(random.uniform(0, 0.002))
            # Every 7th event fails its first attempt: its retry must still come before
            # the later events of its key.
            if n % 7 == 0 and event.attempts == 0:
                with lock:
                    failed_once.add(n)
                raise RuntimeError(f"first attempt of {n} fails")
            with lock:
                succeeded[event.key].append(n)
        finally:
            with lock:
                running.discard(event.key)

    worker.start()
    wait_until(lambda: worker.stats.succeeded == keys * per_key, timeout=20,
               what="every event handled")
    worker.stop()

    assert overlaps == []
    assert failed_once and worker.stats.retried == len(failed_once)
    for k in range(keys):
        expected = [n for n in range(keys * per_key) if n % keys == k]
        assert succeeded[f"key-{k}"] == expected, f"key-{k} ran out of order"
    assert deliveries(admin, handler) == []
