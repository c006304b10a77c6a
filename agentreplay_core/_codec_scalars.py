"""Tagged forms of the leaf values JSON/JSONB cannot hold exactly, in both directions.

Each encoder takes `(value, depth)` so it can sit in the walker's dispatch table; each decoder
takes the tagged dict. Decoders may raise KeyError/TypeError/ValueError on malformed input; the
walker turns those into a `SerializationError` naming the path.
"""

from __future__ import annotations

import base64
import math
import pathlib
import re
import struct
import sys
from array import array
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from agentreplay_core._codec_base import TAG, Json

_SPECIAL_CHARS = re.compile("[\x00\ud800-\udfff]")
_CANONICAL_NAN = struct.pack(">d", math.nan)
_PATH_CLASSES = {
    cls.__name__: cls
    for cls in (
        pathlib.PurePath, pathlib.PurePosixPath, pathlib.PureWindowsPath,
        pathlib.Path, pathlib.PosixPath, pathlib.WindowsPath,
    )
}


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


# --- encoders -------------------------------------------------------------------------------


def tag_str(s: str) -> Json:
    """A str with NUL or lone surrogates: plain runs of text, and code points as ints between."""
    parts: list[str | int] = []
    pos = 0
    for m in _SPECIAL_CHARS.finditer(s):
        if m.start() > pos:
            parts.append(s[pos : m.start()])
        parts.append(ord(m.group()))
        pos = m.end()
    if pos < len(s):
        parts.append(s[pos:])
    return {TAG: "str", "v": parts}


def tag_float(x: float) -> Json:
    """Floats JSONB would change: NaN, infinities, -0.0 and |x| >= 1e16 (exponent notation)."""
    out: dict[str, Any] = {TAG: "float", "v": repr(x)}
    if x != x:
        bits = struct.pack(">d", x)
        if bits != _CANONICAL_NAN:  # keep sign and payload of unusual NaNs
            out["bits"] = bits.hex()
    return out


def enc_float(x: float) -> Json:
    """A Python float as JSON: native when JSONB keeps it a float with the same value."""
    if -1e16 < x < 1e16 and (x or math.copysign(1.0, x) == 1.0):
        return x
    return tag_float(x)


def tag_int(n: int) -> Json:
    try:
        return {TAG: "int", "v": str(n)}
    except ValueError:  # beyond sys.int_info.str_digits_check_threshold
        return {TAG: "int", "hex": hex(n)}


def tag_floats(values: list[float]) -> Json:
    """A vector of floats as base64 of little-endian float64: exact and compact."""
    packed = array("d", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return {TAG: "floats", "f64le": b64(packed.tobytes())}


def _enc_bytes(v: bytes, depth: int) -> Json:
    return {TAG: "bytes", "v": b64(v)}


def _enc_bytearray(v: bytearray, depth: int) -> Json:
    return {TAG: "bytearray", "v": b64(bytes(v))}


def _zone_fields(tz: tzinfo | None, out: dict[str, Any]) -> None:
    if isinstance(tz, ZoneInfo) and tz.key is not None:
        out["tz"] = tz.key
    elif type(tz) is timezone and tz is not timezone.utc:
        name = tz.tzname(None)
        if name != timezone(tz.utcoffset(None)).tzname(None):
            out["tzname"] = name


def _enc_datetime(v: datetime, depth: int) -> Json:
    out: dict[str, Any] = {TAG: "datetime", "v": v.isoformat()}
    _zone_fields(v.tzinfo, out)
    if v.fold:
        out["fold"] = 1
    return out


def _enc_time(v: time, depth: int) -> Json:
    out: dict[str, Any] = {TAG: "time", "v": v.isoformat()}
    _zone_fields(v.tzinfo, out)
    if v.fold:
        out["fold"] = 1
    return out


def _enc_date(v: date, depth: int) -> Json:
    return {TAG: "date", "v": v.isoformat()}


def _enc_timedelta(v: timedelta, depth: int) -> Json:
    return {TAG: "timedelta", "days": v.days, "seconds": v.seconds, "us": v.microseconds}


def _enc_decimal(v: Decimal, depth: int) -> Json:
    return {TAG: "decimal", "v": str(v)}


def _enc_uuid(v: UUID, depth: int) -> Json:
    return {TAG: "uuid", "v": str(v)}


def _enc_complex(v: complex, depth: int) -> Json:
    return {TAG: "complex", "v": [enc_float(v.real), enc_float(v.imag)]}


def enc_path(v: pathlib.PurePath, depth: int) -> Json:
    cls = next(c for c in type(v).__mro__ if c.__name__ in _PATH_CLASSES)
    return {TAG: "path", "cls": cls.__name__, "v": str(v)}


ENCODERS: dict[type, Callable[[Any, int], Json]] = {
    bytes: _enc_bytes,
    bytearray: _enc_bytearray,
    datetime: _enc_datetime,
    date: _enc_date,
    time: _enc_time,
    timedelta: _enc_timedelta,
    Decimal: _enc_decimal,
    UUID: _enc_uuid,
    complex: _enc_complex,
}
for _cls in _PATH_CLASSES.values():
    ENCODERS[_cls] = enc_path


def as_base_value(v: Any) -> Any:
    """A subclass instance of a supported stdlib type as an instance of that type itself."""
    if isinstance(v, datetime):
        return datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond,
                        v.tzinfo, fold=v.fold)
    if isinstance(v, date):
        return date(v.year, v.month, v.day)
    if isinstance(v, time):
        return time(v.hour, v.minute, v.second, v.microsecond, v.tzinfo, fold=v.fold)
    if isinstance(v, timedelta):
        return timedelta(v.days, v.seconds, v.microseconds)
    if isinstance(v, Decimal):
        return Decimal(Decimal.__str__(v))
    if isinstance(v, UUID):
        return UUID(int=v.int)
    # the unbound base methods return exact base instances and ignore overrides
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, int):
        return int.__int__(v)
    if isinstance(v, float):
        return float.__float__(v)
    if isinstance(v, complex):
        return complex(v.real, v.imag)
    if isinstance(v, bytearray):
        return bytearray(memoryview(v))
    if isinstance(v, bytes):
        return bytes(memoryview(v))
    return v


