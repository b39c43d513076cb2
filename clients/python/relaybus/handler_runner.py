"""Running one handler on one event, and turning what it did into the attempt's end.

A plain handler's success is completed later, in a batch, by the settler. A transactional
handler runs inside a transaction on its thread's connection, and ``relaybus.complete``
runs in that same transaction before it commits: the handler's writes and the completion
commit together or not at all (effectively-once). If the lease was lost meanwhile,
``complete`` returns false and the transaction is rolled back, so another worker's run
is the only one whose writes remain.
"""

import inspect
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple, Type

import psycopg

from .connections import close_quietly
from .errors import Bury
from .event import Event

_MAX_ERROR_TEXT = 8000  # characters of last_error; a traceback-sized message is plenty


@dataclass(frozen=True)
class HandlerSpec:
    name: str
    fn: Callable
    transactional: bool
    bury_on: Tuple[Type[BaseException], ...]

    def check_signature(self) -> None:
        """Refuses at registration a function that could never be called the way it will be."""
        if not callable(self.fn):
            raise TypeError(f"handler {self.name!r}: {self.fn!r} is not callable")
        try:
            signature = inspect.signature(self.fn)
        except (TypeError, ValueError):
            return  # some builtins have no signature; let the call tell
        arguments = ("event", "conn") if self.transactional else ("event",)
        try:
            signature.bind(*arguments)
        except TypeError:
            wanted = "f(event, conn)" if self.transactional else "f(event)"
            raise TypeError(f"handler {self.name!r} must be callable as {wanted}"
                            f"{' (it is transactional)' if self.transactional else ''}; "
                            f"{getattr(self.fn, '__name__', self.fn)!s}{signature} is not") from None


@dataclass(frozen=True)
class Outcome:
    # complete: succeeded, the settler completes it; committed: a transactional handler
    # committed with its completion; lost: its transaction found the lease lost and rolled
    # back; fail / bury: the handler raised.
    kind: str
    error: Optional[str] = None
    exc: Optional[BaseException] = None


class _LeaseLost(Exception):
    pass


def error_text(exc: BaseException) -> str:
    """The exception as last_error: never raises, and always text PostgreSQL can store."""
    if isinstance(exc, Bury):
        text = _message(exc) or "buried by the handler"
    else:
        message = _message(exc)
        text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = storable_text(text)
    return text if len(text) <= _MAX_ERROR_TEXT else text[:_MAX_ERROR_TEXT - 3] + "..."


def _message(exc: BaseException) -> str:
    """str(exc); a __str__ that raises (an API error reading a field the response lacks)
    must not turn a failed attempt into a stranded one, so then repr(), then nothing."""
    try:
        return str(exc)
    except Exception as str_error:  # noqa: BLE001
        try:
            return f"{exc!r} (its str() raised {type(str_error).__name__})"
        except Exception:  # noqa: BLE001
            return f"(its str() raised {type(str_error).__name__}, and so did its repr())"


def storable_text(text: str) -> str:
    """PostgreSQL refuses NUL in text (22021), and UTF-8 has no lone surrogates (what
    bytes decoded with surrogateescape leave): both are spelled as escapes instead."""
    text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class ThreadConnections:
    """One connection per handler thread, opened on first use and reopened when broken,
    for transactional handlers. A thread reuses its connection, so a handler pays no
    connect per event."""

    def __init__(self, connect: Callable[[], psycopg.Connection]):
        self._connect = connect
        self._lock = threading.Lock()
        self._by_thread: Dict[int, psycopg.Connection] = {}

    def get(self) -> psycopg.Connection:
        ident = threading.get_ident()
        with self._lock:
            conn = self._by_thread.get(ident)
        if conn is None or conn.closed or conn.broken:
            close_quietly(conn)
            conn = self._connect()
            with self._lock:
                self._by_thread[ident] = conn
        return conn

    def close(self, ident: Optional[int] = None) -> None:
        """Closes one thread's connection, or without ``ident`` every connection."""
        with self._lock:
            if ident is None:
                conns, self._by_thread = list(self._by_thread.values()), {}
            else:
                conns = [c for c in [self._by_thread.pop(ident, None)] if c is not None]
        for conn in conns:
            close_quietly(conn)

    def close_all_but(self, busy: set) -> None:
        with self._lock:
            idle = [ident for ident in self._by_thread if ident not in busy]
        for ident in idle:
            self.close(ident)


def run_handler(spec: HandlerSpec, event: Event, connections: ThreadConnections) -> Outcome:
    try:
        if not spec.transactional:
            spec.fn(event)
            return Outcome("complete")
        conn = connections.get()
        with conn.transaction():
            spec.fn(event, conn)
            completed = conn.execute("SELECT relaybus.complete(%s)",
                                     (event.lease_token,)).fetchone()[0]
            if not completed:
                raise _LeaseLost()
        return Outcome("committed")
    except _LeaseLost:
        return Outcome("lost")
    except BaseException as exc:  # noqa: BLE001 (any escape would strand the delivery)
        if isinstance(exc, Bury) or (spec.bury_on and isinstance(exc, spec.bury_on)):
            return Outcome("bury", error_text(exc), exc)
        return Outcome("fail", error_text(exc), exc)
