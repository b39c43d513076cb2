"""The holder: the string that makes one running worker an incarnation of its name.

Lanes claimed with a holder belong to (worker name, holder), whichever connection passes
the pair, so a worker may spread its statements over several connections, or lose one,
without taking over its own lanes (see "Worker names and incarnations" in
docs/sql-api.md). A new one per Worker instance keeps two processes that share a name from
adopting each other's lanes. Host and process id are there for the operator reading
relaybus.lanes; the random part is what makes it unique.
"""

import os
import secrets
import socket


def new_holder() -> str:
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{secrets.token_hex(8)}"
