"""The claim loop's wait between claims: a notification, a poke or the poll interval.

relaybus sends ``NOTIFY relaybus, '<handler>'`` when a publishing transaction commits. The
claim connection listens, so an idle worker claims within milliseconds of a commit. The
notification is only a shortcut: every wait also ends after the poll interval, which finds
retries after backoff, delayed events, takeovers and any notification that was missed
(LISTEN through a transaction pooler, a reconnect).

The wait is a ``select`` over the connection's socket and a socket pair that other threads
poke (a settled completion frees capacity; stop()). It always has a timeout, and a
connection that died while idle makes the socket readable and ``consume_input`` raise, so
the loop reconnects instead of waiting forever on a dead socket.
"""

import select
import socket
import threading
import time
from typing import Iterable, Optional

import psycopg

CHANNEL = "relaybus"


class Waker:
    """Lets any thread end the current wait at once. Pokes before the wait are kept."""

    def __init__(self):
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)

    def fileno(self) -> int:
        return self._reader.fileno()

    def poke(self) -> None:
        try:
            self._writer.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # the buffer is full of pokes already, or closed at shutdown: one is enough

    def drain(self) -> bool:
        """Takes the pokes; True if there were any."""
        poked = False
        try:
            while self._reader.recv(4096):
                poked = True
        except (BlockingIOError, OSError):
            pass
        return poked

    def close(self) -> None:
        self._reader.close()
        self._writer.close()


class NotificationWait:
    def __init__(self, handlers: Iterable[str], waker: Waker):
        self._handlers = frozenset(handlers)
        self._waker = waker
        self._lock = threading.Lock()
        self._pending = False  # a notification for our handlers arrived and is not used yet

    def listen(self, conn: psycopg.Connection) -> None:
        # Notifications that arrive while a claim runs are delivered to this callback by
        # psycopg; the next wait then returns at once.
        conn.add_notify_handler(lambda n: self._notified(n.channel, n.payload))
        conn.execute(f"LISTEN {CHANNEL}")

    def _notified(self, channel: str, payload: str) -> None:
        if channel == CHANNEL and payload in self._handlers:
            with self._lock:
                self._pending = True

    def _take_pending(self) -> bool:
        with self._lock:
            pending, self._pending = self._pending, False
            return pending

    def wait(self, conn: Optional[psycopg.Connection], timeout: float) -> str:
        """Returns 'notified', 'poked' or 'timeout'. ``conn`` is the listening connection,
        or None without LISTEN. Raises psycopg.OperationalError if it died. A poke (the
        worker's own news) wins over a notification that came with it."""
        if self._take_pending():
            return "poked" if self._waker.drain() else "notified"
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            sources = [self._waker] if conn is None else [self._waker, conn.pgconn.socket]
            readable, _, _ = select.select(sources, [], [], remaining)
            if self._waker in readable:
                self._waker.drain()
                self._take_pending()
                return "poked"
            if readable:
                self._read_notifications(conn)
                if self._take_pending():
                    return "notified"
                # Something else arrived (a notice, a notification for another handler):
                # keep waiting for the rest of the timeout.

    def forget(self, conn: psycopg.Connection) -> None:
        """Forgets the notifications heard so far, those still in the socket included: the
        claim about to begin answers them. Raises psycopg.OperationalError if the
        connection died."""
        self._read_notifications(conn)
        self._take_pending()

    def _read_notifications(self, conn: psycopg.Connection) -> None:
        pgconn = conn.pgconn
        pgconn.consume_input()  # raises OperationalError on a closed or broken connection
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            raise psycopg.OperationalError("the claim connection is broken")
        while True:
            note = pgconn.notifies()
            if note is None:
                return
            self._notified(note.relname.decode("utf-8", "replace"),
                           note.extra.decode("utf-8", "replace"))
