"""Setup mistakes raise exceptions that say what to do."""

import re

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import relaybus
from conftest import unique


@pytest.fixture(scope="module")
def bare_conninfo(make_database):
    """A database without the extension."""
    return f"dbname={make_database(extension=False)}"


# A plain role name, and one that needs quoting everywhere: upper case, a quote, a double
# quote, a space and a backslash. The guided errors print statements to run; the tests run
# them as printed.
ROLE_NAMES = ["relaybus_py_role", "relaybus_py_O'Neil \"Ops\" \\"]


def _create_role(dbname, prefix):
    name = unique(prefix)
    with psycopg.connect(dbname=dbname, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    return name


def _drop_role(dbname, name):
    with psycopg.connect(dbname=dbname, autocommit=True) as conn:
        # Rights are privileges in the database they were given in: drop them there first.
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture(params=ROLE_NAMES, ids=["plain", "quoted"])
def role(request, dbname):
    """A role with no relaybus right; connections take it on with the startup option
    `role`, so no password or LOGIN is needed."""
    name = _create_role(dbname, request.param)
    yield name
    _drop_role(dbname, name)


@pytest.fixture(scope="module")
def old_dbname(make_database):
    """A database with relaybus 0.2.0, whose rights are the cluster's roles."""
    return make_database(version="0.2.0")


def _as(dbname, role):
    # Backslashes and spaces are escaped in the server's options; make_conninfo quotes the rest.
    escaped = role.replace("\\", "\\\\").replace(" ", "\\ ")
    return make_conninfo(dbname=dbname, options=f"-c role={escaped}")


def _grant(dbname, grant):
    with psycopg.connect(dbname=dbname, autocommit=True) as conn:
        conn.execute(grant)


def _server_quoted(dbname, statement, *args):
    """``statement`` (a format() string) with ``args`` quoted by the server itself."""
    with psycopg.connect(dbname=dbname, autocommit=True) as conn:
        return conn.execute("SELECT format(%s, VARIADIC %s::text[])", (statement, list(args))).fetchone()[0]


def _grant_rights(dbname, role, right):
    """The statement the guided error should print: grant_rights with the role as the
    server quotes an identifier (regrole reads one) inside a literal."""
    with psycopg.connect(dbname=dbname, autocommit=True) as conn:
        return conn.execute("SELECT format('SELECT relaybus.grant_rights(%%L, %%L)', quote_ident(%s), %s::text)",
                            (role, right)).fetchone()[0]


def _statement_in(message, prefix):
    """The statement starting with ``prefix`` that the message tells an admin to run: up to
    the closing parenthesis of the message's own "(an admin runs: ...)"."""
    start = message.index(prefix)
    return message[start:message.rindex(")")]


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


def test_publish_without_the_publisher_right(dbname, role, subscribe):
    handler, event_type = subscribe()
    grant = _grant_rights(dbname, role, "publisher")
    with psycopg.connect(_as(dbname, role)) as conn:
        # Inside a transaction the failed call aborted it: the role cannot be asked for.
        with pytest.raises(relaybus.PermissionDenied, match="needs the publisher right") as raised:
            relaybus.publish(conn, event_type, {})
        assert "SELECT relaybus.grant_rights('<role>', 'publisher')" in str(raised.value)
        conn.rollback()
        with pytest.raises(relaybus.PermissionDenied, match="needs the publisher right") as raised:
            relaybus.check_publisher(conn)
        assert f"(an admin runs: {grant})" in str(raised.value)
    with psycopg.connect(_as(dbname, role), autocommit=True) as conn:
        # Outside a transaction the error can name the role.
        with pytest.raises(relaybus.PermissionDenied, match=re.escape(grant)):
            relaybus.publish(conn, event_type, {})
    _grant(dbname, _statement_in(str(raised.value), "SELECT relaybus.grant_rights("))
    with psycopg.connect(_as(dbname, role)) as conn:
        relaybus.check_publisher(conn)
        assert relaybus.publish(conn, event_type, {})


def test_worker_without_the_worker_right(dbname, role, subscribe):
    handler, _ = subscribe()

    def start():
        worker = relaybus.Worker(_as(dbname, role), name="w")
        worker.add_handler(handler, lambda event: None)
        worker.start()
        worker.stop()

    grant = _grant_rights(dbname, role, "worker")
    with pytest.raises(relaybus.PermissionDenied, match=re.escape(f"(an admin runs: {grant})")):
        start()
    _grant(dbname, _grant_rights(dbname, role, "publisher"))  # publishing is not working
    with pytest.raises(relaybus.PermissionDenied, match="relaybus.claim") as raised:
        start()
    _grant(dbname, _statement_in(str(raised.value), "SELECT relaybus.grant_rights("))
    start()


def test_a_right_given_in_another_database_is_not_one_here(make_database, dbname, role):
    other = make_database()
    _grant(other, _grant_rights(other, role, "publisher"))
    try:
        with psycopg.connect(_as(dbname, role)) as conn:
            with pytest.raises(relaybus.PermissionDenied, match="needs the publisher right"):
                relaybus.check_publisher(conn)
        with psycopg.connect(_as(other, role)) as conn:
            relaybus.check_publisher(conn)
    finally:
        _grant(other, sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))


def test_publish_on_relaybus_0_2_0_names_the_old_role(old_dbname):
    role = _create_role(old_dbname, ROLE_NAMES[1])
    try:
        grant = _server_quoted(old_dbname, "GRANT relaybus_publisher TO %I", role)
        with psycopg.connect(_as(old_dbname, role)) as conn:
            with pytest.raises(relaybus.PermissionDenied, match="needs relaybus_publisher") as raised:
                relaybus.check_publisher(conn)
            assert f"(an admin runs: {grant})" in str(raised.value)
        _grant(old_dbname, _statement_in(str(raised.value), "GRANT relaybus_publisher TO "))
        with psycopg.connect(_as(old_dbname, role)) as conn:
            relaybus.check_publisher(conn)
    finally:
        _drop_role(old_dbname, role)


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
