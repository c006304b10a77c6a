"""Recorded entropy values back into results, on replay (`_entropy_patches`): a value of the
wrong type or size becomes a TypeError or ValueError that the session reports as a clear
replay error."""

from __future__ import annotations

import uuid
from datetime import datetime as _RealDatetime
from datetime import tzinfo
from typing import Any, TypeVar

D = TypeVar("D", bound=_RealDatetime)



def as_float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"holds {type(value).__name__} {value!r:.60}, expected a float")


def as_int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"holds {type(value).__name__} {value!r:.60}, expected an int")


def as_none(value: Any) -> None:
    if value is not None:
        raise TypeError(f"holds {type(value).__name__} {value!r:.60}, expected None")


def as_uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    raise TypeError(f"holds {type(value).__name__} {value!r:.60}, expected a UUID")


def as_bytes(value: Any, size: int) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"holds {type(value).__name__} {value!r:.60}, expected bytes")
    if len(value) != size:
        raise ValueError(f"holds {len(value)} bytes where {size} were asked for")
    return value


def as_datetime(value: Any, tz: tzinfo | None) -> _RealDatetime:
    """The recorded datetime, converted to the `tz` object the caller passed."""
    if not isinstance(value, _RealDatetime):
        raise TypeError(f"holds {type(value).__name__} {value!r:.60}, expected a datetime")
    if tz is None:
        return value
    if value.tzinfo is None:
        raise ValueError("holds a naive datetime but the call asked for a time zone")
    return value.astimezone(tz)


def rebuild(cls: type[D], v: _RealDatetime) -> D:
    return cls(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.tzinfo,
               fold=v.fold)
