"""Ends attempts on a connection of its own: completions in batches, failures one by one.

A quick handler finishes in microseconds; one ``complete`` per delivery would cost a round
trip and a commit each, more than the claim that fetched a whole batch. So completions
that arrive within ``delay`` go out as one ``complete_many`` (at most ``max_batch`` tokens),
and at once when no handler is left running (``idle``): waiting then would only add the
delay to every claim cycle, since the claim loop refills when capacity is settled.
Failures, burials and releases are rare and each needs its own result, so each is one
statement, on the same thread and connection.

Nothing is given up while the worker runs: an attempt counts as ended (its capacity
freed, ``on_settled``) only once the server has ended it, because until then the delivery
stays in its lane's in-flight list, blocking its key, and the lease renewer keeps that lane.
Errors are retried on a new connection, with a pause that doubles up to ``_MAX_PAUSE``:
``complete_many`` skips tokens already completed, ``fail``/``bury``/``release`` of a spent
token report 'lost', so resending after an unknown outcome changes nothing twice. One
error is not retried as is: a ``fail`` or ``bury`` the server (or psycopg) refuses for a
reason other than the connection (most likely its error text) is sent again without
the text, and if that is refused too the delivery is released instead. Once stop() began,
a statement gets ``_STOP_RETRIES`` tries; then it is given up (logged): its lane's lease
expires, the takeover charges the attempt and the delivery runs again (at-least-once).
"""

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, List, Optional

import psycopg

from .connections import close_quietly
from .event import Event
from .stats import StatsRecorder

log = logging.getLogger("relaybus")

_STOP_RETRIES = 4  # tries of a statement once stopping (3 pauses, 1.4 s)
_FIRST_PAUSE = 0.2  # seconds, doubled after each error in a row
_MAX_PAUSE = 5.0

# What _execute returns besides the statement's result.
_REFUSED = "refused"   # a non-connection error, with refusable=True
_GAVE_UP = "gave up"   # stopping, and the statement could not be sent


@dataclass
class _Ending:
    kind: str  # "fail", "bury" or "release"
    event: Event
    error: Optional[str] = None
    exc: Optional[BaseException] = None  # the handler's exception, for the log's traceback


def _one_line(text: Optional[str]) -> Optional[str]:
    """An error text for a one-line log record: its line breaks spelled as \\n."""
    if text is None:
        return None
    return text.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n")


