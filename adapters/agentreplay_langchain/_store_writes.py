"""What a tool writes to LangGraph's store, kept with its result.

A tool given the graph's store (`InjectedStore`, `ToolRuntime.store`, `get_store()`) can save
what later turns read (a long-term memory: `store.put(("memories", user), key, {...})`, which
the agent's node searches into its next prompt). A replay serves the tool without running
it, so its writes are recorded with its step (`store_writes`: `[namespace, key, value]` each,
the value None for a delete, then the write's `index` where it named one, and the key order
of the value where it is not the sorted one, `[namespace, key, value, index, order]`: the
node that renders the memories into its prompt shows them in the order written, which the
run log's JSON does not keep) and written again into the replay's store when the stand-in
serves the result.

The store is the graph's, shared by every task, so the recording wraps its class's `batch`
and `abatch` (which `put` and `delete` go through) once (`agentreplay_core._noting`): the
wrappers note the writes only while a recorded tool call runs in the writer's context, and
always call the originals.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterable
from contextvars import Token
from typing import Any

from agentreplay_core._key_order import in_key_order, key_order
from agentreplay_core._noting import Notes, wrap_once

log = logging.getLogger("agentreplay.langchain")

#: beside a tool's stored output: what it wrote to the graph's store, in order
STORE_WRITES = "store_writes"

_noted: Notes[list[Any]] = Notes("agentreplay_store_writes")

Noting = Token[list[list[Any]] | None]


def _store_type() -> type | None:
    try:
        from langgraph.store.base import BaseStore
    except ImportError:  # LangChain without LangGraph
        return None
    return BaseStore


#: LangGraph's store class, if LangGraph is installed
STORE_TYPE = _store_type()


def graph_store(arguments: Any = None) -> Any | None:
    """The store of the LangGraph run the current call is part of, if any: LangGraph's, or
    the one injected among the call's `arguments` (before Python 3.11 async code cannot ask
    LangGraph for it)."""
    try:
        from langgraph.config import get_store

        return get_store()
    except Exception:  # no LangGraph, not inside a graph, or a graph without a store
        pass
    if STORE_TYPE is not None and isinstance(arguments, dict):
        return next((v for v in arguments.values() if isinstance(v, STORE_TYPE)), None)
    return None


def watch(arguments: Any = None) -> Noting | None:
    """Start noting what this context writes to the graph's store (a tool call starting)."""
    store = graph_store(arguments)
    if store is None:
        return None
    for method in ("batch", "abatch"):
        wrap_once(type(store), method, _noting)
    return _noted.start()


def noted(token: Noting) -> list[list[Any]] | None:
    """The writes noted since `watch` gave `token` (None: none), and stop noting them."""
    return _noted.stop(token)


def _note(ops: Iterable[Any]) -> Iterable[Any]:
    """Note the writes among `ops`; the ops, as a list (an iterator is read once)."""
    writes = _noted.current
    if writes is None:
        return ops
    ops = list(ops)
    try:
        from langgraph.store.base import PutOp

        for op in ops:
            if isinstance(op, PutOp):
                value = None if op.value is None else dict(op.value)
                write: list[Any] = [list(op.namespace), op.key, value]
                order = key_order(value)  # (now: the agent may change the dict later)
                if op.index is not None or order is not None:
                    write.append(op.index)
                if order is not None:
                    write.append(order)
                writes.append(write)
    except Exception:  # never in the way of the agent's own write
        pass
    return ops


def _noting(original: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(original):
        @functools.wraps(original)
        async def abatch(self: Any, ops: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
            return await original(self, _note(ops), *args, **kwargs)
        return abatch

    @functools.wraps(original)
    def batch(self: Any, ops: Iterable[Any], *args: Any, **kwargs: Any) -> Any:
        return original(self, _note(ops), *args, **kwargs)
    return batch


def _ops(writes: Any) -> list[Any]:
    from langgraph.store.base import PutOp

    ops = []
    for write in writes if isinstance(writes, list) else []:
        if isinstance(write, list) and len(write) in (3, 4, 5):
            index = write[3] if len(write) >= 4 else None
            value = write[2]
            if isinstance(value, dict):
                # in the recorded order, or sorted: never the order the run log gave
                value = in_key_order(value, write[4] if len(write) == 5 else None)
            ops.append(PutOp(tuple(write[0]), write[1], value, index=index))
    return ops


def _writable(writes: Any, arguments: Any, tool: str) -> Any | None:
    """The store to write `writes` into again, if any: not one with an embedding index,
    which would embed the values again (a live model, or embedding steps the replay served
    with the tool already)."""
    store = graph_store(arguments) if writes else None
    if store is not None and getattr(store, "index_config", None):
        log.warning("agentreplay: tool %r wrote to the graph's store when recorded, but the "
                    "store embeds what is written (an index): the replay does not write it "
                    "again, and the store differs from here on", tool)
        return None
    return store


def write_again(writes: Any, arguments: Any, tool: str) -> None:
    """Apply recorded writes to the current graph's store."""
    store = _writable(writes, arguments, tool)
    if store is not None:
        store.batch(_ops(writes))


async def awrite_again(writes: Any, arguments: Any, tool: str) -> None:
    store = _writable(writes, arguments, tool)
    if store is not None:
        await store.abatch(_ops(writes))