# --- decoders -------------------------------------------------------------------------------


def _dec_str(d: dict[str, Any]) -> str:
    chunks = []
    for part in d["v"]:
        if type(part) is str:
            chunks.append(part)
        elif type(part) is int:
            chunks.append(chr(part))
        else:
            raise TypeError(f"str parts must be strings or code points, got {part!r}")
    return "".join(chunks)


def _dec_float(d: dict[str, Any]) -> float:
    if "bits" in d:
        value: float = struct.unpack(">d", bytes.fromhex(d["bits"]))[0]
        return value
    return float(d["v"])


def _dec_int(d: dict[str, Any]) -> int:
    return int(d["hex"], 16) if "hex" in d else int(d["v"])


def _dec_floats(d: dict[str, Any]) -> list[float]:
    packed = array("d")
    packed.frombytes(unb64(d["f64le"]))
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tolist()


def _zone(d: dict[str, Any], parsed: datetime | time) -> Any:
    if "tz" in d:
        parsed = parsed.replace(tzinfo=ZoneInfo(d["tz"]))
    elif "tzname" in d and parsed.tzinfo is not None:
        offset = parsed.utcoffset()
        assert offset is not None
        parsed = parsed.replace(tzinfo=timezone(offset, d["tzname"]))
    return parsed.replace(fold=d.get("fold", 0))


def _dec_datetime(d: dict[str, Any]) -> datetime:
    value: datetime = _zone(d, datetime.fromisoformat(d["v"]))
    return value


def _dec_time(d: dict[str, Any]) -> time:
    value: time = _zone(d, time.fromisoformat(d["v"]))
    return value


def _dec_path(d: dict[str, Any]) -> pathlib.PurePath:
    cls = _PATH_CLASSES[d["cls"]]
    try:
        return cls(d["v"])
    except (NotImplementedError, OSError):  # e.g. a WindowsPath read back on Linux
        flavour = pathlib.PureWindowsPath if "Windows" in d["cls"] else pathlib.PurePosixPath
        return flavour(d["v"])


def _dec_complex(d: dict[str, Any]) -> complex:
    re_part, im_part = (p if type(p) is float else _dec_float(p) for p in d["v"])
    return complex(re_part, im_part)


DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "str": _dec_str,
    "float": _dec_float,
    "int": _dec_int,
    "floats": _dec_floats,
    "bytes": lambda d: unb64(d["v"]),
    "bytearray": lambda d: bytearray(unb64(d["v"])),
    "datetime": _dec_datetime,
    "date": lambda d: date.fromisoformat(d["v"]),
    "time": _dec_time,
    "timedelta": lambda d: timedelta(d["days"], d["seconds"], d["us"]),
    "decimal": lambda d: Decimal(d["v"]),
    "uuid": lambda d: UUID(d["v"]),
    "complex": _dec_complex,
    "path": _dec_path,
}
