"""`instrument(recorder)`: record the LlamaIndex calls of this context into a run;
`instrument(player)`: track the spans of a replay, so that replayed calls know their paths.

Per context: a server handling several requests at once (threads, asyncio tasks) records each
into its own run, as long as each request instruments in its own thread or task. The events
reach the right run through a ContextVar (see `_routing`).
"""

from __future__ import annotations

import threading
from contextvars import Token
from types import TracebackType
from typing import Any

from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

from agentreplay_core import Player, Recorder
from agentreplay_llamaindex import _routing
from agentreplay_llamaindex._compat import warn_if_unsupported
from agentreplay_llamaindex._handlers import RecordingEventHandler
from agentreplay_llamaindex._tracking import TrackingSpanHandler
from agentreplay_llamaindex._tree import SpanTree


class Instrumentation:
    """An active instrumentation; `.close()` (or leaving the `with`) ends it.

    `handler` is the `RecordingEventHandler` when recording, None when tracking a replay
    (`tree` is then the replay's span tree). Closing works from any thread or task: events
    fired after it are recorded nowhere, in every context.
    """

    def __init__(self, target: Recorder | Player, handler: RecordingEventHandler | None,
                 span_handler: BaseSpanHandler[Any], tree: SpanTree | None = None) -> None:
        self.target = target
        self.handler = handler
        self.span_handler = span_handler
        self.tree = tree
        self._closed = False
        self._lock = threading.Lock()
        self._token: Token[Instrumentation | None] | None = None

    @property
    def recorder(self) -> Recorder | None:
        return self.handler.recorder if self.handler is not None else None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop routing events here (idempotent); the last one closed detaches the handlers."""
        with self._lock:
            if self._closed:
                return
            self._closed = True  # the routing handlers check it: no event gets here after it
            token, self._token = self._token, None
        if token is not None:
            _routing.deactivate(self, token)
        _routing.leave(self)
        if self.handler is not None:
            self.handler.close()
        if self.tree is not None:
            self.tree.clear()

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _ended(target: Recorder | Player) -> bool:
    # a replay has no end marker the adapter can see; only a sealed recording has ended
    return isinstance(target, Recorder) and target.closed


def _build(target: Recorder | Player) -> Instrumentation:
    if isinstance(target, Recorder):
        handler = RecordingEventHandler(target)
        return Instrumentation(target, handler, handler.span_handler)
    tree = SpanTree()
    return Instrumentation(target, None, TrackingSpanHandler(tree), tree)


def instrument(target: Recorder | Player) -> Instrumentation:
    """Record every LlamaIndex LLM, embedding, retriever, rerank and tool call made in this
    context into a `Recorder`, or track the spans of a replay for its `Player`.

    This context: the current thread or asyncio task, and what LlamaIndex derives from it
    (the tasks it creates, `asyncio.to_thread`, workflow steps). Calls made elsewhere go to
    the instrumentation of their own context, or nowhere; so concurrent requests, each
    instrumented in its own thread or task, record into their own runs.

    Tracking a replay tells the replay stand-ins where in the run tree each call runs, so
    that equal calls running concurrently get the results recorded at their own positions.

    Instrumenting the same target again in this context returns the active handle; another
    target raises RuntimeError (its calls would belong to both), unless the active recording
    has ended, which closes it. Any instrumentation whose recording has ended, in whatever
    context, is closed here too, so forgotten handles do not pile up.
    """
    if not isinstance(target, (Recorder, Player)):
        raise TypeError(f"instrument() takes a Recorder or a Player, not {type(target).__name__}")
    warn_if_unsupported()
    for stale in _routing.open_instrumentations():
        if _ended(stale.target):
            stale.close()  # its run ended without closing it: it could only drop late steps
    current = _routing.active()
    if current is not None:
        if current.target is target:
            return current
        raise RuntimeError(
            f"agentreplay is already {_describe(current.target)} in this context; close that "
            "instrumentation (`.close()` or leave its `with` block) before "
            f"{_describe(target, starting=True)}. Concurrent runs must each be instrumented "
            "in their own thread or asyncio task (a task created inside the `with` block "
            "inherits its instrumentation)")
    made = _build(target)
    _routing.join(made)  # routing first, then the ContextVar: no event of the run is missed
    made._token = _routing.activate(made)
    return made


def _describe(target: Recorder | Player, *, starting: bool = False) -> str:
    if isinstance(target, Recorder):
        return (f"instrumenting run {target.run_id}" if starting
                else f"recording LlamaIndex into run {target.run_id}")
    return (f"tracking the replay of run {target.run_id}" if starting
            else f"tracking LlamaIndex for the replay of run {target.run_id}")
