"""What a handler receives: one claimed delivery of one event."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional


@dataclass(frozen=True)
class Event:
    """A delivery of an event to one handler, as ``relaybus.claim`` returned it.

    ``attempts`` counts the attempts charged before this one (0 on the first try), so a
    handler can tell a retry from a first run. ``lease_token`` is what the worker passes
    back to complete or fail the delivery; handlers normally never need it.
    """

    id: str
    handler: str
    type: str
    key: Optional[str]
    payload: Any
    headers: Optional[Any]
    attempts: int
    published_at: datetime
    lease_token: str

    @classmethod
    def from_claim_row(cls, row) -> "Event":
        # The columns the claim loop selects, in its order.
        token, event_id, handler, type_, key, payload, headers, attempts, published_at = row
        return cls(id=event_id, handler=handler, type=type_, key=key, payload=payload,
                   headers=headers, attempts=attempts, published_at=published_at,
                   lease_token=token)
