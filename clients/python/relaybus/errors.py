"""The exceptions this package raises, and the one a handler raises to dead-letter.

Setup problems (no extension, a role without the relaybus right, a handler nobody
subscribed) are the mistakes a newcomer makes first; each gets its own class and a message
that says what to run. Each is raised ``from`` the psycopg error that revealed it, so the
server's SQLSTATE and message stay available as ``__cause__``.
"""


class RelaybusError(Exception):
    """Base class of every error this package raises."""


class ExtensionNotInstalled(RelaybusError):
    """The database has no relaybus extension, or one too old for this client."""


class PermissionDenied(RelaybusError):
    """The connected role lacks the privileges of relaybus's worker or publisher right in
    this database (given by relaybus.grant_rights; on 0.2.0, by the relaybus_worker and
    relaybus_publisher roles)."""


class HandlerNotSubscribed(RelaybusError):
    """A handler the worker was asked to run has no subscription in this database."""


class Bury(Exception):
    """Raise from a handler to dead-letter the delivery now instead of retrying it.

    For failures that retrying cannot fix (a malformed payload, a customer that no longer
    exists). The exception's text becomes the delivery's ``last_error``.
    """
