"""Ends attempts on a connection of its own: completions in batches, failures one by one.

A quick handler finishes in microseconds; one ``complete`` per delivery would cost a round
trip and a commit each, more than the claim that fetched a whole batch. So completions
that arrive within ``delay`` go out as one ``complete_many`` (at most ``max_batch`` tokens),
and at once when no handler is left running (``idle``): waiting then would only add the
delay to every claim cycle, since the claim loop refills when capacity is settled.
Failures, burials and releases are rare and each needs its own result, so each is one
statement, on the same thread and connection.

Connection errors are retried on a new connection: ``complete_many`` skips tokens already
completed, ``fail``/``bury``/``release`` of a spent token report 'lost', so resending after
an unknown outcome changes nothing twice. After the last retry the attempt is given up
(logged): its lane's lease expires and the delivery runs again (at-least-once).
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

_RETRIES = 4
_RETRY_PAUSE = 0.2  # seconds, doubled after each connection error


@dataclass
class _Ending:
    kind: str  # "fail", "bury" or "release"
    event: Event
    error: Optional[str] = None
    exc: Optional[BaseException] = None  # the handler's exception, for the log's traceback


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
        self._thread.join()
        if last is not None:
            self._with_connection(last, "the shutdown's relinquish")
        close_quietly(self._conn)
        self._conn = None

    # The thread.

    def _run(self) -> None:
        while True:
            with self._cond:
                completions, endings = self._next_batch()
                if completions is None:
                    return
            if completions:
                self._complete_many(completions)
            for ending in endings:
                self._send(ending)

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

    def _with_connection(self, statement: Callable[[psycopg.Connection], object], what: str):
        pause = _RETRY_PAUSE
        for attempt in range(1, _RETRIES + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                return statement(self._conn)
            except psycopg.OperationalError as exc:
                close_quietly(self._conn)
                self._conn = None
                if attempt == _RETRIES:
                    log.error("giving up on %s after %d connection errors: %s "
                              "(the lease will expire and the delivery run again)", what, attempt, exc)
                    return None
                log.warning("connection error during %s, retrying: %s", what, exc)
                time.sleep(pause)
                pause *= 2
            except psycopg.Error as exc:
                log.error("%s failed: %s", what, exc)
                if self._conn is not None and self._conn.broken:
                    close_quietly(self._conn)  # reopened for the next statement
                    self._conn = None
                return None
        return None

    def _complete_many(self, tokens: List[str]) -> None:
        def statement(conn):
            return conn.execute("SELECT relaybus.complete_many(%s::text[])", (tokens,)).fetchone()[0]
        done = self._with_connection(statement, f"complete_many of {len(tokens)} deliveries")
        self._stats.add(completion_statements=1, completed=done or 0,
                        lost=(len(tokens) - done) if done is not None else 0)
        if done is not None and done < len(tokens):
            log.warning("%d of %d completions found their lease lost (the lanes were "
                        "taken over); those deliveries run again", len(tokens) - done, len(tokens))
        self._on_settled(len(tokens))

    def _send(self, ending: _Ending) -> None:
        event = ending.event
        if ending.kind == "fail":
            outcome = self._with_connection(
                lambda conn: conn.execute("SELECT relaybus.fail(%s, %s)",
                                          (event.lease_token, ending.error)).fetchone()[0],
                f"fail of event {event.id}")
            self._stats.add(failed=1, retried=outcome == "retry", dead=outcome == "dead",
                            lost=outcome == "lost")
            if outcome == "dead":
                log.error("event %s is dead for handler %s after %d attempts: %s",
                          event.id, event.handler, event.attempts + 1, ending.error,
                          exc_info=ending.exc)
            elif outcome == "retry":
                log.warning("handler %s failed on event %s (attempt %d), will retry: %s",
                            event.handler, event.id, event.attempts + 1, ending.error,
                            exc_info=ending.exc)
            elif outcome == "lost":
                log.warning("handler %s failed on event %s but the lease was already "
                            "lost: %s", event.handler, event.id, ending.error)
        elif ending.kind == "bury":
            buried = self._with_connection(
                lambda conn: conn.execute("SELECT relaybus.bury(%s, %s)",
                                          (event.lease_token, ending.error)).fetchone()[0],
                f"bury of event {event.id}")
            self._stats.add(buried=buried is True, lost=buried is False)
            if buried:
                log.error("event %s is dead for handler %s (buried): %s",
                          event.id, event.handler, ending.error, exc_info=ending.exc)
        else:
            released = self._with_connection(
                lambda conn: conn.execute("SELECT relaybus.release(%s)",
                                          (event.lease_token,)).fetchone()[0],
                f"release of event {event.id}")
            self._stats.add(released=released is True, lost=released is False)
        self._on_settled(1)
