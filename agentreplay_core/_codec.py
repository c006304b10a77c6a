"""Canonical JSON codec: every recorded value goes through here (DESIGN section 3).

`encode` turns a Python value into a JSON-native tree in which everything JSON or PostgreSQL
JSONB cannot hold exactly is a *tagged object*, a dict whose reserved key `TAG` names the tag
(`{"__ar__": "bytes", "v": "AAE="}`). `decode` is its exact inverse, also after a trip through
a JSONB column. `canonical_bytes` is the byte form that checksums and match keys are computed
over; docs/canonical-json.md specifies both formats for verifiers in other languages.

Example:
    >>> from datetime import date
    >>> tree = encode({"when": date(2024, 5, 1), "tags": ("a", "b")})
    >>> canonical_bytes(tree)
    b'{"tags":{"__ar__":"tuple","v":["a","b"]},"when":{"__ar__":"date","v":"2024-05-01"}}'
    >>> decode(tree)
    {'when': datetime.date(2024, 5, 1), 'tags': ('a', 'b')}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from agentreplay_core._codec_base import TAG, CodecFailure, Json, short_repr, type_name
from agentreplay_core._codec_decode import dec
from agentreplay_core._codec_encode import EXACT, enc, enc_registered
from agentreplay_core._codec_objects import REGISTERED_BY_NAME, REGISTERED_BY_TYPE, Registered
from agentreplay_core._errors import SerializationError

__all__ = [
    "TAG",
    "Json",
    "canonical_bytes",
    "decode",
    "dumps",
    "encode",
    "loads",
    "register_type",
    "unencodable_marker",
]

T = TypeVar("T")

# reject anything orjson would otherwise serialise natively but `encode` never produces
_STRICT = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
_CANONICAL = _STRICT | orjson.OPT_SORT_KEYS
_REPR_LIMIT = 200
_BUILTIN_TYPES = frozenset({*EXACT, str, int, float, bool, type(None), dict, list})


def encode(value: Any, *, path: str = "$") -> Json:
    """Convert `value` to a JSON-native tree that round-trips exactly through `decode`.

    Args:
        value: any supported value (see docs/canonical-json.md for the list).
        path: name of `value` in error messages, e.g. ``"input"``.

    Raises:
        SerializationError: a part of `value` cannot be encoded; `.path` names where, e.g.
            ``input.messages[2].content``.
    """
    try:
        return enc(value, 0)
    except CodecFailure as failure:
        raise failure.to_error(path) from None
    except RecursionError:
        raise SerializationError(
            "value nested too deeply for Python's recursion limit; flatten it before recording",
            path=path,
            type_name=type_name(value),
        ) from None
    except Exception as exc:  # e.g. a dict changed size while another thread mutated it
        raise SerializationError(
            f"encoding failed with {type(exc).__name__}: {exc} (was the value changed while "
            "it was being recorded?)",
            path=path,
            type_name=type_name(value),
        ) from exc


def decode(data: Json, *, restore_objects: bool = True) -> Any:
    """Rebuild the value `encode` was given.

    Args:
        data: an encoded tree, e.g. `loads` of what a store returned.
        restore_objects: import and rebuild pydantic models, dataclasses, named tuples and
            enums; with False they come back as plain dicts / their values instead.

    Raises:
        SerializationError: the tree holds an unknown or malformed tagged object, a class that
            cannot be imported, or the marker of a value that could not be recorded.
    """
    try:
        return dec(data, restore_objects)
    except CodecFailure as failure:
        raise failure.to_error("$") from None
    except RecursionError:
        raise SerializationError("encoded tree nested too deeply to decode") from None


def canonical_bytes(data: Json) -> bytes:
    """Canonical bytes of an already-encoded tree (sorted keys, no whitespace, UTF-8).

    Raises:
        SerializationError: `data` holds something other than JSON-native values.
    """
    try:
        return orjson.dumps(data, option=_CANONICAL)
    except orjson.JSONEncodeError as exc:
        raise SerializationError(
            f"canonical_bytes needs an encoded tree (call encode first): {exc}",
            type_name=type_name(data),
        ) from exc


def dumps(data: Json) -> bytes:
    """Compact JSON text of an encoded tree, in insertion order (for storage)."""
    try:
        return orjson.dumps(data, option=_STRICT)
    except orjson.JSONEncodeError as exc:
        raise SerializationError(
            f"dumps needs an encoded tree (call encode first): {exc}", type_name=type_name(data)
        ) from exc


def loads(raw: bytes | str) -> Json:
    """Parse JSON text (as stored, or as PostgreSQL returns a jsonb column)."""
    return orjson.loads(raw)


def unencodable_marker(value: Any, error: SerializationError) -> Json:
    """What the recorder stores for a value `encode` refused; `decode` of it raises."""

    def printable(text: str) -> str:  # the marker itself must survive JSONB
        return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")

    return {
        TAG: "unencodable",
        "type": printable(error.type_name or type_name(value)),
        "repr": _cut(printable(short_repr(value, 4 * _REPR_LIMIT)), _REPR_LIMIT),
        "error": printable(str(error)),
        "path": printable(error.path),
    }


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def register_type(
    cls: type[T],
    *,
    name: str,
    to_json: Callable[[T], Any],
    from_json: Callable[[Any], T],
) -> None:
    """Teach the codec a type of your own.

    `to_json(value)` returns anything `encode` can handle (it is encoded in turn); `decode`
    calls `from_json` with that decoded value. Subclasses of `cls` use the same pair. Register
    before recording and before replaying.

    Args:
        cls: the type.
        name: stable name stored in the run log; keep it when the class moves.
        to_json: value -> encodable data.
        from_json: decoded data -> value.

    Raises:
        ValueError: `cls` is a type the codec handles itself, or `name` is taken by another type.
    """
    if cls in _BUILTIN_TYPES:
        raise ValueError(f"{cls.__qualname__} is encoded by agentreplay itself; register a "
                         "subclass of your own instead")
    existing = REGISTERED_BY_NAME.get(name)
    if existing is not None and existing.cls is not cls:
        raise ValueError(f"the name {name!r} is already registered for "
                         f"{existing.cls.__module__}.{existing.cls.__qualname__}")
    entry = Registered(cls, name, to_json, from_json)
    REGISTERED_BY_NAME[name] = entry
    REGISTERED_BY_TYPE[cls] = entry
    EXACT[cls] = enc_registered
