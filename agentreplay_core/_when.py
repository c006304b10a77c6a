"""Durations and points in time as the command line takes and shows them (`30d`, ISO dates).

Example:
    >>> parse_duration("1h30m")
    datetime.timedelta(seconds=5400)
    >>> format_duration(5400.0)
    '1h30m'
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

__all__ = ["format_duration", "parse_duration", "parse_since"]

_UNITS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?[wdhms])+$")


def parse_duration(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `45s`, `2w` or combined (`1d12h`); raises ValueError saying how."""
    compact = text.strip().lower().replace(" ", "")
    if not _DURATION.match(compact):
        raise ValueError(f"{text!r} is not a duration: write a number and a unit, w (weeks), "
                         "d (days), h (hours), m (minutes) or s (seconds), e.g. 30d or 1h30m")
    try:
        return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in _PART.findall(compact)))
    except OverflowError:
        raise ValueError(f"{text!r} is longer than any duration this can count "
                         "(999,999,999 days)") from None


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """A point in time: a duration back from now (`30d`), or an ISO date or date-time.

    A date or time without a zone is local time; the result is always timezone-aware.
    """
    now = now or datetime.now(timezone.utc)
    try:
        duration = parse_duration(text)
    except ValueError as exc:
        if "longer than" in str(exc):
            raise
    else:
        try:
            return now - duration
        except OverflowError:
            raise ValueError(f"{text!r} back from now is before the year 1") from None
    iso = text.strip()
    if iso[-1:] in ("Z", "z"):  # fromisoformat reads "Z" only from Python 3.11 on
        iso = iso[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(f"{text!r} is neither a duration (30d, 12h) nor an ISO date or time "
                         "(2024-05-01, 2024-05-01T14:30, 2024-05-01T14:30:00+02:00)") from None
    return moment if moment.tzinfo is not None else moment.astimezone()


def format_duration(seconds: float) -> str:
    """A short human duration: `850ms`, `12.4s`, `3m05s`, `1h30m`, `2d04h`."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"
