"""Opening the worker's connections: the caller's conninfo plus settings that bound waits.

A worker blocks on its connections (a claim, a LISTEN wait), so a connection that died
without a FIN (a dropped NAT entry, a failed-over host) must end in an error, not a hang.
TCP keepalives find a dead idle connection and tcp_user_timeout one with unacknowledged
data; libpq ignores both on Unix sockets, where the kernel reports a dead peer itself.
The caller's own values win: these are only defaults.
"""

from typing import Any, Dict

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

_DEFAULTS = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "tcp_user_timeout": "60000",  # milliseconds
}


def worker_conninfo(conninfo: str, worker_name: str, extra: Dict[str, Any]) -> str:
    """The conninfo every connection of one worker uses: the caller's, with the defaults
    above filled in and an application_name that shows the worker in pg_stat_activity."""
    given = conninfo_to_dict(conninfo, **extra)
    for key, value in _DEFAULTS.items():
        given.setdefault(key, value)
    given.setdefault("application_name", f"relaybus-py {worker_name}"[:63])
    return make_conninfo(**given)


def connect(conninfo: str) -> psycopg.Connection:
    # Autocommit: every claim, renewal and settlement is its own short transaction, as the
    # SQL API asks; transactional handlers open theirs explicitly.
    return psycopg.connect(conninfo, autocommit=True)


def close_quietly(conn) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # closing a broken connection must not mask the original problem
        pass
