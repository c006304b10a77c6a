"""`instrument(recorder)`: record the LlamaIndex calls of this context into a run;
`instrument(player)`: track the spans of a replay, so that replayed calls know their paths;
`instrument()`: whichever the active agentreplay `Session` asks for (nothing without one).

Per context: a server handling several requests at once (threads, asyncio tasks) records each
into its own run, as long as each request instruments in its own thread or task. The events
reach the right run through a ContextVar (see `_routing`). Importing this module registers a
session hook: every `with Session(...)` block instruments LlamaIndex for its lifetime.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable
from contextvars import Token
from types import TracebackType
from typing import Any

from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

from agentreplay_core import Mode, Player, Recorder, Session, active_session, register_session_hook
from agentreplay_llamaindex import _routing
from agentreplay_llamaindex._compat import warn_if_unsupported
from agentreplay_llamaindex._handlers import RecordingEventHandler, RecordingSpanHandler
from agentreplay_llamaindex._routing import SpanSink
from agentreplay_llamaindex._tracking import TrackingSpanHandler
from agentreplay_llamaindex._tree import SpanTree


class Instrumentation:
    """An active instrumentation; `.close()` (or leaving the `with`) ends it.

    `handler` is the `RecordingEventHandler` when recording, None when tracking a replay
    (`tree` is then the replay's span tree). Closing works from any thread or task: events
    fired after it are recorded nowhere, in every context.

    `instrument()` with no session returns an inert handle (`target` None, never active). A
    handle a `Session` attached (`session` is set) belongs to it: closing it does nothing, the
    session detaches it when it ends.
    """

    def __init__(self, target: Recorder | Player | None, handler: RecordingEventHandler | None,
                 span_handler: BaseSpanHandler[Any] | None, tree: SpanTree | None = None, *,
                 session: Session | None = None) -> None:
        self.target = target
        self.handler = handler
        self.tree = tree
        self.session = session
        self._span_handler = span_handler
        self._closed = target is None
        #: what the routing calls for each event and span of this context (None once closed):
        #: the recording session itself, not the pydantic handlers in front of it
        self.events: Callable[[Any], Any] | None = None
        self.spans: SpanSink | None = None
        if not self._closed:
            self.events = handler.session.handle if handler is not None else None
            self.spans = _sink_of(span_handler)
        self._lock = threading.Lock()
        self._token: Token[Instrumentation | None] | None = None

    @property
    def span_handler(self) -> BaseSpanHandler[Any]:
        """The span handler the routing hands this context's spans to."""
        if self._span_handler is None:
            raise RuntimeError("an inert instrumentation (no session) has no span handler")
        return self._span_handler

    @property
    def active(self) -> bool:
        """Whether calls made now are recorded or tracked (False once closed, and when inert)."""
        return not self._closed

    @property
    def recorder(self) -> Recorder | None:
        return self.handler.recorder if self.handler is not None else None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop routing events here (idempotent); the last one closed detaches the handlers.
        A no-op for a session's handle, which its session detaches."""
        if self.session is None:
            self._detach()

    def _detach(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # the routing handlers read these: no event or span gets here after it
            self.events = self.spans = None
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


class _HandlerSpans:
    """Any span handler as a `SpanSink` (the recording and tracking ones have sinks)."""

    def __init__(self, handler: BaseSpanHandler[Any]) -> None:
        self.handler = handler

    def enter(self, span_id: str, parent_id: str | None, instance: Any,
              bound: inspect.BoundArguments) -> None:
        self.handler.span_enter(id_=span_id, bound_args=bound, instance=instance,
                                parent_id=parent_id)

    def exit(self, span_id: str, bound: inspect.BoundArguments, result: Any) -> None:
        self.handler.span_exit(id_=span_id, bound_args=bound, result=result)

    def drop(self, span_id: str, bound: inspect.BoundArguments, err: BaseException | None
             ) -> None:
        self.handler.span_drop(id_=span_id, bound_args=bound, err=err)


def _sink_of(handler: BaseSpanHandler[Any] | None) -> SpanSink | None:
    if handler is None:
        return None
    if isinstance(handler, RecordingSpanHandler):
        return handler.session
    if isinstance(handler, TrackingSpanHandler):
        return handler.spans
    return _HandlerSpans(handler)


def _ended(target: Recorder | Player | None) -> bool:
    # a replay has no end marker the adapter can see; only a sealed recording has ended
    return isinstance(target, Recorder) and target.closed


def _build(target: Recorder | Player, session: Session | None) -> Instrumentation:
    if isinstance(target, Recorder):
        handler = RecordingEventHandler(target)
        return Instrumentation(target, handler, handler.span_handler, session=session)
    tree = SpanTree()
    return Instrumentation(target, None, TrackingSpanHandler(tree, target), tree,
                           session=session)


def instrument(target: Recorder | Player | Session | None = None) -> Instrumentation:
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

    With no argument (or a `Session`), the active session decides: its recorder or player is
    instrumented as above (or its handle returned, when a `with Session(...)` block already
    attached it), and with no session (or `AGENTREPLAY_MODE` off) the handle is inert.
    """
    if target is None or isinstance(target, Session):
        session = active_session() if target is None else target
        if session is None or session.mode == Mode.OFF:
            return Instrumentation(None, None, None)
        if session.target is None:
            raise RuntimeError(f"{session!r} is not open: call instrument() inside its `with` "
                               "block (or after session.open())")
        target = session.target
    if not isinstance(target, (Recorder, Player)):
        raise TypeError("instrument() takes a Session, a Recorder or a Player, not "
                        f"{type(target).__name__}")
    return _attach(target, None)


def _attach(target: Recorder | Player, session: Session | None) -> Instrumentation:
    warn_if_unsupported()
    for stale in _routing.open_instrumentations():
        if _ended(stale.target):
            stale._detach()  # its run ended without closing it: it could only drop late steps
    current = _routing.active()
    if current is not None:
        if current.target is target:
            return current
        if session is not None:  # a session opened inside another one shadows it
            return _activate(_build(target, session))
        assert current.target is not None  # an inert handle is never active
        raise RuntimeError(
            f"agentreplay is already {_describe(current.target)} in this context; close that "
            "instrumentation (`.close()` or leave its `with` block) before "
            f"{_describe(target, starting=True)}. Concurrent runs must each be instrumented "
            "in their own thread or asyncio task (a task created inside the `with` block "
            "inherits its instrumentation)")
    return _activate(_build(target, session))


def _activate(made: Instrumentation) -> Instrumentation:
    _routing.join(made)  # routing first, then the ContextVar: no event of the run is missed
    made._token = _routing.activate(made)
    return made


def _describe(target: Recorder | Player, *, starting: bool = False) -> str:
    if isinstance(target, Recorder):
        return (f"instrumenting run {target.run_id}" if starting
                else f"recording LlamaIndex into run {target.run_id}")
    return (f"tracking the replay of run {target.run_id}" if starting
            else f"tracking LlamaIndex for the replay of run {target.run_id}")


def _session_hook(session: Session) -> contextlib.AbstractContextManager[Any] | None:
    """Instrument LlamaIndex for a session opened with `with Session(...)`, for its lifetime."""
    target = session.target
    if target is None:
        return None
    current = _routing.active()
    if current is not None and current.target is target:
        return None  # already instrumented here; whoever did it closes it
    made = _attach(target, session)
    detach = contextlib.ExitStack()
    detach.callback(made._detach)
    return detach


register_session_hook(_session_hook)
