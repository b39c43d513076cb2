"""Setup mistakes raise exceptions that say what to do."""

import psycopg
import pytest

import relaybus
from conftest import unique


@pytest.fixture(scope="module")
def bare_conninfo(make_database):
    """A database without the extension."""
    return f"dbname={make_database(extension=False)}"


@pytest.fixture
def role(dbname):
    """A role with no relaybus role; connections take it on with the startup option
    `role`, so no password or LOGIN is needed."""
    name = unique("relaybus_py_role")
    with psycopg.connect(dbname=dbname, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}" NOLOGIN')
    yield name
    with psycopg.connect(dbname=dbname, autocommit=True) as conn:
        conn.execute(f'DROP ROLE "{name}"')


def _as(dbname, role):
    return f"dbname={dbname} options='-c role={role}'"


def _grant(dbname, grant):
    with psycopg.connect(dbname=dbname, autocommit=True) as conn:
        conn.execute(grant)


def test_publish_without_the_extension(bare_conninfo):
    with psycopg.connect(bare_conninfo) as conn:
        with pytest.raises(relaybus.ExtensionNotInstalled, match="CREATE EXTENSION relaybus") as raised:
            relaybus.publish(conn, "t", {})
        assert isinstance(raised.value.__cause__, psycopg.errors.InvalidSchemaName)
        conn.rollback()
        with pytest.raises(relaybus.ExtensionNotInstalled, match="CREATE EXTENSION relaybus"):
            relaybus.check_publisher(conn)


def test_worker_without_the_extension(bare_conninfo):
    worker = relaybus.Worker(bare_conninfo, name="w")
    worker.add_handler("mailer", lambda event: None)
    with pytest.raises(relaybus.ExtensionNotInstalled, match="CREATE EXTENSION relaybus"):
        worker.start()
    worker.stop()  # nothing started, nothing to stop


def test_publish_without_the_publisher_role(dbname, role, subscribe):
    handler, event_type = subscribe()
    with psycopg.connect(_as(dbname, role)) as conn:
        with pytest.raises(relaybus.PermissionDenied, match="needs relaybus_publisher") as raised:
            relaybus.publish(conn, event_type, {})
        assert "GRANT relaybus_publisher TO" in str(raised.value)
        conn.rollback()
        with pytest.raises(relaybus.PermissionDenied,
                           match=f"GRANT relaybus_publisher TO {role}"):
            relaybus.check_publisher(conn)
    with psycopg.connect(_as(dbname, role), autocommit=True) as conn:
        # Outside a transaction the error can name the role.
        with pytest.raises(relaybus.PermissionDenied, match=f"GRANT relaybus_publisher TO {role}"):
            relaybus.publish(conn, event_type, {})
    _grant(dbname, f'GRANT relaybus_publisher TO "{role}"')
    with psycopg.connect(_as(dbname, role)) as conn:
        relaybus.check_publisher(conn)
        assert relaybus.publish(conn, event_type, {})


def test_worker_without_the_worker_role(dbname, role, subscribe):
    handler, _ = subscribe()

    def start():
        worker = relaybus.Worker(_as(dbname, role), name="w")
        worker.add_handler(handler, lambda event: None)
        worker.start()
        worker.stop()

    with pytest.raises(relaybus.PermissionDenied, match=f"GRANT relaybus_worker TO {role}"):
        start()
    _grant(dbname, f'GRANT relaybus_publisher TO "{role}"')  # publishing is not working
    with pytest.raises(relaybus.PermissionDenied, match="relaybus.claim"):
        start()
    _grant(dbname, f'GRANT relaybus_worker TO "{role}"')
    start()


def test_worker_for_a_handler_nobody_subscribed(conninfo):
    worker = relaybus.Worker(conninfo, name="w")
    worker.add_handler("never-subscribed", lambda event: None)
    with pytest.raises(relaybus.HandlerNotSubscribed,
                       match=r"never-subscribed.*relaybus\.subscribe\('never-subscribed'"):
        worker.start()


def test_worker_that_cannot_connect(tmp_path):
    worker = relaybus.Worker(f"host={tmp_path} port=1 connect_timeout=2", name="w")
    worker.add_handler("mailer", lambda event: None)
    with pytest.raises(psycopg.OperationalError):
        worker.start()