class Settler:
    def __init__(self, connect: Callable[[], psycopg.Connection], delay: float, max_batch: int,
                 on_settled: Callable[[int], None], stats: StatsRecorder):
        self._connect = connect
        self._delay = delay
        self._max_batch = max_batch
        self._on_settled = on_settled  # called with how many attempts ended (capacity freed)
        self._stats = stats
        self._cond = threading.Condition()
        self._completions: List[str] = []
        self._first_at = 0.0  # arrival of the oldest queued completion (monotonic)
        self._endings: Deque[_Ending] = deque()
        self._flush_now = False
        self._stopping = False
        self._stop_event = threading.Event()  # cuts retry pauses short
        self._errors = 0  # statements in a row that failed; 0 after a success
        self._conn: Optional[psycopg.Connection] = None
        self._thread = threading.Thread(target=self._run, name="relaybus-settler", daemon=True)

    # Called from handler threads and the worker.

    def complete(self, token: str) -> None:
        with self._cond:
            if not self._completions:
                self._first_at = time.monotonic()
            self._completions.append(token)
            if len(self._completions) >= self._max_batch:
                self._cond.notify()

    def fail(self, event: Event, error: str, exc: Optional[BaseException] = None) -> None:
        self._end(_Ending("fail", event, error, exc))

    def bury(self, event: Event, error: str, exc: Optional[BaseException] = None) -> None:
        self._end(_Ending("bury", event, error, exc))

    def release(self, event: Event) -> None:
        self._end(_Ending("release", event))

    def idle(self) -> None:
        """No handler is running: what is queued cannot grow within the delay."""
        with self._cond:
            self._flush_now = True
            self._cond.notify()

    def _end(self, ending: _Ending) -> None:
        with self._cond:
            self._endings.append(ending)
            self._cond.notify()

    # Lifecycle.

    def start(self) -> None:
        self._thread.start()

    def stop(self, last: Optional[Callable[[psycopg.Connection], None]] = None) -> None:
        """Sends everything queued, then runs ``last`` (the worker's relinquish) on the
        settlement connection, and closes it."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._stop_event.set()
        self._thread.join()
        if last is not None:
            status, error = self._execute(last, "the shutdown's relinquish", refusable=True)
            if status is not None:
                log.error("the shutdown's relinquish %s: %s (the lanes are free once their "
                          "leases expire)", "failed" if status == _REFUSED else "was given up",
                          error)
        close_quietly(self._conn)
        self._conn = None

    # The thread.

    def _run(self) -> None:
        while True:
            with self._cond:
                completions, endings = self._next_batch()
                if completions is None:
                    return
            try:
                if completions:
                    self._complete_many(completions)
            except Exception:  # noqa: BLE001 (the thread must outlive a bug in one ending)
                log.exception("settling %d completions failed", len(completions))
            for ending in endings:
                try:
                    self._send(ending)
                except Exception:  # noqa: BLE001
                    log.exception("settling the %s of event %s failed", ending.kind,
                                  ending.event.id)

    def _next_batch(self):
        """Waits for work; returns (completions, endings) to send now, or (None, None) once
        stopping and everything is sent. Holds self._cond."""
        while True:
            if self._endings or len(self._completions) >= self._max_batch or (
                    self._completions and (self._flush_now or self._stopping)):
                break
            if self._completions:
                remaining = self._first_at + self._delay - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            elif self._stopping:
                return None, None
            else:
                self._cond.wait()
        completions = self._completions[:self._max_batch]
        del self._completions[:self._max_batch]
        if self._completions:
            self._first_at = time.monotonic()
        self._flush_now = False
        endings = list(self._endings)
        self._endings.clear()
        return completions, endings

    def _execute(self, statement: Callable[[psycopg.Connection], object], what: str,
                 refusable: bool = False):
        """Runs ``statement`` on the settlement connection until it succeeds and returns
        (None, its result); or returns (_REFUSED, error) for a non-connection error when
        ``refusable``; or (_GAVE_UP, error) once stopping and out of tries."""
        pause = _FIRST_PAUSE
        tries_while_stopping = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                result = statement(self._conn)
                self._errors = 0
                return None, result
            except Exception as exc:  # noqa: BLE001 (psycopg's, or an unencodable argument)
                connection_error = isinstance(exc, psycopg.OperationalError)
                if not connection_error and refusable:
                    if self._conn is not None and self._conn.broken:
                        close_quietly(self._conn)  # reopened for the next statement
                        self._conn = None
                    return _REFUSED, exc
                # A new connection for the next try: it may reach a new primary, say.
                close_quietly(self._conn)
                self._conn = None
                self._errors += 1
                if self._stop_event.is_set():
                    tries_while_stopping += 1
                    # Once the errors in a row reach the limit, the rest is given up at
                    # once: stop() takes ~1.4 s in all, not that per queued ending.
                    if tries_while_stopping >= _STOP_RETRIES or self._errors >= _STOP_RETRIES:
                        return _GAVE_UP, exc
                    pause = min(pause, _FIRST_PAUSE * 2 ** (tries_while_stopping - 1))
                log.warning("%s during %s, retrying in %gs: %s",
                            "connection error" if connection_error else "error", what, pause, exc)
                self._stop_event.wait(pause)
                pause = min(pause * 2, _MAX_PAUSE)

    def _complete_many(self, tokens: List[str]) -> None:
        def statement(conn):
            return conn.execute("SELECT relaybus.complete_many(%s::text[])", (tokens,)).fetchone()[0]
        status, done = self._execute(statement, f"complete_many of {len(tokens)} deliveries")
        self._stats.add(completion_statements=1)
        if status == _GAVE_UP:
            log.error("giving up on completing %d deliveries at shutdown: %s (their lanes' "
                      "leases will expire, and the takeover charges each an attempt and runs "
                      "it again)", len(tokens), done)
            return  # not settled: on the server they are still in flight
        self._stats.add(completed=done, lost=len(tokens) - done)
        if done < len(tokens):
            log.warning("%d of %d completions found their lease lost (the lanes were "
                        "taken over); those deliveries run again", len(tokens) - done, len(tokens))
        self._on_settled(len(tokens))

    def _send(self, ending: _Ending) -> None:
        event = ending.event
        token = event.lease_token
        kind, error = ending.kind, ending.error
        what = f"{kind} of event {event.id}"
        if kind in ("fail", "bury"):
            sql = f"SELECT relaybus.{kind}(%s, %s)"
            status, result = self._execute(
                lambda conn: conn.execute(sql, (token, error)).fetchone()[0], what, refusable=True)
            if status == _REFUSED:
                log.warning("%s was refused with its error text (%s); sending it without",
                            what, result)
                status, result = self._execute(
                    lambda conn: conn.execute(sql, (token, None)).fetchone()[0], what,
                    refusable=True)
            if status == _REFUSED:
                log.error("handler %s failed on event %s: %s; relaybus refused the %s (%s), "
                          "so the delivery is released instead (no attempt charged)",
                          event.handler, event.id, error, kind, result, exc_info=ending.exc)
                kind, what = "release", f"release of event {event.id}"
        if kind == "release":
            status, result = self._execute(
                lambda conn: conn.execute("SELECT relaybus.release(%s)", (token,)).fetchone()[0],
                what)
        if status == _GAVE_UP:
            log.error("giving up on the %s at shutdown: %s (the lane's lease will expire, and "
                      "the takeover charges the attempt and runs the delivery again)", what, result)
            return  # not settled: on the server it is still in flight
        # attempts=N is event.attempts, as claim returned it and the handler saw it: the
        # attempts charged before the one that failed (0 on a first try). The fail just
        # sent charged this one, so list_deliveries now says N + 1.
        if kind == "fail":
            self._stats.add(failed=1, retried=result == "retry", dead=result == "dead",
                            lost=result == "lost")
            if result == "dead":
                log.error("handler %s failed on event %s, attempts=%d, and it is dead "
                          "(max_attempts reached): %s", event.handler, event.id,
                          event.attempts, _one_line(error), exc_info=ending.exc)
            elif result == "retry":
                # An expected retry: one line; the traceback only for whoever asks for DEBUG.
                log.warning("handler %s failed on event %s, attempts=%d, will retry: %s",
                            event.handler, event.id, event.attempts, _one_line(error))
                if ending.exc is not None:
                    log.debug("traceback of handler %s on event %s, attempts=%d:",
                              event.handler, event.id, event.attempts, exc_info=ending.exc)
            elif result == "lost":
                log.warning("handler %s failed on event %s, attempts=%d, but the lease was "
                            "already lost: %s", event.handler, event.id, event.attempts,
                            _one_line(error))
        elif kind == "bury":
            self._stats.add(buried=result is True, lost=result is False)
            if result:
                log.error("handler %s failed on event %s, attempts=%d, and it is dead "
                          "(buried): %s", event.handler, event.id, event.attempts,
                          _one_line(error), exc_info=ending.exc)
        else:
            self._stats.add(released=result is True, lost=result is False)
        self._on_settled(1)
