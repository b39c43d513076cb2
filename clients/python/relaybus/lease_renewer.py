"""Keeps the worker's lanes while handlers run longer than part of the lease.

Every third of the lease, while the worker has deliveries in flight, one
``extend_lease(worker, lease, holder)`` renews every lane of this incarnation. A third
leaves two renewals' worth of slack for a slow statement or a reconnect before anyone may
take a lane over. It has its own connection so that a claim or a settlement that waits on
a lock never delays a renewal. An idle worker renews nothing: its lanes may lapse, which
hands them to whoever needs them. Nor does a worker whose claims renewed its lanes within the
last third (relaybus 0.3.0's claims renew the lanes they find held, to a lease from the
claim's start): an extend_lease then would rewrite every lease row again, and under a held
snapshot each rewrite stays as a dead version that the next claims step over.
"""

import logging
import threading
import time
from datetime import timedelta
from typing import Callable, Optional

import psycopg

from .connections import close_quietly
from .stats import StatsRecorder

log = logging.getLogger("relaybus")


class LeaseRenewer:
    def __init__(self, connect: Callable[[], psycopg.Connection], worker: str, holder: str,
                 lease: timedelta, holding: Callable[[], bool], stats: StatsRecorder,
                 renewed_at: Callable[[], float] = lambda: float("-inf")):
        self._connect = connect
        self._worker = worker
        self._holder = holder
        self._lease = lease
        self._holding = holding  # true while deliveries are in flight
        self._renewed_at = renewed_at  # monotonic start of the latest claim that renewed them
        self._stats = stats
        self._stop = threading.Event()
        self._conn: Optional[psycopg.Connection] = None
        self._thread = threading.Thread(target=self._run, name="relaybus-lease-renewer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        close_quietly(self._conn)
        self._conn = None

    def _run(self) -> None:
        period = self._lease.total_seconds() / 3
        while not self._stop.wait(period):
            # A claim that began within the last third left every lane leased for at least
            # two thirds of the lease from now, as an extend_lease now would (for one lease).
            if self._holding() and time.monotonic() - self._renewed_at() >= period:
                self.renew()

    def renew(self) -> Optional[int]:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            renewed = self._conn.execute(
                "SELECT relaybus.extend_lease(%s, %s, %s)",
                (self._worker, self._lease, self._holder)).fetchone()[0]
        except psycopg.Error as exc:
            # Next period tries again on a new connection; two misses still leave a third
            # of the lease.
            log.warning("lease renewal for worker %s failed: %s", self._worker, exc)
            close_quietly(self._conn)
            self._conn = None
            return None
        self._stats.add(renewals=1)
        if renewed == 0 and self._holding():
            log.warning("worker %s holds deliveries but no lane was renewed: its lanes "
                        "were taken over, and their completions will be reported lost", self._worker)
        return renewed
