"""What a tool writes to LangGraph's custom stream, kept with its result.

A tool reports progress to a graph streamed with `stream_mode="custom"` through the run's
stream writer (`get_stream_writer()`, `runtime.stream_writer`). A replay serves the tool
without running it, so its writes are recorded with its step (`stream_writes`, in order) and
written again to the replay's stream writer by the stand-in, before it returns or raises.

The writer is a function LangGraph makes for each run and keeps on its `Runtime`, a frozen
dataclass with slots that every task and tool reads it from. The recording makes
`Runtime.stream_writer` hand out, for each writer, one wrapper (kept on the writer, so that
runtimes still compare and merge as they did) that notes what it is given while a recorded
tool call runs in its context (`agentreplay_core._noting.Notes`) and always calls the writer.
LangGraph's default writer (a no-op) is handed out as it is: LangGraph tells a runtime
without a writer by it. A LangGraph whose `Runtime` is laid out otherwise is left alone
(nothing noted).
"""

from __future__ import annotations

import logging
import threading
import types
from contextvars import Token
from typing import Any

from agentreplay_core._key_order import in_key_order, keep_key_order
from agentreplay_core._noting import Notes
from agentreplay_langchain._convert import dump, revive, storable

log = logging.getLogger("agentreplay.langchain")

#: beside a tool's stored output (or in its error record): what it wrote to the stream, and
#: the key order of the dicts written where it is not the sorted one
STREAM_WRITES, _ORDER = "stream_writes", "stream_writes_order"
#: on a writer: its noting wrapper; on a wrapper: True
_WRAPPER = "__agentreplay_noting__"

_noted: Notes[Any] = Notes("agentreplay_stream_writes")
_installing = threading.Lock()
_installed: bool | None = None  # None: not tried yet; False: no LangGraph, or another layout
_default_writer: Any = None

Noting = Token[list[Any] | None]


def _noting(writer: Any) -> Any:
    """The noting wrapper of `writer` (the same one each time), or `writer` itself."""
    if writer is _default_writer or getattr(writer, _WRAPPER, None) is True:
        return writer
    wrapper = getattr(writer, _WRAPPER, None)
    if wrapper is None:
        def wrapper(chunk: Any) -> Any:
            notes = _noted.current
            if notes is not None:
                notes.append(chunk)
            return writer(chunk)

        setattr(wrapper, _WRAPPER, True)
        try:
            setattr(writer, _WRAPPER, wrapper)
        except (AttributeError, TypeError):  # a writer that takes no attributes: not noted
            return writer
    return wrapper


def install() -> bool:
    """Make `Runtime.stream_writer` hand out noting writers (once; True if it does). Done when
    a recording handler or a stand-in is made: a `ToolRuntime` takes the writer when LangGraph
    builds it, before the tool call starts."""
    global _installed, _default_writer
    if _installed is not None:
        return _installed
    with _installing:
        if _installed is None:
            _installed = False
            try:
                from langgraph.runtime import Runtime
            except ImportError:
                return False
            slot = Runtime.__dict__.get("stream_writer")
            field = getattr(Runtime, "__dataclass_fields__", {}).get("stream_writer")
            if isinstance(slot, types.MemberDescriptorType) and field is not None:
                # LangGraph tells a runtime without a writer by its default (`merge`)
                _default_writer = field.default

                def get(runtime: Any) -> Any:
                    return _noting(slot.__get__(runtime, Runtime))

                def put(runtime: Any, writer: Any) -> None:
                    slot.__set__(runtime, writer)

                Runtime.stream_writer = property(get, put)  # type: ignore[assignment]
                _installed = True
            else:
                log.debug("agentreplay: LangGraph's Runtime has no stream_writer slot: what "
                          "tools write to the custom stream is not recorded")
    return _installed


def watch() -> Noting | None:
    """Start noting what this context writes to LangGraph's stream (a tool call starting)."""
    return _noted.start() if install() else None


def noted(token: Noting) -> list[Any] | None:
    """The writes noted since `watch` gave `token` (None: none), and stop noting them."""
    return _noted.stop(token)


def store_writes_into(stored: dict[str, Any], writes: list[Any]) -> dict[str, Any]:
    """`stored` (a tool's output or error record) with `writes` as a step stores them: copies,
    what the store cannot hold as its repr (a chunk must never make the tool's result
    unstorable), and the key order of their dicts (a UI shows them as they were written)."""
    kept = [storable(dump(chunk)) for chunk in writes]
    stored[STREAM_WRITES] = kept
    keep_key_order(stored, _ORDER, kept)
    return stored


def recorded_writes(output: Any) -> list[Any]:
    """The writes a stored tool output holds, revived, in their recorded key order."""
    writes = output.get(STREAM_WRITES) if isinstance(output, dict) else None
    if not isinstance(writes, list):
        return []
    revived: list[Any] = in_key_order([revive(chunk) for chunk in writes], output.get(_ORDER))
    return revived


def write_again(output: Any) -> None:
    """Write a served tool output's recorded stream writes to the current run's writer."""
    writes = recorded_writes(output)
    if not writes:
        return
    try:
        from langgraph.config import get_stream_writer

        writer = get_stream_writer()
    except Exception:  # not inside a graph, or Python 3.10 async without the context
        log.warning("agentreplay: a replayed tool wrote %d chunk(s) to LangGraph's stream "
                    "when recorded, but there is no stream writer here", len(writes))
        return
    for chunk in writes:
        writer(chunk)
