"""The encoding walk: Python values to a JSON-native tree with tagged objects.

This runs on the agent's thread for every recorded call, so the common exact types (str, dict,
list, int, float, bool, None) are handled inline before any table lookup or isinstance check,
and the path of a failure is only assembled while the failure unwinds (`CodecFailure`).
`depth` is the container level of the value's parent in the output tree.
"""

from __future__ import annotations

import enum
import math
import pathlib
from collections.abc import Callable
from typing import Any

import orjson

from agentreplay_core._codec_base import (
    MAX_NESTING,
    TAG,
    CodecFailure,
    Json,
    key_segment,
    too_deep,
    type_name,
)
from agentreplay_core._codec_numpy import encode_numpy
from agentreplay_core._codec_objects import object_parts, registered_for
from agentreplay_core._codec_scalars import (
    ENCODERS,
    as_base_value,
    enc_path,
    tag_float,
    tag_floats,
    tag_int,
    tag_str,
)

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1
#: lists of at least this many floats are stored as one packed vector (embeddings)
FLOAT_VECTOR_MIN = 32
_copysign = math.copysign


def _utf8_ok(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:  # lone surrogates
        return False
    return True


def enc(v: Any, depth: int) -> Json:
    t = type(v)
    if t is str:
        return v if "\x00" not in v and (v.isascii() or _utf8_ok(v)) else tag_str(v)
    if t is dict:
        return enc_dict(v, depth)
    if t is list:
        return enc_list(v, depth)
    if t is int:
        return v if _I64_MIN <= v <= _I64_MAX else tag_int(v)
    if t is float:
        return v if -1e16 < v < 1e16 and (v or _copysign(1.0, v) == 1.0) else tag_float(v)
    if v is None or t is bool:
        return v
    handler = EXACT.get(t)
    if handler is not None:
        return handler(v, depth)
    return enc_other(v, depth)


def enc_dict(v: dict[Any, Any], depth: int) -> Json:
    depth += 1
    if depth > MAX_NESTING:
        raise too_deep(v)
    if TAG in v:
        return _enc_escaped(v, depth - 1)
    out = {}
    k: Any = None
    try:
        for k, x in v.items():
            if type(k) is not str or "\x00" in k or not (k.isascii() or _utf8_ok(k)):
                break
            tx = type(x)
            if tx is str:
                out[k] = x if "\x00" not in x and (x.isascii() or _utf8_ok(x)) else tag_str(x)
            elif tx is dict:
                out[k] = enc_dict(x, depth)
            elif x is None or tx is bool or (tx is int and _I64_MIN <= x <= _I64_MAX):
                out[k] = x
            else:
                out[k] = enc(x, depth)
        else:
            return out
    except CodecFailure as failure:
        failure.add(key_segment(k), v)
        raise
    return _enc_map(v, depth - 1)


def enc_list(v: list[Any], depth: int) -> Json:
    depth += 1
    if depth > MAX_NESTING:
        raise too_deep(v)
    n = len(v)
    if n >= FLOAT_VECTOR_MIN and type(v[0]) is float and list(map(type, v)).count(float) == n:
        return tag_floats(v)
    out: list[Json] = []
    append = out.append
    try:
        for x in v:
            tx = type(x)
            if tx is str:
                append(x if "\x00" not in x and (x.isascii() or _utf8_ok(x)) else tag_str(x))
            elif tx is dict:
                append(enc_dict(x, depth))
            elif x is None or tx is bool or (tx is int and _I64_MIN <= x <= _I64_MAX):
                append(x)
            else:
                append(enc(x, depth))
    except CodecFailure as failure:
        failure.add(f"[{len(out)}]", v)  # the failing item is the next one
        raise
    return out


def _sort_key(encoded: Json) -> bytes:
    return orjson.dumps(encoded, option=orjson.OPT_SORT_KEYS)


def _enc_escaped(v: dict[Any, Any], depth: int) -> Json:
    """A dict holding the reserved key itself: wrap it so decode does not read it as a tag."""
    if depth + 2 > MAX_NESTING:
        raise too_deep(v)
    inner = {}
    for k, x in v.items():
        if type(k) is not str or "\x00" in k or not (k.isascii() or _utf8_ok(k)):
            return _enc_map(v, depth)
        inner[k] = _enc_child(x, depth + 2, v, key_segment(k))
    return {TAG: "dict", "v": inner}


def _enc_child(x: Any, depth: int, container: object, segment: str) -> Json:
    try:
        return enc(x, depth)
    except CodecFailure as failure:
        failure.add(segment, container)
        raise


def _enc_map(v: dict[Any, Any], depth: int) -> Json:
    """A dict with keys JSON objects cannot hold: pairs, sorted by the key's canonical bytes."""
    if depth + 3 > MAX_NESTING:
        raise too_deep(v)
    pairs = []
    for k, x in v.items():
        segment = key_segment(k)
        try:
            key = enc(k, depth + 3)
        except CodecFailure as failure:
            failure.message = f"dict key: {failure.message}"
            failure.add(segment, v)
            raise
        pairs.append([key, _enc_child(x, depth + 3, v, segment)])
    pairs.sort(key=lambda pair: _sort_key(pair[0]))
    return {TAG: "map", "v": pairs}


def _enc_sequence(tag: str) -> Callable[[Any, int], Json]:
    def encode_items(v: Any, depth: int) -> Json:
        try:
            return {TAG: tag, "v": enc_list(list(v), depth + 1)}
        except CodecFailure as failure:
            failure.add("", v)  # lets a cycle through the tuple be recognised
            raise

    return encode_items


def _enc_set(tag: str) -> Callable[[Any, int], Json]:
    def encode_elements(v: Any, depth: int) -> Json:
        if depth + 2 > MAX_NESTING:
            raise too_deep(v)
        items = [_enc_child(x, depth + 2, v, "{*}") for x in v]
        items.sort(key=_sort_key)  # a set has no order of its own: make one
        return {TAG: tag, "v": items}

    return encode_elements


EXACT: dict[type, Callable[[Any, int], Json]] = {
    **ENCODERS,
    tuple: _enc_sequence("tuple"),
    set: _enc_set("set"),
    frozenset: _enc_set("frozenset"),
}


def enc_registered(v: Any, depth: int) -> Json:
    """A value of a type registered with `register_type`."""
    entry = registered_for(v)
    assert entry is not None
    try:
        payload = entry.to_json(v)
    except Exception as exc:
        raise CodecFailure(f"the encoder registered as {entry.name!r} failed: {exc!r}",
                           type_name(v)) from exc
    return {TAG: "ext", "name": entry.name, "v": _enc_child(payload, depth + 1, v, "")}


def _enc_object(v: Any, depth: int) -> Json | None:
    if isinstance(v, enum.Enum):
        value = _enc_child(v.value, depth + 1, v, ".value")
        return {TAG: "enum", "cls": f"{type(v).__module__}:{type(v).__qualname__}", "v": value}
    parts = object_parts(v)
    if parts is None:
        return None
    if depth + 1 > MAX_NESTING:
        raise too_deep(v)
    try:
        out: dict[str, Any] = {TAG: parts.tag, "cls": parts.cls,
                               "v": enc_dict(parts.fields, depth + 1)}
        if parts.extra is not None:
            out["extra"] = enc_dict(parts.extra, depth + 1)
    except CodecFailure as failure:
        failure.add("", v)  # the fields dict is a copy: record the object for cycle detection
        raise
    if parts.fields_set is not None:
        out["set"] = parts.fields_set
    return out


def enc_other(v: Any, depth: int) -> Json:
    """Everything that is not one of the exact types in the dispatch table."""
    try:
        return _enc_other(v, depth)
    except (CodecFailure, RecursionError):
        raise
    except Exception as exc:  # user code ran (properties, __eq__, __dict__): name where it broke
        raise CodecFailure(f"encoding a {type_name(v)} raised {type(exc).__name__}: {exc}",
                           type_name(v)) from exc


def _enc_other(v: Any, depth: int) -> Json:
    module = type(v).__module__
    if module == "numpy" or module.startswith("numpy."):
        return encode_numpy(v, depth, enc)
    if registered_for(v) is not None:
        return enc_registered(v, depth)
    encoded = _enc_object(v, depth)
    if encoded is not None:
        return encoded
    if isinstance(v, pathlib.PurePath):
        return enc_path(v, depth)
    base = as_base_value(v)
    if base is not v:  # subclass of a supported builtin/stdlib type: store it as the base type
        return enc(base, depth)
    for cls, convert in ((dict, dict), (list, list), (tuple, tuple), (frozenset, frozenset),
                         (set, set)):
        if isinstance(v, cls):
            return enc(convert(v), depth)
    raise CodecFailure(
        f"cannot encode a value of type {type_name(v)}; make it JSON-serialisable (plain "
        "data, a pydantic model or a dataclass) or register an encoder with "
        "agentreplay_core.register_type()",
        type_name(v),
    )
