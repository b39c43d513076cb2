"""relaybus for Python: publish events in your transaction, and run workers that handle them.

    import relaybus
    relaybus.publish(conn, "order.placed", {"order_id": 7}, key="alice")

    worker = relaybus.Worker("dbname=app", name="mailer-1")
    @worker.handler("mailer")
    def send(event): ...
    worker.run_forever()

Logs go to logging.getLogger("relaybus"); the package prints nothing.
"""

import logging

from .errors import (Bury, ExtensionNotInstalled, HandlerNotSubscribed, PermissionDenied,
                     RelaybusError)
from .event import Event
from .publishing import publish, publish_batch
from .setup_checks import check_publisher
from .stats import WorkerStats
from .worker import Worker

__version__ = "0.3.0"

# A library leaves logging's configuration to the application; without this, records of
# WARNING and above would reach stderr through logging's last-resort handler.
logging.getLogger("relaybus").addHandler(logging.NullHandler())

__all__ = [
    "Bury", "Event", "ExtensionNotInstalled", "HandlerNotSubscribed", "PermissionDenied",
    "RelaybusError", "Worker", "WorkerStats", "check_publisher", "publish", "publish_batch",
]
