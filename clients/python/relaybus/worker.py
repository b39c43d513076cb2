"""Worker: claims deliveries for its handlers, runs them on a thread pool, ends each attempt.

    worker = Worker(conninfo, name="mailer-1")

    @worker.handler("mailer")
    def send(event):
        ...

    worker.run_forever()   # or start() ... stop()

Threads, not processes or asyncio: handlers are usually I/O-bound (HTTP, SMTP, SQL), and
psycopg and most client libraries release the GIL while they wait, so ``concurrency``
threads overlap that many waits with no change to the handler's code. ``concurrency=1``
runs handlers one after another. CPU-bound handlers gain nothing from threads: run several
worker processes instead (one name, each its own holder). Running deliveries side by side
never breaks per-key order: relaybus hands out a key's next delivery only after the
previous one's attempt has ended on the server.

The pieces, each on its own thread and connection: the claim loop (claim, LISTEN), the
handler pool, the settler (complete_many, fail, bury, release, relinquish), the lease
renewer; transactional handlers use one connection per pool thread. Every statement that
takes a holder passes this instance's, so none of these connections takes over another's
lanes.
"""

import logging
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Callable, Dict, Iterable, Optional, Type

from . import arguments, connections
from .claim_loop import ClaimLoop
from .event import Event
from .handler_runner import HandlerSpec, Outcome, ThreadConnections, error_text, run_handler
from .holder import new_holder
from .lease_renewer import LeaseRenewer
from .settler import Settler
from .setup_checks import check_worker, claims_renew_held_lanes
from .stats import StatsRecorder, WorkerStats

log = logging.getLogger("relaybus")

_RESERVED_PREFIX = "relaybus-sql-"


class _Job:
    __slots__ = ("event", "spec", "state", "thread")

    def __init__(self, event: Event, spec: HandlerSpec):
        self.event = event
        self.spec = spec
        self.state = "queued"  # -> running -> done; queued -> released; running -> abandoned
        self.thread: Optional[int] = None


