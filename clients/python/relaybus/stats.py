"""Counters of one worker, for tests, health checks and progress logs."""

import threading
from dataclasses import dataclass, replace


@dataclass
class WorkerStats:
    claims: int = 0                  # claim statements sent
    claimed: int = 0                 # deliveries received
    succeeded: int = 0               # handlers that returned (transactional ones: and committed)
    failed: int = 0                  # handler exceptions sent to relaybus.fail
    retried: int = 0                 # ... of which relaybus rescheduled
    dead: int = 0                    # ... of which exhausted max_attempts
    buried: int = 0                  # dead-lettered at once (Bury, bury_on)
    lost: int = 0                    # attempts whose lease was gone when they ended
    released: int = 0                # given back at shutdown without charging an attempt
    completion_statements: int = 0   # complete_many statements sent
    completed: int = 0               # deliveries those statements completed
    wakeups: int = 0                 # notifications that ended a wait early
    renewals: int = 0                # extend_lease statements sent


class StatsRecorder:
    """WorkerStats updated from several threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._stats = WorkerStats()

    def add(self, **increments: int) -> None:
        with self._lock:
            for name, value in increments.items():
                setattr(self._stats, name, getattr(self._stats, name) + value)

    def snapshot(self) -> WorkerStats:
        with self._lock:
            return replace(self._stats)
