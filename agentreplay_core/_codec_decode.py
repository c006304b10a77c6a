"""The decoding walk: an encoded tree back to the Python values it was made from."""

from __future__ import annotations

import binascii
import struct
from collections.abc import Callable
from typing import Any

from agentreplay_core._codec_base import TAG, CodecFailure, Json, key_segment
from agentreplay_core._codec_numpy import decode_array, decode_scalar
from agentreplay_core._codec_objects import REGISTERED_BY_NAME, rebuild, rebuild_enum
from agentreplay_core._codec_scalars import DECODERS

# ArithmeticError: OverflowError (a huge number of days, a code point beyond C int) and
# decimal.InvalidOperation (a Decimal string that is not a number), both found by fuzzing
_MALFORMED = (
    AttributeError, KeyError, IndexError, TypeError, ValueError, ArithmeticError,
    binascii.Error, struct.error,
)


def dec(d: Json, restore: bool) -> Any:
    t = type(d)
    if t is dict:
        return dec_tagged(d, restore) if TAG in d else dec_dict(d, restore)
    if t is list:
        return dec_list(d, restore)
    return d


def dec_dict(d: dict[str, Json], restore: bool) -> dict[str, Any]:
    out = {}
    k = None
    try:
        for k, x in d.items():
            tx = type(x)
            out[k] = dec(x, restore) if tx is dict or tx is list else x
    except CodecFailure as failure:
        failure.add(key_segment(k), d)
        raise
    return out


def dec_list(d: list[Json], restore: bool) -> list[Any]:
    out: list[Any] = []
    try:
        for x in d:
            tx = type(x)
            out.append(dec(x, restore) if tx is dict or tx is list else x)
    except CodecFailure as failure:
        failure.add(f"[{len(out)}]", d)
        raise
    return out


def _items(d: dict[str, Json], restore: bool) -> list[Any]:
    items = d["v"]
    if type(items) is list:
        return dec_list(items, restore)
    decoded = dec(items, restore)  # a tuple of many floats holds a packed vector
    if type(decoded) is not list:
        raise TypeError(f"expected a list under 'v', got {type(decoded).__name__}")
    return decoded


def _fields(d: dict[str, Json], key: str, restore: bool) -> dict[str, Any]:
    fields = d[key]
    if type(fields) is not dict:
        raise TypeError(f"expected an object under {key!r}, got {type(fields).__name__}")
    return dec_dict(fields, restore) if TAG not in fields else dec(fields, restore)


def _collection(kind: type[set[Any]] | type[frozenset[Any]]) -> Callable[..., Any]:
    def build(d: dict[str, Json], restore: bool) -> Any:
        items = _items(d, restore)
        try:
            return kind(items)
        except TypeError:
            if restore:
                raise
            return items  # plain dicts (restore_objects=False) are not hashable

    return build


def _dec_escaped(d: dict[str, Json], restore: bool) -> dict[str, Any]:
    inner = d["v"]
    if type(inner) is not dict:
        raise TypeError(f"expected an object under 'v', got {type(inner).__name__}")
    return dec_dict(inner, restore)  # its reserved key is data, not a tag


def _dec_map(d: dict[str, Json], restore: bool) -> Any:
    pairs = _items(d, restore)
    try:
        return {k: v for k, v in pairs}
    except TypeError:
        if restore:
            raise
        return pairs


def _dec_object(d: dict[str, Json], restore: bool) -> Any:
    fields = _fields(d, "v", restore)
    extra = _fields(d, "extra", restore) if "extra" in d else None
    if not restore:
        return {**fields, **(extra or {})}
    fields_set = d.get("set")
    return rebuild(d[TAG], d["cls"], fields, extra, fields_set)


def _dec_enum(d: dict[str, Json], restore: bool) -> Any:
    value = dec(d["v"], restore)
    return rebuild_enum(d["cls"], value) if restore else value


def _dec_ext(d: dict[str, Json], restore: bool) -> Any:
    payload = dec(d["v"], restore)
    entry = REGISTERED_BY_NAME.get(d["name"])
    if entry is not None:
        try:
            return entry.from_json(payload)
        except Exception as exc:
            raise CodecFailure(f"the decoder registered as {d['name']!r} failed: {exc!r}",
                               entry.cls.__qualname__) from exc
    if not restore:
        return payload
    raise CodecFailure(
        f"no decoder registered for {d['name']!r}: call agentreplay_core.register_type(..., "
        f"name={d['name']!r}, ...) before decoding, or decode with restore_objects=False"
    )


def _dec_ndarray(d: dict[str, Json], restore: bool) -> Any:
    items = dec_list(d["items"], restore) if "items" in d else None
    return decode_array(d, items)


def _dec_npscalar(d: dict[str, Json], restore: bool) -> Any:
    return decode_scalar(d, dec(d["v"], restore) if "v" in d else None)


def _dec_unencodable(d: dict[str, Json], restore: bool) -> Any:
    path, error = d.get("path"), str(d.get("error"))
    where = "this value"
    if isinstance(path, str) and path:  # the place in the recorded value: said once
        where = f"the value at {path}"
        error = error.removesuffix(f" (at {path})")
    hint = "" if "register_type" in error else (
        ". Make the value JSON-serialisable (plain data, a pydantic model or a dataclass) or "
        "register an encoder with agentreplay_core.register_type()")
    if str(d.get("type")) not in error:
        error = f"a value of type {d.get('type')}: {error}"
    raise CodecFailure(
        f"{where} could not be recorded ({error}){hint}; its repr was {d.get('repr')}. "
        "Record the run again once it can be",
        d.get("type") if isinstance(d.get("type"), str) else None,
        recorded_at=path if isinstance(path, str) and path else None,
    )


CONTAINERS: dict[str, Callable[[dict[str, Json], bool], Any]] = {
    "tuple": lambda d, restore: tuple(_items(d, restore)),
    "set": _collection(set),
    "frozenset": _collection(frozenset),
    "dict": _dec_escaped,
    "map": _dec_map,
    "pydantic": _dec_object,
    "dataclass": _dec_object,
    "namedtuple": _dec_object,
    "enum": _dec_enum,
    "ext": _dec_ext,
    "ndarray": _dec_ndarray,
    "npscalar": _dec_npscalar,
    "unencodable": _dec_unencodable,
}


def dec_tagged(d: dict[str, Json], restore: bool) -> Any:
    tag = d[TAG]
    try:
        leaf = DECODERS.get(tag) if type(tag) is str else None
        if leaf is not None:
            return leaf(d)
        container = CONTAINERS.get(tag) if type(tag) is str else None
        if container is not None:
            return container(d, restore)
    except CodecFailure:
        raise
    except _MALFORMED as exc:
        raise CodecFailure(
            f"cannot decode tagged object {tag!r}: {type(exc).__name__}: {exc}; was the data "
            "changed after encoding, or written by another agentreplay version?",
        ) from exc
    raise CodecFailure(
        f"unknown tag {tag!r} under the reserved key {TAG!r}; it was written by a newer "
        "agentreplay, or a plain dict used the reserved key without being encoded"
    )
