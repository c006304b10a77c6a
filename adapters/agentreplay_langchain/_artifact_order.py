"""The key order of a tool message's artifact (`response_format="content_and_artifact"`).

The run log keeps JSON objects with their keys sorted; a node that puts the sources into its
next prompt shows them in the order the tool made them. Beside the artifact goes the key order
of its dicts, also of those in the pydantic objects in it (a retriever tool's Documents: their
metadata), where it is not the sorted one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from agentreplay_core._key_order import (
    ATTRS,
    INNER,
    ITEMS,
    KEYS,
    MAP_KEYS,
    in_key_order,
    key_order,
)

ARTIFACT_ORDER = "artifact_order"
_CONTAINERS = (dict, list)


def keep_artifact(stored: dict[str, Any], artifact: Any) -> None:
    stored["artifact"] = artifact
    spec = _artifact_order(artifact)
    if spec is not None:
        stored[ARTIFACT_ORDER] = spec


def _artifact_order(value: Any) -> dict[str, Any] | None:
    """`key_order` that also sees into pydantic objects (the core codec stores their fields,
    and so their dicts, sorted); their spec is {"attrs": {field: spec}}, as of a dataclass."""
    kind = type(value)
    if kind is dict and all(type(k) is str for k in value):
        spec: dict[str, Any] = {}
        keys = list(value)
        inner = {k: s for k, v in value.items() if (s := _artifact_order(v)) is not None}
        if keys != sorted(keys):
            spec[KEYS] = keys
        if inner:
            spec[INNER] = inner
        return spec or None
    if kind is list:
        items = {str(i): s for i, v in enumerate(value) if (s := _artifact_order(v)) is not None}
        return {ITEMS: items} if items else None
    if isinstance(value, BaseModel):
        attrs = {name: s for name, v in value.__dict__.items()
                 if (s := _artifact_order(v)) is not None}
        return {ATTRS: attrs} if attrs else None
    return key_order(value)  # a dataclass, a dict with keys that are no strings


def _in_artifact_order(value: Any, spec: Any) -> Any:
    """`in_key_order` that also puts the dicts of pydantic objects in order (set in place:
    `value` was decoded for its caller alone)."""
    kind = type(value)
    if not isinstance(spec, dict):
        spec = None
    if kind is dict and (spec is None or MAP_KEYS not in spec) and all(
            type(k) is str for k in value):
        # the keys checked as the core checks them: a spec that does not fit is ignored
        keys = in_key_order(dict.fromkeys(value), {KEYS: spec.get(KEYS)} if spec else None)
        inner = spec.get(INNER) if spec else None
        if not isinstance(inner, dict):
            inner = {}
        return {k: _in_artifact_order(value[k], inner.get(k)) for k in keys}
    if kind is list:
        items = spec.get(ITEMS) if spec else None
        if not isinstance(items, dict):
            items = {}
        return [_in_artifact_order(v, items.get(str(i))) for i, v in enumerate(value)]
    if isinstance(value, BaseModel):
        attrs = spec.get(ATTRS) if spec else None
        if not isinstance(attrs, dict):
            attrs = {}
        fields = value.__dict__
        for name, field in list(fields.items()):
            if type(field) in _CONTAINERS or isinstance(field, BaseModel):
                fields[name] = _in_artifact_order(field, attrs.get(name))
        return value
    return in_key_order(value, spec)


def revived_artifact(stored: dict[str, Any], artifact: Any,
                      copied: Callable[[Any], Any]) -> Any:
    """A tool message's artifact, its dicts in the recorded order (or sorted: recordings
    before the order was kept, dicts that were sorted)."""
    return _in_artifact_order(copied(artifact), copied(stored.get(ARTIFACT_ORDER)))
