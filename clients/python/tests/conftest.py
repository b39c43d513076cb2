"""Fixtures: one database with relaybus for the session, unique handlers per test, workers
that are always stopped, and polling helpers.

The cluster comes from the PG* environment (a superuser, relaybus preloaded). Tests share
the database and isolate themselves by handler name: a worker claims only its handlers,
and every assertion filters by handler.
"""

import os
import secrets
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import relaybus  # noqa: E402


def unique(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(4)}"


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.005, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def _server(dbname="postgres"):
    return psycopg.connect(dbname=dbname, autocommit=True)


@pytest.fixture(scope="session")
def make_database():
    """Creates databases named relaybus_py_*, dropped at the end of the session; relaybus's
    default version is installed unless ``version`` names another (or ``extension`` is
    false)."""
    created = []

    def make(extension: bool = True, version: str = None) -> str:
        name = unique(f"relaybus_py_{os.getpid()}")
        with _server() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
            # Function call counts, so tests can count statements on the server side.
            conn.execute(f"ALTER DATABASE \"{name}\" SET track_functions = 'all'")
        created.append(name)
        if extension:
            with _server(name) as conn:
                if version is None:
                    conn.execute("CREATE EXTENSION relaybus")
                else:
                    conn.execute(f"CREATE EXTENSION relaybus VERSION '{version}'")
        return name

    yield make
    with _server() as conn:
        for name in created:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def dbname(make_database):
    return make_database()


@pytest.fixture(scope="session")
def conninfo(dbname):
    return f"dbname={dbname}"


@pytest.fixture
def admin(dbname):
    """A superuser connection in autocommit mode, for setting up and inspecting."""
    with _server(dbname) as conn:
        yield conn


@pytest.fixture
def subscribe(admin):
    """subscribe(max_attempts=..., backoff_base=...) -> (handler, event_type), both unique."""
    def make(max_attempts: int = 25, backoff_base: str = "1 second"):
        handler = unique("h")
        event_type = unique("t")
        admin.execute("SELECT relaybus.subscribe(%s, ARRAY[%s], max_attempts => %s, "
                      "backoff_base => %s::interval)",
                      (handler, event_type, max_attempts, backoff_base))
        return handler, event_type
    return make


@pytest.fixture
def workers(conninfo):
    """workers(**options) -> a started-later Worker on the test database; every worker a
    test makes is stopped when the test ends, pass or fail."""
    made = []

    def make(name=None, **options) -> relaybus.Worker:
        options.setdefault("poll_interval", 0.5)
        worker = relaybus.Worker(options.pop("conninfo", conninfo), name=name or unique("w"),
                                 **options)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.stop(grace=0)


_LISTED = 100_000  # more than any test publishes


def deliveries(admin, handler):
    """(event_id, status, attempts, last_error) of a handler's unfinished deliveries, by
    event id, as relaybus.list_deliveries reports them: status 'pending' (waiting),
    'processing' (in some lane's in-flight list) or 'dead'; a completed (or cancelled)
    delivery is not listed. Read through the SQL API, not the tables, whose layout the
    extension's versions change (0.3.0 keeps finished deliveries, and keeps status, attempts
    and last_error in relaybus.exceptions)."""
    rows = admin.execute(
        "SELECT event_id, status, attempts, last_error "
        "FROM relaybus.list_deliveries(handler => %s, max_rows => %s) ORDER BY event_id",
        (handler, _LISTED + 1)).fetchall()
    assert len(rows) <= _LISTED, "deliveries() would have cut the listing short"
    return rows


def held_lanes(admin, worker_name):
    return admin.execute("SELECT count(*) FROM relaybus.lanes WHERE lease_owner = %s",
                         (worker_name,)).fetchone()[0]


def publish_many(conninfo, event_type, count, key=None, payload=None):
    """Publishes count events in one committed transaction; returns their ids in order."""
    with psycopg.connect(conninfo) as conn:
        return relaybus.publish_batch(conn, [
            {"type": event_type, "payload": dict(payload or {}, n=i),
             **({"key": key(i) if callable(key) else key} if key is not None else {})}
            for i in range(count)])


CLIENT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def spawn_worker(conninfo, name, handler, body, **options):
    """A worker in a process of its own, running ``body`` (indented code with ``event``,
    ``pathlib`` and ``time`` in scope) as the handler, until it is signalled or killed."""
    script = textwrap.dedent(f"""
        import pathlib, time, relaybus
        worker = relaybus.Worker({conninfo!r}, name={name!r}, poll_interval=0.2, **{options!r})

        @worker.handler({handler!r})
        def handle(event):
    """) + textwrap.indent(textwrap.dedent(body), "    ") + "\nworker.run_forever()\n"
    return subprocess.Popen([sys.executable, "-c", script],
                            env=dict(os.environ, PYTHONPATH=CLIENT_DIR),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
