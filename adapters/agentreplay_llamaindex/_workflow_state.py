"""What an agent tool wrote to the workflow's state (`ctx.store`), kept with its result.

A tool that takes the workflow `Context` can change the state the agent reads next (an
`AgentWorkflow` renders `state` into its next prompt; the program reads it after the run). A
replay serves the tool without running it, so the change is part of what is recorded: the
state before and after the tool, compared as the workflow's `JsonSerializer` encodes it, and
the parts that differ stored with the tool's step as

    {"set": [[path, value], [path, value, key order], ...], "unset": [path, ...]}

where a path is the list of keys from the state's top level down to the changed value, in the
order the tool left them, and the key order (`agentreplay_core._key_order`) is there when the
value has dicts whose keys are not in sorted order: the store sorts them, and a state rendered
into a prompt must come back as it was. Plain
dicts are compared key by key (two tools running at once, each writing its own keys of
`state`, do not overwrite each other in the replay); any other value is stored whole. The
replay writes them back in one `edit_state`.

Only the default dict-like state of an in-memory store has a synchronous snapshot: a typed
state model or a durable store records the tool's result without its state changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from llama_index.core.workflow import JsonSerializer

from agentreplay_core._key_order import in_key_order, key_order
from agentreplay_llamaindex._compat import is_workflow_context
from agentreplay_llamaindex._convert import tool_output_for_storage
from agentreplay_llamaindex._stream_events import STREAM_EVENTS

#: keys of a dict the serializer wrote for an object (a pydantic model, a component): such a
#: dict is one value, not a mapping of the state's own keys
_OBJECT_MARKERS = ("__is_pydantic", "__is_component")

Snapshot = dict[str, Any]
Changes = dict[str, list[Any]]


def context_in(arguments: Iterable[Any]) -> Any | None:
    """The workflow Context among a tool call's arguments (agents pass it by keyword), which
    may hold the `*args` tuple and `**kwargs` dict of a call as they are bound."""
    for value in arguments:
        found = value.values() if isinstance(value, dict) else value \
            if isinstance(value, tuple) else (value,)
        for item in found:
            if is_workflow_context(item):
                return item
    return None


class _Lenient(JsonSerializer):
    """The workflow's serializer, answering a marker for a value it cannot encode (the
    agent's memory) instead of raising: the store would skip such a key with a warning meant
    for checkpoints, and silencing that warning would touch the process's warning filters."""

    def serialize(self, value: Any) -> str:
        try:
            return str(super().serialize(value))
        except Exception:
            return _UNENCODABLE


_UNENCODABLE = "\x00agentreplay: not encodable"  # no JSON text starts with a NUL


def snapshot(ctx: Any) -> Snapshot | None:
    """The committed state of `ctx`'s store as JSON, key by key, without the keys whose
    value the serializer cannot encode (the agent writes those, not its tools); None when
    the store has no synchronous snapshot to give."""
    try:
        payload = ctx.store.to_dict(_Lenient())
    except Exception:  # a durable or custom store: nothing to compare
        return None
    if payload.get("state_type") != "DictState" or not isinstance(
            payload.get("state_data"), dict):
        return None
    data = payload["state_data"].get("_data", {})
    return {key: json.loads(value) if isinstance(value, str) else value
            for key, value in data.items() if value != _UNENCODABLE}


def changes(before: Snapshot, after: Snapshot) -> Changes | None:
    """What differs from `before` to `after`, None when nothing does."""
    found: Changes = {"set": [], "unset": []}
    _compare([], before, after, found)
    return found if found["set"] or found["unset"] else None


def changed_since(ctx: Any, before: Snapshot) -> Changes | None:
    """What changed in `ctx`'s state since `before` was taken."""
    after = snapshot(ctx)
    return changes(before, after) if after is not None else None


#: beside a tool's stored output: what the tool wrote to the workflow state
WORKFLOW_STATE = "workflow_state"


def tool_step_output(result: Any, state: tuple[Any, Snapshot] | None,
                     events: list[str] | None) -> dict[str, Any]:
    """A tool's result as its step stores it, with what the tool wrote to the workflow state
    since `state` (its Context and the snapshot taken before the call) and the events it
    wrote to the stream (`_stream_events`), where it wrote any."""
    return with_effects(tool_output_for_storage(result), state, events)


def with_effects(stored: dict[str, Any], state: tuple[Any, Snapshot] | None,
                 events: list[str] | None) -> dict[str, Any]:
    """`stored` (a tool's stored result, or the record of the error it raised) with what the
    tool wrote to the workflow state and stream, where it wrote anything."""
    changed = changed_since(*state) if state is not None else None
    if changed is not None:
        stored[WORKFLOW_STATE] = changed
    if events:
        stored[STREAM_EVENTS] = events
    return stored


def _is_mapping(value: Any) -> bool:
    return isinstance(value, dict) and not any(marker in value for marker in _OBJECT_MARKERS)


def _compare(path: list[str], before: dict[str, Any], after: dict[str, Any],
             found: Changes) -> None:
    for key, value in after.items():
        here = [*path, key]
        if key in before and before[key] == value:
            continue
        if key in before and _is_mapping(before[key]) and _is_mapping(value):
            _compare(here, before[key], value, found)
        else:
            order = key_order(value)
            found["set"].append([here, value] if order is None else [here, value, order])
    found["unset"].extend([*path, key] for key in before if key not in after)


async def apply(ctx: Any, recorded: Changes) -> None:
    """Write the recorded changes into `ctx`'s state, as the tool did when recorded."""
    serializer = JsonSerializer()
    async with ctx.store.edit_state() as state:
        for path, value, *order in recorded.get("set", []):
            parent, key = _parent(state, path)
            ordered = in_key_order(value, order[0]) if order else value
            parent[key] = serializer.deserialize(json.dumps(ordered))
        for path in recorded.get("unset", []):
            parent, key = _parent(state, path)
            _remove(parent, key)


def _parent(state: Any, path: list[str]) -> tuple[Any, str]:
    """The container of the value at `path`, with the dicts on the way made where missing
    (a replay whose state already differs diverges where the agent reads it, not here)."""
    node = state
    for key in path[:-1]:
        child = node.get(key) if hasattr(node, "get") else None
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    return node, path[-1]


def _remove(container: Any, key: str) -> None:
    data = container if isinstance(container, dict) else container.to_dict()
    data.pop(key, None)  # DictState has no __delitem__; its to_dict() is its own dict
