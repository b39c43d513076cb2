"""Checks of the Worker's arguments: each bad value raises at construction, naming it.

The bounds are relaybus's own where it has them (a lease of more than 0 and at most a day,
a batch of 1 to 10000, names of 1 to 1000 bytes), so a mistake shows here rather than as a
claim that fails in a background thread.
"""

from datetime import timedelta
from typing import Tuple, Type, Union

Seconds = Union[int, float, timedelta]


def seconds(value: Seconds, what: str, minimum: float, maximum: float,
            minimum_inclusive: bool = False) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or a timedelta, "
                        f"not {type(value).__name__}")
    too_small = value < minimum if minimum_inclusive else value <= minimum
    if too_small or value > maximum or value != value:
        bound = "at least" if minimum_inclusive else "more than"
        raise ValueError(f"{what} must be {bound} {minimum:g} and at most {maximum:g} seconds, "
                         f"not {value!r}")
    return float(value)


def positive_int(value, what: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ValueError(f"{what} must be an integer from 1 to {maximum}, not {value!r}")
    return value


def name(value, what: str) -> str:
    if not isinstance(value, str) or not value or len(value.encode()) > 1000:
        raise ValueError(f"{what} must be a non-empty string of at most 1000 bytes, not {value!r}")
    return value


def exception_classes(value, what: str) -> Tuple[Type[BaseException], ...]:
    classes = tuple(value) if isinstance(value, (tuple, list, set, frozenset)) else (value,)
    if not all(isinstance(c, type) and issubclass(c, BaseException) for c in classes):
        raise TypeError(f"{what} must be exception classes, not {value!r}")
    return classes
