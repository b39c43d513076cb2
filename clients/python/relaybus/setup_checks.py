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
# From 0.2.1 rights are given per database by name (relaybus.grant_rights); 0.2.0 granted
# them to the cluster-wide roles relaybus_publisher, relaybus_worker and relaybus_admin.
RIGHTS_BY_NAME_VERSION = (0, 2, 1)

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


def _parse_version(version: Optional[str]) -> tuple:
    try:
        return tuple(int(part) for part in version.split("."))
    except (AttributeError, ValueError):
        return ()


_PLAIN_ROLE_NAME = re.compile(r"[a-z_][a-z0-9_$]*")


def quote_ident(name: str) -> str:
    """``name`` as a double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """``text`` as a SQL string literal, by PostgreSQL's quote_literal rules."""
    quoted = "'" + text.replace("'", "''").replace("\\", "\\\\") + "'"
    return "E" + quoted if "\\" in text else quoted


def role_literal(name: str) -> str:
    """The string literal that names role ``name`` where a regrole is read (as
    relaybus.grant_rights reads its first argument): an identifier, so a name that is not
    all lower case letters, digits and underscores is double-quoted inside the literal."""
    return quote_literal(name if _PLAIN_ROLE_NAME.fullmatch(name) else quote_ident(name))


def grant_statement(right: str, role: Optional[str], version: Optional[str]) -> str:
    """What an admin runs so that ``role`` (None: unknown) gets ``right`` (publisher, worker
    or admin) in the database, on relaybus ``version`` (None: unknown, both are named)."""
    named = role_literal(role) if role is not None else "'<role>'"
    by_name = f"SELECT relaybus.grant_rights({named}, {quote_literal(right)})"
    old = f"GRANT relaybus_{right} TO {quote_ident(role) if role is not None else '<role>'}"
    if version is None:
        return f"{by_name} (on relaybus 0.2.0: {old})"
    return by_name if _parse_version(version) >= RIGHTS_BY_NAME_VERSION else old


def _needs(right: str, version: Optional[str]) -> str:
    if version is not None and _parse_version(version) < RIGHTS_BY_NAME_VERSION:
        return f"relaybus_{right}"
    return f"the {right} right in this database"


def check_extension(conn: psycopg.Connection) -> str:
    """Returns the installed relaybus version; raises ExtensionNotInstalled if it is
    missing or older than 0.2.0."""
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'relaybus'").fetchone()
    if row is None:
        raise _not_installed(conn.info.dbname)
    version = row[0]
    if _parse_version(version) < MINIMUM_VERSION:
        raise ExtensionNotInstalled(
            f"database {conn.info.dbname!r} has relaybus {version}, and this client needs "
            f"0.2.0 or later (worker holders): a superuser runs ALTER EXTENSION relaybus UPDATE")
    return version


def _check_privileges(conn: psycopg.Connection, functions: Iterable[str], right: str,
                      version: str) -> None:
    # The privileges themselves, of the current role: however they were given (a right, a
    # role that holds one, superuser), they are what relaybus's functions check.
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
            f"role {user!r} may not use {what}: it needs {_needs(right, version)} "
            f"(an admin runs: {grant_statement(right, user, version)})")


def check_publisher(conn: psycopg.Connection) -> None:
    """Checks that the connection can publish: relaybus 0.2.0+ is installed and the current
    role may execute relaybus.publish and relaybus.publish_batch (the publisher right).
    Raises ExtensionNotInstalled or PermissionDenied. Only reads catalogs, so it is safe
    inside the caller's transaction."""
    _check_privileges(conn, PUBLISHER_FUNCTIONS, "publisher", check_extension(conn))


def claims_renew_held_lanes(version: str) -> bool:
    """True on relaybus versions whose claim, found something or not, leaves every lane the
    worker holds for the handlers it named leased until at least the claim's start plus its
    lease (0.3.0's claim renews those due). A worker then need not call extend_lease for
    lanes a recent claim renewed: each extend_lease rewrites every lease row, which a held
    snapshot keeps as a dead version."""
    return _parse_version(version)[:2] == (0, 3)


def check_worker(conn: psycopg.Connection, name: str, holder: str, handlers: list,
                 lease) -> str:
    """Everything a Worker needs before it claims: the extension, the worker right's privileges,
    and every handler subscribed. The handlers are checked by a real claim in a transaction
    that is rolled back: it validates exactly what the claim loop will send (names, holder,
    lease) and leaves nothing behind. Returns the installed relaybus version."""
    version = check_extension(conn)
    _check_privileges(conn, WORKER_FUNCTIONS, "worker", version)
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("SELECT count(*) FROM relaybus.claim(%s, 1, %s, %s, %s)",
                         (name, lease, handlers, holder))
    except pg_errors.UndefinedObject as exc:  # 42704: a handler is not subscribed
        message = exc.diag.message_primary or str(exc)
        named = re.search(r'handler "(.*)" is not subscribed', message)
        handler = quote_literal(named.group(1)) if named else "'<handler>'"
        raise HandlerNotSubscribed(
            f"{message}; subscribe it first (as a role with the admin right): "
            f"SELECT relaybus.subscribe({handler}, ARRAY['<event type>'])") from exc
    return version


def _current_user_and_version(conn) -> tuple:
    # Only on an autocommit connection outside a transaction: inside one, the failed call
    # aborted it, and without autocommit asking would open one for the caller.
    if not getattr(conn, "autocommit", False) or \
            conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return None, None
    try:
        return conn.execute(
            "SELECT current_user, (SELECT extversion FROM pg_catalog.pg_extension "
            "WHERE extname = 'relaybus')").fetchone()
    except psycopg.Error:
        return None, None


def translate(exc: psycopg.Error, conn: psycopg.Connection, right: str) -> Optional[Exception]:
    """The setup error hidden in a relaybus call's failure, or None if it is something else
    (bad input, a conflict): those keep their own SQLSTATE and message. ``right`` is the
    relaybus right the call needs (publisher, worker, admin)."""
    message = (exc.diag.message_primary or str(exc)) if exc.diag else str(exc)
    if isinstance(exc, pg_errors.InvalidSchemaName) and "relaybus" in message:
        return _not_installed(conn.info.dbname)
    if isinstance(exc, pg_errors.UndefinedFunction) and "relaybus." in message:
        return _not_installed(conn.info.dbname, f" or is older than 0.2.0 ({message})")
    if (isinstance(exc, pg_errors.InsufficientPrivilege)
            and message.startswith("permission denied") and "relaybus" in message):
        who, version = _current_user_and_version(conn)
        if who is None:
            return PermissionDenied(
                f"{message}: the current role needs the {right} right in this database "
                f"(an admin runs: {grant_statement(right, None, None)}; "
                f"check_publisher(conn) names the role)")
        return PermissionDenied(f"{message}: role {who!r} needs {_needs(right, version)} "
                                f"(an admin runs: {grant_statement(right, who, version)})")
    return None
