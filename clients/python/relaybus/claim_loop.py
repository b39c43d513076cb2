"""The claim thread: asks for as many deliveries as there is capacity for, then waits.

Capacity is the worker's concurrency minus the deliveries whose attempt has not ended
(claimed and not yet completed, failed or released on the server). Asking for no more than
that keeps every claimed delivery's lease short of the queue behind it. A claim that came
back full goes again at once; a short one means nothing more is due, so the loop waits for
a notification, for capacity to be settled (a key's next event becomes claimable only when
the previous one's completion is committed, and nobody notifies that) or for the poll
interval.

Every role may NOTIFY any channel, so a notification may come from anyone who can connect:
a claim it causes starts no sooner than ``wakeup_interval`` after the previous claim began.
A notification heard sooner is not dropped: the claim waits out the spacing. Every claim
takes the notifications heard before it begins, since it answers them: however many
arrived, they count as one.

Errors never end the loop: a lost connection is reopened (with LISTEN again), any other
error (an admin unsubscribed a handler, say) is logged; both back off, doubling up to the
poll interval, and stop() cuts every pause short.
"""

import logging
import threading
import time
from datetime import timedelta
from typing import Callable, List, Optional

import psycopg

from .connections import close_quietly
from .stats import StatsRecorder
from .wakeups import NotificationWait, Waker

log = logging.getLogger("relaybus")

# Columns by name, in the order Event.from_claim_row reads them.
_CLAIM = ("SELECT lease_token, event_id, handler, type, key, payload, headers, attempts, "
          "published_at FROM relaybus.claim(%s, %s, %s, %s::text[], %s)")
_FIRST_PAUSE = 0.05  # seconds after the first error in a row


class ClaimLoop:
    def __init__(self, connect: Callable[[], psycopg.Connection], worker: str, holder: str,
                 handlers: List[str], lease: timedelta, batch_size: int,
                 free_capacity: Callable[[], int], dispatch: Callable[[list], None],
                 poll_interval: float, listen: bool, wakeup_interval: float,
                 stats: StatsRecorder, renews_held_lanes: bool = False):
        self._connect = connect
        self._worker = worker
        self._holder = holder
        self._handlers = handlers
        self._lease = lease
        self._batch_size = batch_size
        self._free_capacity = free_capacity
        self._dispatch = dispatch  # takes the claimed rows; must not block
        self._poll_interval = poll_interval
        self._listen = listen
        self._wakeup_interval = wakeup_interval
        self._last_claim = float("-inf")  # monotonic time the latest claim began
        # Whether a claim that returns renewed every lane the worker holds (it names every
        # handler the worker runs); then lanes_renewed_at is when the latest such claim
        # began, for the lease renewer (read from its thread: a float, replaced whole).
        self._renews_held_lanes = renews_held_lanes
        self.lanes_renewed_at = float("-inf")
        self._stats = stats
        self.waker = Waker()
        self._wait = NotificationWait(handlers, self.waker)
        self._stopping = threading.Event()
        self._conn: Optional[psycopg.Connection] = None
        self._thread = threading.Thread(target=self._run, name="relaybus-claims", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Returns once no claim is running and none will be sent again."""
        self._stopping.set()
        self.waker.poke()
        self._thread.join()
        self.waker.close()

    def _run(self) -> None:
        errors = 0
        try:
            while not self._stopping.is_set():
                try:
                    self._round()
                    errors = 0
                except psycopg.OperationalError as exc:
                    errors += 1
                    log.warning("claim connection of worker %s failed, reconnecting: %s",
                                self._worker, exc)
                    close_quietly(self._conn)
                    self._conn = None
                    self._pause(errors)
                except Exception as exc:  # noqa: BLE001 (the loop must outlive any one error)
                    errors += 1
                    log.error("claim for worker %s failed: %s", self._worker, exc)
                    if self._conn is not None and self._conn.broken:
                        close_quietly(self._conn)
                        self._conn = None
                    self._pause(errors)
        finally:
            close_quietly(self._conn)
            self._conn = None

    def _pause(self, errors: int) -> None:
        pause = min(_FIRST_PAUSE * 2 ** (errors - 1), self._poll_interval)
        self._stopping.wait(pause)

    def _round(self) -> None:
        if self._conn is None:
            conn = self._connect()
            try:
                if self._listen:
                    self._wait.listen(conn)
            except BaseException:
                close_quietly(conn)  # not kept as self._conn, so nobody else would close it
                raise
            self._conn = conn
        free = self._free_capacity()
        if free <= 0:
            self._wait_for_reason(self._poll_interval)
            return
        asked = min(self._batch_size, free)
        if self._listen:
            self._wait.forget(self._conn)
        self._last_claim = time.monotonic()
        rows = self._conn.execute(
            _CLAIM, (self._worker, asked, self._lease, self._handlers, self._holder)).fetchall()
        if self._renews_held_lanes:
            self.lanes_renewed_at = self._last_claim
        self._stats.add(claims=1, claimed=len(rows))
        if rows:
            self._dispatch(rows)
        if len(rows) < asked and not self._stopping.is_set():
            self._wait_for_reason(self._poll_interval)

    def _wait_for_reason(self, timeout: float) -> None:
        reason = self._wait.wait(self._conn if self._listen else None, timeout)
        if reason == "notified":
            self._stats.add(wakeups=1)
            spacing = self._last_claim + self._wakeup_interval - time.monotonic()
            self._stopping.wait(max(0.0, spacing))
