"""`instrument(recorder)`: attach the recording handlers to LlamaIndex's root dispatcher;
`instrument(player)`: track the spans of a replay, so that replayed calls know their paths."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index_instrumentation import get_dispatcher

from agentreplay_core import Player, Recorder
from agentreplay_llamaindex._compat import warn_if_unsupported
from agentreplay_llamaindex._handlers import RecordingEventHandler
from agentreplay_llamaindex._tracking import TrackingSpanHandler, set_tracked, tracked_tree
from agentreplay_llamaindex._tree import SpanTree

_lock = threading.Lock()
_active: Instrumentation | None = None


class Instrumentation:
    """Attached handlers; `.close()` (or leaving the `with`) detaches them.

    `handler` is the `RecordingEventHandler` when recording, None when tracking a replay.
    """

    def __init__(self, target: Recorder | Player, handler: RecordingEventHandler | None,
                 span_handler: BaseSpanHandler[Any], tree: SpanTree | None = None) -> None:
        self.target = target
        self.handler = handler
        self._span_handler = span_handler
        self._tree = tree
        self._closed = False

    @property
    def recorder(self) -> Recorder | None:
        return self.handler.recorder if self.handler is not None else None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Detach (idempotent). The dispatcher has no remove method: filter its lists."""
        global _active
        with _lock:
            if self._closed:
                return
            self._closed = True
            root = get_dispatcher()
            root.event_handlers = [h for h in root.event_handlers if h is not self.handler]
            root.span_handlers = [h for h in root.span_handlers
                                  if h is not self._span_handler]
            if _active is self:
                _active = None
        if self._tree is not None and tracked_tree() is self._tree:
            set_tracked(None)
        if self.handler is not None:
            self.handler.close()

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _ended(target: Recorder | Player) -> bool:
    # a replay has no end marker the adapter can see; only a sealed recording has ended
    return isinstance(target, Recorder) and target.closed


def _attach(target: Recorder | Player) -> Instrumentation:
    root = get_dispatcher()
    if isinstance(target, Recorder):
        handler = RecordingEventHandler(target)
        root.add_event_handler(handler)
        root.add_span_handler(handler.span_handler)
        return Instrumentation(target, handler, handler.span_handler)
    tree = SpanTree()
    span_handler = TrackingSpanHandler(tree)
    root.add_span_handler(span_handler)
    set_tracked(tree)
    return Instrumentation(target, None, span_handler, tree)


def instrument(target: Recorder | Player) -> Instrumentation:
    """Record every LlamaIndex LLM, embedding, retriever, rerank and tool call into a
    `Recorder`, or track the spans of a replay for its `Player`.

    Tracking a replay tells the replay stand-ins where in the run tree each call runs, so
    that equal calls running concurrently get the results recorded at their own positions.
    The handlers sit on the root dispatcher, so they see the whole process: one run at a
    time. Instrumenting the same target again returns the attached handle; another target
    while one is attached raises RuntimeError (its steps would be recorded twice), unless
    the attached recording has ended, which detaches it.
    """
    global _active
    if not isinstance(target, (Recorder, Player)):
        raise TypeError(f"instrument() takes a Recorder or a Player, not {type(target).__name__}")
    warn_if_unsupported()
    with _lock:
        stale = _active
    if stale is not None and not stale.closed and _ended(stale.target):
        stale.close()  # its run ended without detaching: it could only drop late steps now
    with _lock:
        if _active is not None and not _active.closed:
            if _active.target is target:
                return _active
            raise RuntimeError(
                f"agentreplay is already {_describe(_active.target)}; close that "
                "instrumentation (`.close()` or leave its `with` block) before "
                f"{_describe(target, starting=True)}")
        _active = _attach(target)
        return _active


def _describe(target: Recorder | Player, *, starting: bool = False) -> str:
    if isinstance(target, Recorder):
        return (f"instrumenting run {target.run_id}" if starting
                else f"recording LlamaIndex into run {target.run_id}")
    return (f"tracking the replay of run {target.run_id}" if starting
            else f"tracking LlamaIndex for the replay of run {target.run_id}")
