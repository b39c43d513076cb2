"""A worker's statistics as Prometheus metrics, the way Python programs export theirs: a
collector for prometheus_client's registry (an optional dependency: Debian's
python3-prometheus-client, or prometheus-client from PyPI).

    from prometheus_client import start_http_server
    from relaybus.prometheus import register_worker

    register_worker(worker)          # into prometheus_client's default registry
    start_http_server(9108)          # or your web framework's /metrics

Each WorkerStats field is a counter, relaybus_worker_<field>_total, and the deliveries the
worker has claimed and not yet ended on the server are a gauge, relaybus_worker_in_flight;
all labelled with the worker's name. They are read from the worker at each scrape, so they
cost the worker nothing between scrapes. Several workers may share a registry, one name
each (a second worker of a name raises ValueError).

The server's side (per handler: backlog, dead letters, the counters of every worker) is
postgres_exporter's, with docs/postgres_exporter.yml: these are one process's view.
"""

import threading
import weakref
from dataclasses import fields
from typing import Iterator

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .stats import WorkerStats

# The help text of each counter: what WorkerStats's field counts.
HELP = {
    "claims": "claim statements sent",
    "claimed": "deliveries received from claims",
    "succeeded": "handlers that returned (transactional ones: and committed)",
    "failed": "handler exceptions sent to relaybus.fail",
    "retried": "failed deliveries relaybus rescheduled",
    "dead": "failed deliveries that exhausted max_attempts",
    "buried": "deliveries dead-lettered at once (Bury, bury_on)",
    "lost": "attempts whose lease was gone when they ended",
    "released": "deliveries given back at shutdown without charging an attempt",
    "completion_statements": "complete_many statements sent",
    "completed": "deliveries those statements completed",
    "wakeups": "notifications that ended a wait early",
    "renewals": "extend_lease statements sent",
}


class WorkerMetrics:
    """The collector of every worker registered in one registry: one metric family per
    statistic, a sample per worker (prometheus_client refuses two collectors of the same
    names, and the text format one family twice)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._workers = {}

    def add(self, worker) -> None:
        with self._lock:
            if worker.name in self._workers:
                raise ValueError(f"a worker named {worker.name!r} is registered already")
            self._workers[worker.name] = worker

    def remove(self, worker) -> None:
        with self._lock:
            if self._workers.get(worker.name) is worker:
                del self._workers[worker.name]

    def describe(self) -> Iterator[Metric]:
        return self._families([])

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            workers = sorted(self._workers.items())
        return self._families([(name, w.stats, w.in_flight) for name, w in workers])

    @staticmethod
    def _families(samples) -> Iterator[Metric]:
        for f in fields(WorkerStats):
            family = CounterMetricFamily(f"relaybus_worker_{f.name}", HELP[f.name], labels=["worker"])
            for name, stats, _ in samples:
                family.add_metric([name], getattr(stats, f.name))
            yield family
        gauge = GaugeMetricFamily("relaybus_worker_in_flight", "deliveries claimed and not yet ended",
                                  labels=["worker"])
        for name, _, in_flight in samples:
            gauge.add_metric([name], in_flight)
        yield gauge


_lock = threading.Lock()
_collectors: "weakref.WeakKeyDictionary[CollectorRegistry, WorkerMetrics]" = weakref.WeakKeyDictionary()


def register_worker(worker, registry: CollectorRegistry = REGISTRY) -> None:
    """Adds `worker`'s metrics to `registry` (prometheus_client's default one unless given).
    Raises ValueError for a second worker of the same name in one registry."""
    with _lock:
        collector = _collectors.get(registry)
        if collector is None:
            collector = WorkerMetrics()
            registry.register(collector)
            _collectors[registry] = collector
        collector.add(worker)


def unregister_worker(worker, registry: CollectorRegistry = REGISTRY) -> None:
    """Takes `worker`'s metrics out of `registry` (a worker that was never in it: nothing)."""
    with _lock:
        collector = _collectors.get(registry)
        if collector is not None:
            collector.remove(worker)
