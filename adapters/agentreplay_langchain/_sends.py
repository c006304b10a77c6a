"""LangGraph `Send`s in a tool's result (a `Command(goto=[Send(...)])` fans work out).

The core codec cannot keep a Send (it is no dataclass): each is stored in an envelope of its
own, `{ENVELOPE: 2, "class": "Send", "node": ..., "arg": ..., "arg_order"?: ...,
"timeout"?: ...}`, its `arg` left to the codec with its key order (a node may prompt with it),
and revived as a Send.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from agentreplay_core._key_order import in_key_order, keep_key_order
from agentreplay_langchain._construct import ENVELOPE, FIELDS_VERSION, SCALARS

#: how deep a result is searched for Sends
_MAX_DEPTH = 100
#: revives a stored value with a `copied` (the envelope module's `_revive`)
Revive = Callable[[Any, Callable[[Any], Any]], Any]

SEND, ARG_ORDER = "Send", "arg_order"


@functools.cache
def _langgraph_types() -> tuple[type, type] | None:
    """LangGraph's `Send` and `Command`, if LangGraph is installed."""
    try:
        from langgraph.types import Command, Send
    except ImportError:  # LangChain without LangGraph
        return None
    return Send, Command


def _send_type() -> type | None:
    types = _langgraph_types()
    return types[0] if types is not None else None


def sends_tagged(value: Any) -> Any:
    """`value` (a copy, owned here) with each `Send` in it in its envelope: in lists, tuples,
    dicts and dataclasses (a `Command`'s `goto`)."""
    send = _send_type()
    return value if send is None else _tagged(value, send)


def _tagged(value: Any, send: type, depth: int = 0) -> Any:
    kind = type(value)
    if kind in SCALARS or depth > _MAX_DEPTH:
        return value
    if kind is send:
        stored = {ENVELOPE: FIELDS_VERSION, "class": SEND, "node": value.node,
                  "arg": _tagged(value.arg, send, depth + 1)}
        keep_key_order(stored, ARG_ORDER, value.arg)  # a node may prompt with it
        timeout = getattr(value, "timeout", None)
        if timeout is not None:
            stored["timeout"] = timeout
        return stored
    if kind is list:
        for i, item in enumerate(value):
            value[i] = _tagged(item, send, depth + 1)
    elif kind is dict:
        for key, item in value.items():
            value[key] = _tagged(item, send, depth + 1)
    elif kind is tuple:
        items = [_tagged(item, send, depth + 1) for item in value]
        if any(a is not b for a, b in zip(items, value, strict=True)):
            return tuple(items)
    else:
        _in_fields(value, lambda field: _tagged(field, send, depth + 1))
    return value


def _in_fields(value: Any, changed: Callable[[Any], Any]) -> None:
    """Each field of a dataclass `value` (owned by the caller) set to `changed(field)` where
    that is another object (also on a frozen one, whose content does not change)."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return
    for name in [f.name for f in dataclasses.fields(value)]:
        field = getattr(value, name, None)
        if type(field) in SCALARS:
            continue
        new = changed(field)
        if new is not field:
            with contextlib.suppress(AttributeError, TypeError):
                object.__setattr__(value, name, new)


def sends_revived(value: Any, copied: Callable[[Any], Any], revive: Revive,
                  depth: int = 0) -> Any:
    """The inverse of `sends_tagged`: `value` with each Send envelope in it revived, the
    containers that hold one changed in place (decoded for this call), all else as it is."""
    kind = type(value)
    if kind in SCALARS or depth > _MAX_DEPTH:
        return value
    if kind is dict:
        if value.get(ENVELOPE) == FIELDS_VERSION and value.get("class") == SEND:
            return revive_send(value, copied, revive)
        for key, item in value.items():
            new = sends_revived(item, copied, revive, depth + 1)
            if new is not item:
                value[key] = new
    elif kind is list:
        for i, item in enumerate(value):
            new = sends_revived(item, copied, revive, depth + 1)
            if new is not item:
                value[i] = new
    elif kind is tuple:
        items = tuple(sends_revived(item, copied, revive, depth + 1) for item in value)
        if any(a is not b for a, b in zip(items, value, strict=True)):
            return items
    else:
        _in_fields(value, lambda field: sends_revived(field, copied, revive, depth + 1))
        types = _langgraph_types()
        if types is not None and kind is types[1] and value.graph == types[1].PARENT:
            # ToolNode tells a command for the parent graph whose Sends it gathers by
            # identity (`graph is Command.PARENT`), which a decoded string is not
            object.__setattr__(value, "graph", types[1].PARENT)
    return value


def revive_send(stored: dict[str, Any], copied: Callable[[Any], Any], revive: Revive) -> Any:
    send = _send_type()
    node = stored.get("node")
    if send is None or type(node) is not str or "arg" not in stored:
        raise ValueError("recorded LangGraph Send cannot be revived: "
                         + ("LangGraph is not installed" if send is None else
                            "it has no node or arg; the recording is damaged"))
    arg = in_key_order(revive(stored["arg"], copied), copied(stored.get(ARG_ORDER)))
    if "timeout" in stored:
        return send(node, arg, timeout=copied(stored["timeout"]))
    return send(node, arg)
