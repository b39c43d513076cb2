"""relaybus.prometheus: a worker's statistics in prometheus_client's text exposition, read
at each scrape, one series per worker."""

import re
import threading

import pytest
# Not skipped when missing: scripts/install-deps --test installs python3-prometheus-client.
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conftest import publish_many, wait_until
from relaybus.prometheus import register_worker, unregister_worker
from relaybus.stats import WorkerStats


def samples(registry):
    """{(metric sample name, worker): value} of one scrape, parsed as Prometheus would."""
    text = generate_latest(registry).decode()
    return {(s.name, s.labels.get("worker")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_workers_stats_are_its_counters_at_each_scrape(conninfo, subscribe, workers):
    handler, event_type = subscribe()
    release = threading.Event()
    worker = workers(concurrency=4, batch_size=10, name="prom-a")
    seen = []

    @worker.handler(handler)
    def slow(event):
        seen.append(event.id)
        release.wait(10)

    registry = CollectorRegistry()
    register_worker(worker, registry)
    assert samples(registry)[("relaybus_worker_claimed_total", "prom-a")] == 0

    publish_many(conninfo, event_type, 6)
    worker.start()
    # Four handlers running, their deliveries in flight: the gauge says so, read live.
    wait_until(lambda: samples(registry)[("relaybus_worker_in_flight", "prom-a")] >= 4,
               what="the in-flight gauge to show the running deliveries")
    release.set()
    wait_until(lambda: worker.stats.completed == 6, what="every completion")
    scraped = samples(registry)
    stats = worker.stats
    for name in WorkerStats.__dataclass_fields__:
        assert scraped[(f"relaybus_worker_{name}_total", "prom-a")] == getattr(stats, name), name
    assert scraped[("relaybus_worker_completed_total", "prom-a")] == 6
    assert scraped[("relaybus_worker_in_flight", "prom-a")] == 0


def test_workers_share_a_registry_one_name_each(workers):
    registry = CollectorRegistry()
    first, second = workers(name="prom-b1"), workers(name="prom-b2")
    register_worker(first, registry)
    register_worker(second, registry)
    text = generate_latest(registry).decode()
    # One family, a series per worker (a family twice would not parse in Prometheus).
    assert len(re.findall(r"^# TYPE relaybus_worker_claimed(_total)? counter$", text, re.M)) == 1
    scraped = samples(registry)
    assert ("relaybus_worker_claimed_total", "prom-b1") in scraped
    assert ("relaybus_worker_claimed_total", "prom-b2") in scraped
    with pytest.raises(ValueError, match="prom-b1"):
        register_worker(workers(name="prom-b1"), registry)
    unregister_worker(first, registry)
    assert ("relaybus_worker_claimed_total", "prom-b1") not in samples(registry)
    assert ("relaybus_worker_claimed_total", "prom-b2") in samples(registry)
