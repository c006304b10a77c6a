"""The key order of dicts whose order reaches a prompt, kept apart from them: a model's tool
call arguments, a retrieved document's metadata, what a tool wrote to an agent's state.

Stored values are canonical JSON, whose objects have their keys sorted, and PostgreSQL's JSONB
orders them its own way (shorter keys first): a dict comes back from a run log with its keys
in another order than it had. Equal as a dict, but not as text: an agent that renders a tool
call's arguments into its next prompt (`json.dumps(call["args"])`) sent the model's order
live and would send another one in replay, a divergence that never happened. The adapters
store the order of such dicts beside them (`key_order`, only where it is not the sorted
order) and put it back when they serve them (`in_key_order`, which sorts the rest, so the
order no longer depends on the store).
"""

from __future__ import annotations

import contextlib
from typing import Any

from pydantic import BaseModel

#: the spec of a dict: {"keys": [its keys in order], "inner": {key: spec of that value}};
#: of a list: {"items": {"index": spec of that item}}; only the parts that need one. A dict
#: with a key that is no string (`{10: "Messi", 7: "Ronaldo"}`), which the codec stores as
#: pairs sorted by key, has {"map": [its keys in order], "map_inner": [[key, spec], ...]}
KEYS, INNER, ITEMS, MAP_KEYS, MAP_INNER = "keys", "inner", "items", "map", "map_inner"
#: ... and of a dataclass (a LangGraph `Command` a tool returns) or a pydantic model (the
#: Documents of a tool's artifact: their metadata), whose dicts the codec stores sorted too:
#: {"attrs": {field: spec}}
ATTRS = "attrs"
#: values with no dict inside, met at every leaf: answered at once
_LEAVES = frozenset({str, int, float, bool, type(None), bytes})


def key_order(value: Any) -> dict[str, Any] | None:
    """The spec that restores the key order of the dicts in `value` (data the codec stores),
    or None if all of them are in sorted order."""
    kind = type(value)
    if kind in _LEAVES:
        return None
    if kind is dict:
        keys = list(value)
        if not all(type(k) is str for k in keys):
            return _map_order(value, keys)
        spec: dict[str, Any] = {}
        inner = {k: s for k, v in value.items() if (s := key_order(v)) is not None}
        if keys != sorted(keys):
            spec[KEYS] = keys
        if inner:
            spec[INNER] = inner
        return spec or None
    if kind is list:
        items = {str(i): s for i, v in enumerate(value) if (s := key_order(v)) is not None}
        return {ITEMS: items} if items else None
    fields = getattr(kind, "__dataclass_fields__", None)
    if fields is not None:  # a dataclass's dicts (`Command.update`), which the codec sorts
        attrs = {name: s for name in fields
                 if (s := key_order(getattr(value, name, None))) is not None}
        return {ATTRS: attrs} if attrs else None
    if isinstance(value, BaseModel):
        attrs = {name: s for name, field in value.__dict__.items()
                 if (s := key_order(field)) is not None}
        return {ATTRS: attrs} if attrs else None
    return None


def _map_order(value: dict[Any, Any], keys: list[Any]) -> dict[str, Any]:
    """The spec of a dict with keys that are not all strings: always its keys (sorted or not,
    their order is not the one the codec gives back)."""
    spec: dict[str, Any] = {MAP_KEYS: keys}
    inner = [[k, s] for k, v in value.items() if (s := key_order(v)) is not None]
    if inner:
        spec[MAP_INNER] = inner
    return spec


def keep_key_order(into: dict[str, Any], field: str, value: Any) -> None:
    """Store the spec of `value` in `into[field]`, where its dicts are not all in sorted order
    (a recording without the field reads as sorted)."""
    spec = key_order(value)
    if spec is not None:
        into[field] = spec


def in_key_order(value: Any, spec: Any) -> Any:
    """`value` (decoded, owned by the caller) with the dicts in the order `spec` gives, and
    every dict without one in sorted order. A spec that does not fit (a damaged or edited
    recording) is ignored, never trusted to add or drop keys."""
    kind = type(value)
    if kind is dict and type(spec) is dict and MAP_KEYS in spec:
        return _in_map_order(value, spec)
    if kind is dict:
        keys = spec.get(KEYS) if type(spec) is dict else None
        if type(keys) is not list or len(keys) != len(value) or not all(
                type(k) is str for k in keys) or set(keys) != set(value):
            try:
                keys = sorted(value)
            except TypeError:
                keys = list(value)
        inner = spec.get(INNER) if type(spec) is dict else None
        if type(inner) is not dict:
            inner = {}
        return {k: in_key_order(value[k], inner.get(k)) for k in keys}
    if kind is list:
        items = spec.get(ITEMS) if type(spec) is dict else None
        if type(items) is not dict:
            items = {}
        return [in_key_order(v, items.get(str(i))) for i, v in enumerate(value)]
    fields = getattr(kind, "__dataclass_fields__", None)
    if fields is not None:
        _in_field_order(value, fields, spec.get(ATTRS) if type(spec) is dict else None)
    elif isinstance(value, BaseModel):
        _in_model_order(value, spec.get(ATTRS) if type(spec) is dict else None)
    return value


def _in_map_order(value: dict[Any, Any], spec: dict[str, Any]) -> dict[Any, Any]:
    """`in_key_order` of a dict with keys that are not all strings, its spec a `_map_order`."""
    keys: Any = spec.get(MAP_KEYS)
    pairs = spec.get(MAP_INNER)
    try:
        inner = {k: s for k, s in pairs} if type(pairs) is list else {}
        if not (type(keys) is list and len(keys) == len(value) and set(keys) == set(value)):
            keys = value
    except (TypeError, ValueError):  # a damaged spec: unhashable keys, pairs that are none
        inner, keys = {}, value
    return {k: in_key_order(value[k], inner.get(k)) for k in keys}


def _in_field_order(value: Any, fields: Any, attrs: Any) -> None:
    """`in_key_order` of each dict or list a dataclass holds, set in place (also on a frozen
    one: `value` was revived for its caller alone, and its content does not change)."""
    if type(attrs) is not dict:
        attrs = {}
    for name in fields:
        field = getattr(value, name, None)
        if type(field) in (dict, list) or hasattr(type(field), "__dataclass_fields__"):
            # (slots without the field, or a read-only one: left as it came)
            with contextlib.suppress(AttributeError, TypeError):
                object.__setattr__(value, name, in_key_order(field, attrs.get(name)))


def _in_model_order(value: BaseModel, attrs: Any) -> None:
    """`in_key_order` of each dict, list or object a pydantic model holds, set in place
    (`value` was revived for its caller alone)."""
    if type(attrs) is not dict:
        attrs = {}
    fields = value.__dict__
    for name, field in list(fields.items()):
        if type(field) in (dict, list) or isinstance(field, BaseModel) \
                or hasattr(type(field), "__dataclass_fields__"):
            fields[name] = in_key_order(field, attrs.get(name))
