"""publish and publish_batch: relaybus's publish functions, in the caller's transaction.

Neither function commits, rolls back or opens a transaction: the event becomes visible
when the caller commits the transaction that also holds the writes it describes, and
disappears if that transaction rolls back (on an autocommit connection each call is its
own transaction). Arguments are checked here, before anything is sent, because a wrong
Python type would otherwise surface as PostgreSQL's "function does not exist".
"""

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Iterable, List, Optional, Sequence

import psycopg

from .setup_checks import translate

_PUBLISH = ("SELECT relaybus.publish(%s::text, %s::jsonb, %s::text, %s::text, %s::text[], "
            "%s::timestamptz, %s::jsonb)")
_PUBLISH_BATCH = "SELECT relaybus.publish_batch(%s::jsonb)"
_BATCH_FIELDS = {"type", "payload", "key", "id", "handlers", "available_at", "headers"}


def _require_object(value: Any, what: str) -> Mapping:
    # relaybus stores payloads and headers as JSON objects (anything else is 22023), so a
    # list or a scalar is refused here with a hint instead of a server error.
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a JSON object (a dict), not {type(value).__name__}: "
                        f"wrap other values, e.g. {{\"value\": ...}}")
    # json encodes dicts only; a read-only mapping is still an object.
    return value if isinstance(value, dict) else dict(value)


def _json_object(value: Any, what: str) -> str:
    return _dumps(_require_object(value, what), what)


def _dumps(value: Any, what: str) -> str:
    try:
        # allow_nan=False: NaN and Infinity are not JSON, and jsonb would refuse them.
        return json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{what} is not JSON-serializable: {exc}") from exc


def _optional_text(value: Any, what: str) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{what} must be a str or None, not {type(value).__name__}")
    return value


def _handlers(value: Any, what: str) -> Optional[List[str]]:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{what} must be a list of handler names or None")
    if not all(isinstance(h, str) for h in value):
        raise TypeError(f"{what} must contain only str")
    return list(value)


def _aware(value: Any, what: str) -> Optional[datetime]:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise TypeError(f"{what} must be a datetime or None, not {type(value).__name__}")
    # A naive datetime would be read in the session's TimeZone, whatever the application
    # meant; refusing it is cheaper than finding that bug in production.
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware (e.g. datetime.now(timezone.utc))")
    return value


def _type(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def _execute(conn, query: str, params, right: str):
    try:
        return conn.execute(query, params)
    except psycopg.Error as exc:
        setup_error = translate(exc, getattr(conn, "connection", conn), right)
        if setup_error is None:
            raise
        raise setup_error from exc


def publish(conn, type: str, payload: Mapping, key: Optional[str] = None, *,
            event_id: Optional[str] = None, handlers: Optional[Sequence[str]] = None,
            available_at: Optional[datetime] = None, headers: Optional[Mapping] = None) -> str:
    """Publishes one event in ``conn``'s current transaction and returns its id.

    ``conn`` is a psycopg Connection (or Cursor). ``payload`` is a dict of JSON values;
    ``key`` orders the events of one key per handler; ``event_id`` makes the publish
    idempotent (a repeat adds nothing but deliveries for new handlers); ``handlers``
    targets exactly these handlers instead of the type's subscribers; ``available_at``
    (timezone-aware) delays the deliveries.
    """
    params = (_type(type, "type"), _json_object(payload, "payload"), _optional_text(key, "key"),
              _optional_text(event_id, "event_id"), _handlers(handlers, "handlers"),
              _aware(available_at, "available_at"),
              None if headers is None else _json_object(headers, "headers"))
    return _execute(conn, _PUBLISH, params, "publisher").fetchone()[0]


def _batch_element(index: int, event: Any) -> dict:
    where = f"events[{index}]"
    if not isinstance(event, Mapping):
        raise TypeError(f"{where} must be a dict, not {type(event).__name__}")
    unknown = set(event) - _BATCH_FIELDS
    if unknown:
        # relaybus ignores unknown fields; a typo like "paylod" would silently publish {}.
        raise ValueError(f"{where} has unknown field(s) {sorted(unknown)}; "
                         f"the fields are {sorted(_BATCH_FIELDS)}")
    if "type" not in event:
        raise ValueError(f"{where} has no 'type'")
    element = {"type": _type(event["type"], f"{where}.type")}
    if "payload" in event:
        element["payload"] = _require_object(event["payload"], f"{where}.payload")
    for field in ("key", "id"):
        if event.get(field) is not None:
            element[field] = _optional_text(event[field], f"{where}.{field}")
    if event.get("handlers") is not None:
        element["handlers"] = _handlers(event["handlers"], f"{where}.handlers")
    if event.get("available_at") is not None:
        element["available_at"] = _aware(event["available_at"], f"{where}.available_at").isoformat()
    if event.get("headers") is not None:
        element["headers"] = _require_object(event["headers"], f"{where}.headers")
    return element


def publish_batch(conn, events: Iterable[Mapping]) -> List[str]:
    """Publishes several events with one statement, in ``conn``'s current transaction, and
    returns their ids in input order.

    Each element is a dict with ``type`` (required) and optionally ``payload``, ``key``,
    ``id``, ``handlers``, ``available_at`` and ``headers``, meaning what publish's
    arguments mean. Any error publishes nothing.
    """
    elements = [_batch_element(i, e) for i, e in enumerate(events)]
    if not elements:
        return []
    try:
        body = json.dumps(elements, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError):
        # Only on this error path: encode the elements one by one to name the bad one.
        for i, element in enumerate(elements):
            _dumps(element, f"events[{i}]")
        raise
    rows = _execute(conn, _PUBLISH_BATCH, (body,), "publisher").fetchall()
    return [row[0] for row in rows]