class Worker:
    """A relaybus worker for the handlers registered on it.

    ``conninfo`` is a libpq connection string or URI ("" uses the PG* environment).
    ``concurrency`` handlers run at once, on as many threads; a claim asks for up to
    ``batch_size`` deliveries (default: concurrency), and the worker holds at most the
    larger of the two, so a batch bigger than the pool waits in line for threads.
    ``name`` is the worker's name in relaybus (it shows in relaybus.lanes and
    list_deliveries); several instances may share it, each gets its own ``holder``.
    ``lease`` (seconds) is how long claimed lanes are held without renewal; the worker
    renews every third of it while handlers run. ``poll_interval`` (seconds) bounds every
    wait; with ``listen`` a publish wakes the worker at once, but a claim a notification
    causes starts at least ``wakeup_interval`` (seconds) after the previous claim began
    (anyone who can connect may send one). ``shutdown_grace`` (seconds)
    is how long stop() lets running handlers finish before releasing their deliveries.
    ``bury_on``: exception classes that dead-letter a delivery at once, for every handler.
    """

    def __init__(self, conninfo: str = "", *, name: str, holder: Optional[str] = None,
                 concurrency: int = 4, batch_size: Optional[int] = None,
                 lease: arguments.Seconds = 30.0, poll_interval: arguments.Seconds = 1.0,
                 listen: bool = True, wakeup_interval: arguments.Seconds = 0.001,
                 completion_delay: arguments.Seconds = 0.002,
                 completion_batch: int = 1000, shutdown_grace: arguments.Seconds = 10.0,
                 bury_on: Iterable[Type[BaseException]] = (),
                 connect_kwargs: Optional[dict] = None):
        if not isinstance(conninfo, str):
            raise TypeError("conninfo must be a libpq connection string or URI")
        self._name = arguments.name(name, "name")
        if self._name.startswith(_RESERVED_PREFIX):
            raise ValueError(f"worker names starting with {_RESERVED_PREFIX!r} belong to "
                             "relaybus's in-database handler workers")
        self._holder = new_holder() if holder is None else arguments.name(holder, "holder")
        self._concurrency = arguments.positive_int(concurrency, "concurrency", 10000)
        self._batch_size = arguments.positive_int(
            concurrency if batch_size is None else batch_size, "batch_size", 10000)
        # Deliveries held at once. A batch larger than the thread pool waits in line for a
        # thread (its lease renewed meanwhile): one claim and few complete_many statements
        # serve many quick handlers, where claims of the free threads only would come back
        # a few deliveries at a time.
        self._capacity = max(self._concurrency, self._batch_size)
        self._lease = timedelta(seconds=arguments.seconds(lease, "lease", 0, 86400))
        self._poll_interval = arguments.seconds(poll_interval, "poll_interval", 0, 3600)
        self._listen = bool(listen)
        self._wakeup_interval = arguments.seconds(wakeup_interval, "wakeup_interval", 0, 60,
                                                  minimum_inclusive=True)
        self._completion_delay = arguments.seconds(completion_delay, "completion_delay", 0, 10,
                                                   minimum_inclusive=True)
        self._completion_batch = arguments.positive_int(completion_batch, "completion_batch", 10000)
        self._grace = arguments.seconds(shutdown_grace, "shutdown_grace", 0, 86400,
                                        minimum_inclusive=True)
        self._bury_on = arguments.exception_classes(bury_on, "bury_on")
        # Validates the conninfo now, not in a thread later.
        self._conninfo = connections.worker_conninfo(conninfo, self._name, connect_kwargs or {})

        self._handlers: Dict[str, HandlerSpec] = {}
        self._stats = StatsRecorder()
        # Jobs, in-flight and running counts. Its lock is reentrant (Condition's default),
        # so _settled may be called from code that already holds it.
        self._lock = threading.Condition()
        self._jobs: Dict[str, _Job] = {}
        self._in_flight = 0  # claimed and not yet ended on the server
        self._running = 0    # handlers executing now
        self._lifecycle = threading.Lock()
        self._started = False
        self._stopped = False

    # Registration.

    def handler(self, name: str, *, transactional: bool = False,
                bury_on: Iterable[Type[BaseException]] = ()) -> Callable:
        """Decorator: ``@worker.handler("mailer")`` registers ``f(event)`` for relaybus
        handler "mailer". With ``transactional=True`` it is called as ``f(event, conn)``
        inside a transaction on ``conn`` that also completes the delivery."""
        def register(fn):
            self.add_handler(name, fn, transactional=transactional, bury_on=bury_on)
            return fn
        return register

    def add_handler(self, name: str, fn: Callable, *, transactional: bool = False,
                    bury_on: Iterable[Type[BaseException]] = ()) -> None:
        """Registers ``fn`` for relaybus handler ``name`` (see handler())."""
        arguments.name(name, "handler name")
        spec = HandlerSpec(name, fn, bool(transactional),
                           self._bury_on + arguments.exception_classes(bury_on, "bury_on"))
        spec.check_signature()
        with self._lifecycle:
            if self._started:
                raise RuntimeError("register handlers before start(): the claim names them")
            if name in self._handlers:
                raise ValueError(f"handler {name!r} is already registered")
            self._handlers[name] = spec

    # Properties.

    @property
    def name(self) -> str:
        return self._name

    @property
    def holder(self) -> str:
        return self._holder

    @property
    def stats(self) -> WorkerStats:
        return self._stats.snapshot()

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    # Lifecycle.

    def start(self) -> None:
        """Checks the database (extension, role, subscriptions; raising
        ExtensionNotInstalled, PermissionDenied or HandlerNotSubscribed), then starts the
        threads and returns."""
        with self._lifecycle:
            if self._stopped:
                raise RuntimeError("a stopped Worker cannot start again; create a new one")
            if self._started:
                raise RuntimeError("the Worker is already started")
            if not self._handlers:
                raise ValueError("register at least one handler before start()")
            handlers = sorted(self._handlers)
            conn = self._connect()
            try:
                version = check_worker(conn, self._name, self._holder, handlers, self._lease)
            finally:
                connections.close_quietly(conn)
            self._thread_conns = ThreadConnections(self._connect)
            self._executor = ThreadPoolExecutor(max_workers=self._concurrency,
                                                thread_name_prefix=f"relaybus-{self._name}")
            self._settler = Settler(self._connect, self._completion_delay, self._completion_batch,
                                    self._settled, self._stats)
            self._claims = ClaimLoop(self._connect, self._name, self._holder, handlers,
                                     self._lease, self._batch_size, self._free_capacity,
                                     self._dispatch, self._poll_interval, self._listen,
                                     self._wakeup_interval, self._stats,
                                     claims_renew_held_lanes(version))
            self._renewer = LeaseRenewer(self._connect, self._name, self._holder, self._lease,
                                         lambda: self.in_flight > 0, self._stats,
                                         lambda: self._claims.lanes_renewed_at)
            self._settler.start()
            self._renewer.start()
            self._claims.start()
            self._started = True
        log.info("worker %s (holder %s) started for %s", self._name, self._holder,
                 ", ".join(handlers))

    def stop(self, grace: Optional[arguments.Seconds] = None) -> None:
        """Graceful shutdown; returns when done, and is idempotent.

        1. Stops claiming (a claim under way finishes; what it returns is queued).
        2. Releases the deliveries not started yet: no attempt is charged and another
           worker may claim them at once, instead of this one starting work it would
           then have to hurry.
        3. Lets running handlers finish for up to ``grace`` seconds (default
           shutdown_grace), renewing their leases: a finished handler is the cheapest
           outcome, nothing runs twice. Those still running after the grace are released
           too, so that stop() takes a bounded time and their deliveries run again
           elsewhere without waiting for a lease to expire or being charged an attempt.
           Python cannot stop a thread: such a handler goes on, and what it does at the
           end is ignored (a transactional one finds its token spent and rolls back).
        4. Sends the queued completions and failures, then relinquish(name, holder), so
           the lanes are free for other workers now rather than when the lease expires.
        """
        if grace is None:
            grace = self._grace
        else:
            grace = arguments.seconds(grace, "grace", 0, 86400, minimum_inclusive=True)
        with self._lifecycle:
            if not self._started or self._stopped:
                return
            self._stopped = True
        self._claims.stop()
        with self._lock:
            queued = [job for job in self._jobs.values() if job.state == "queued"]
            for job in queued:
                job.state = "released"
                del self._jobs[job.event.lease_token]
        for job in queued:
            self._settler.release(job.event)

        deadline = time.monotonic() + grace
        with self._lock:
            while self._running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            overrun = [job for job in self._jobs.values() if job.state == "running"]
            for job in overrun:
                job.state = "abandoned"
                del self._jobs[job.event.lease_token]
        for job in overrun:
            log.warning("handler %s still runs event %s after the %gs grace; "
                        "releasing it (it will run again)", job.spec.name, job.event.id, grace)
            self._settler.release(job.event)

        self._executor.shutdown(wait=False, cancel_futures=True)
        self._renewer.stop()
        self._settler.stop(last=self._relinquish)
        self._thread_conns.close_all_but({job.thread for job in overrun})
        log.info("worker %s stopped (%d released)", self._name, len(queued) + len(overrun))

    def run_forever(self, signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
        """start(), then wait until one of ``signals`` arrives, then stop(). Call it from
        the main thread (only it may set signal handlers). A second signal during the
        shutdown gets the previous handler (Ctrl-C twice raises KeyboardInterrupt)."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("run_forever() must run in the main thread (signal handlers); "
                               "elsewhere use start() and stop()")
        requested = threading.Event()
        signals = list(signals)
        previous = {}

        def on_signal(signum, frame):
            requested.set()
            for number, handler in previous.items():
                signal.signal(number, handler)

        for number in signals:
            previous[number] = signal.signal(number, on_signal)
        try:
            self.start()
            while not requested.wait(0.5):  # a timeout keeps the main thread responsive
                pass
            log.info("worker %s received a stop signal", self._name)
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            self.stop()

    def __enter__(self) -> "Worker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # Internals.

    def _connect(self):
        return connections.connect(self._conninfo)

    def _relinquish(self, conn) -> None:
        handed_back = conn.execute("SELECT relaybus.relinquish(%s, %s)",
                                   (self._name, self._holder)).fetchone()[0]
        log.info("worker %s relinquished %d lanes", self._name, handed_back)

    def _free_capacity(self) -> int:
        with self._lock:
            return self._capacity - self._in_flight

    def _settled(self, count: int) -> None:
        """``count`` attempts ended on the server: their capacity is free again, and their
        keys' next deliveries may be claimable now."""
        with self._lock:
            self._in_flight -= count
        if self._started and not self._stopped:
            self._claims.waker.poke()

    def _dispatch(self, rows) -> None:
        jobs = []
        with self._lock:
            self._in_flight += len(rows)
            for row in rows:
                event = Event.from_claim_row(row)
                job = _Job(event, self._handlers[event.handler])
                self._jobs[event.lease_token] = job
                jobs.append(job)
        for job in jobs:
            self._executor.submit(self._run_job, job)

    def _run_job(self, job: _Job) -> None:
        # The pool keeps what escapes in a future nobody reads: log it at least.
        try:
            self._run_job_unguarded(job)
        except BaseException:  # noqa: BLE001
            log.exception("worker %s: internal error after running event %s",
                          self._name, job.event.id)

    def _run_job_unguarded(self, job: _Job) -> None:
        with self._lock:
            if job.state != "queued":
                return  # released by stop() before it started
            job.state = "running"
            job.thread = threading.get_ident()
            self._running += 1
        try:
            outcome = run_handler(job.spec, job.event, self._thread_conns)
        except BaseException as exc:  # noqa: BLE001 (else the delivery stays in flight)
            log.error("running handler %s on event %s raised outside the handler; failing "
                      "the attempt", job.spec.name, job.event.id, exc_info=True)
            outcome = Outcome("fail", _fallback_error_text(exc), exc)
        with self._lock:
            self._running -= 1
            abandoned = job.state == "abandoned"
            if not abandoned:
                job.state = "done"
                del self._jobs[job.event.lease_token]
                # Queued while holding the lock, so stop() cannot flush the settler
                # between this job leaving the table and its ending being queued.
                self._end_attempt(job, outcome)
            # Nothing left to start or finish: no completion can join the queued ones.
            idle = not self._jobs
            self._lock.notify_all()
        if abandoned:
            # Its delivery was released at stop(); what it did is not reported to relaybus.
            # A transactional one found its token spent and rolled back.
            if outcome.kind == "lost":
                self._stats.add(lost=1)
            log.info("handler %s finished event %s after it was released (%s)",
                     job.spec.name, job.event.id, outcome.kind)
            self._thread_conns.close(job.thread)
            return
        if idle:
            self._settler.idle()

    def _end_attempt(self, job: _Job, outcome) -> None:
        event = job.event
        if outcome.kind == "complete":
            self._stats.add(succeeded=1)
            self._settler.complete(event.lease_token)
        elif outcome.kind == "committed":
            self._stats.add(succeeded=1)
            self._settled(1)
        elif outcome.kind == "lost":
            self._stats.add(lost=1)
            log.warning("handler %s on event %s: the lease was lost before the commit; "
                        "its transaction was rolled back (the delivery runs again)",
                        job.spec.name, event.id)
            self._settled(1)
        elif outcome.kind == "bury":
            self._settler.bury(event, outcome.error, outcome.exc)
        else:
            self._settler.fail(event, outcome.error, outcome.exc)


def _fallback_error_text(exc: BaseException) -> str:
    try:
        return error_text(exc)
    except BaseException:  # noqa: BLE001
        return "an exception whose text could not be read"
