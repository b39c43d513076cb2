"""Tells a misconfigured database apart from a failing call, and says how to fix it.

Two ways in: checks run before any work (``check_worker`` when a Worker starts, and
``check_publisher`` for an application that wants to fail at startup), and ``translate``,
which maps the error of a relaybus call to the same exceptions after the fact, so
``publish`` costs no extra round trip.
"""

import re
from typing import Iterable, Optional

import psycopg
from psycopg import errors as pg_errors

from .errors import ExtensionNotInstalled, HandlerNotSubscribed, PermissionDenied

# Holders (claim/extend_lease/relinquish with `holder`) arrived in 0.2.0; a worker without
# them walks into the pool trap this package exists to avoid.
MINIMUM_VERSION = (0, 2, 0)

WORKER_FUNCTIONS = (
    "relaybus.claim(text,integer,interval,text[],text)",
    "relaybus.complete(text)",
    "relaybus.complete_many(text[])",
    "relaybus.fail(text,text,timestamptz)",
    "relaybus.bury(text,text)",
    "relaybus.release(text)",
    "relaybus.extend_lease(text,interval,text)",
    "relaybus.relinquish(text,text)",
)
PUBLISHER_FUNCTIONS = (
    "relaybus.publish(text,jsonb,text,text,text[],timestamptz,jsonb)",
    "relaybus.publish_batch(jsonb)",
)


def _not_installed(dbname: str, detail: str = "") -> ExtensionNotInstalled:
    return ExtensionNotInstalled(
        f"relaybus is not installed in database {dbname!r}{detail}: a superuser runs "
        f"CREATE EXTENSION relaybus in that database (and the server needs the relaybus "
        f"package installed)")


def _grant_hint(role_name: str, who: str) -> str:
    return f"an admin runs: GRANT {role_name} TO {who}"


def check_extension(conn: psycopg.Connection) -> str:
    """Returns the installed relaybus version; raises ExtensionNotInstalled if it is
    missing or older than 0.2.0."""
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'relaybus'").fetchone()
    if row is None:
        raise _not_installed(conn.info.dbname)
    version = row[0]
    try:
        parsed = tuple(int(part) for part in version.split("."))
    except ValueError:
        parsed = ()
    if parsed < MINIMUM_VERSION:
        raise ExtensionNotInstalled(
            f"database {conn.info.dbname!r} has relaybus {version}, and this client needs "
            f"0.2.0 or later (worker holders): a superuser runs ALTER EXTENSION relaybus UPDATE")
    return version


def _check_privileges(conn: psycopg.Connection, functions: Iterable[str], role_name: str) -> None:
    user, schema_ok = conn.execute(
        "SELECT current_user, has_schema_privilege('relaybus', 'USAGE')").fetchone()
    # Without USAGE on the schema even naming a function in has_function_privilege fails.
    missing = ["schema relaybus"] if not schema_ok else conn.execute(
        "SELECT array(SELECT f FROM unnest(%s::text[]) AS f "
        "             WHERE NOT has_function_privilege(f, 'EXECUTE'))",
        (list(functions),)).fetchone()[0]
    if missing:
        what = ", ".join(f.split("(")[0] for f in missing)
        raise PermissionDenied(
            f"role {user!r} may not use {what}: it needs {role_name} ({_grant_hint(role_name, user)})")


def check_publisher(conn: psycopg.Connection) -> None:
    """Checks that the connection can publish: relaybus 0.2.0+ is installed and the current
    role has relaybus_publisher's rights. Raises ExtensionNotInstalled or PermissionDenied.
    Only reads catalogs, so it is safe inside the caller's transaction."""
    check_extension(conn)
    _check_privileges(conn, PUBLISHER_FUNCTIONS, "relaybus_publisher")


def check_worker(conn: psycopg.Connection, name: str, holder: str, handlers: list,
                 lease) -> None:
    """Everything a Worker needs before it claims: the extension, relaybus_worker's rights,
    and every handler subscribed. The handlers are checked by a real claim in a transaction
    that is rolled back: it validates exactly what the claim loop will send (names, holder,
    lease) and leaves nothing behind."""
    check_extension(conn)
    _check_privileges(conn, WORKER_FUNCTIONS, "relaybus_worker")
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("SELECT count(*) FROM relaybus.claim(%s, 1, %s, %s, %s)",
                         (name, lease, handlers, holder))
    except pg_errors.UndefinedObject as exc:  # 42704: a handler is not subscribed
        message = exc.diag.message_primary or str(exc)
        named = re.search(r'handler "(.*)" is not subscribed', message)
        handler = named.group(1).replace("'", "''") if named else "<handler>"
        raise HandlerNotSubscribed(
            f"{message}; subscribe it first (as relaybus_admin): "
            f"SELECT relaybus.subscribe('{handler}', ARRAY['<event type>'])") from exc


def _current_user(conn) -> Optional[str]:
    # Only on an autocommit connection outside a transaction: inside one, the failed call
    # aborted it, and without autocommit asking would open one for the caller.
    if not getattr(conn, "autocommit", False) or \
            conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return None
    try:
        return conn.execute("SELECT current_user").fetchone()[0]
    except psycopg.Error:
        return None


def translate(exc: psycopg.Error, conn: psycopg.Connection, role_name: str) -> Optional[Exception]:
    """The setup error hidden in a relaybus call's failure, or None if it is something else
    (bad input, a conflict): those keep their own SQLSTATE and message."""
    message = (exc.diag.message_primary or str(exc)) if exc.diag else str(exc)
    if isinstance(exc, pg_errors.InvalidSchemaName) and "relaybus" in message:
        return _not_installed(conn.info.dbname)
    if isinstance(exc, pg_errors.UndefinedFunction) and "relaybus." in message:
        return _not_installed(conn.info.dbname, f" or is older than 0.2.0 ({message})")
    if (isinstance(exc, pg_errors.InsufficientPrivilege)
            and message.startswith("permission denied") and "relaybus" in message):
        who = _current_user(conn)
        if who is None:
            return PermissionDenied(
                f"{message}: the current role needs {role_name} "
                f"({_grant_hint(role_name, '<that role>')}; check_publisher(conn) names it)")
        return PermissionDenied(f"{message}: role {who!r} needs {role_name} "
                                f"({_grant_hint(role_name, who)})")
    return None
