"""Routing LlamaIndex events to the instrumentation active where they fire.

`instrument()` sets a ContextVar; one shared pair of handlers on the root dispatcher reads it
for every event and span and hands the call to that instrumentation's recording session or
span tree, as plain method calls (a pydantic handler in between would cost a private-attribute
lookup, ~1.5 us, per access). LlamaIndex fires events and spans synchronously in the context of
the code that runs (and keeps its own active span in a ContextVar), so the tasks it creates,
`asyncio.to_thread` and workflow steps carry the run of the code that started them.

Why one shared pair rather than a pair per instrumentation filtering on the ContextVar: the
dispatcher calls every handler for every event and span, so N concurrent runs would cost N
calls (and N ContextVar reads) per event; the shared pair costs one whatever the concurrency,
and the dispatcher's lists hold at most these two entries: attached when the first
instrumentation opens, detached when the last one closes.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Protocol

from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.span import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index_instrumentation import get_dispatcher

if TYPE_CHECKING:
    from agentreplay_llamaindex._instrument import Instrumentation
    from agentreplay_llamaindex._tree import SpanTree


class SpanSink(Protocol):
    """Where an instrumentation's spans go: plain calls, no pydantic handler in between."""

    def enter(self, span_id: str, parent_id: str | None, instance: Any,
              bound: inspect.BoundArguments) -> None: ...

    def exit(self, span_id: str, bound: inspect.BoundArguments, result: Any) -> None: ...

    def drop(self, span_id: str, bound: inspect.BoundArguments, err: BaseException | None
             ) -> None: ...


_active: ContextVar[Instrumentation | None] = ContextVar(
    "agentreplay_llamaindex_instrumentation", default=None)


def active() -> Instrumentation | None:
    """The open instrumentation of this context (inherited by the contexts derived from it)."""
    found = _active.get()
    return found if found is not None and not found.closed else None


def activate(instrumentation: Instrumentation) -> Token[Instrumentation | None]:
    """Make `instrumentation` the one of this context (and of contexts derived from it)."""
    return _active.set(instrumentation)


def deactivate(instrumentation: Instrumentation, token: Token[Instrumentation | None]) -> None:
    """Undo `activate` if this is the context that did it and nothing replaced it since.

    Elsewhere (closed from another thread or task) a ContextVar cannot be reset: the closed
    instrumentation stays set there but is skipped, and the next `instrument()` replaces it.
    """
    if _active.get() is instrumentation:
        with contextlib.suppress(ValueError):  # set in another context: not ours to reset
            _active.reset(token)


def tracked_tree() -> SpanTree | None:
    """The span tree of the replay tracked in this context, if any."""
    found = active()
    return found.tree if found is not None else None


class RoutingEventHandler(BaseEventHandler):
    """Hands each event to the recording active in the context where it fires."""

    @classmethod
    def class_name(cls) -> str:
        return "AgentReplayRoutingEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> Any:
        found = _active.get()
        if found is not None:
            events = found.events  # None once closed, and when tracking a replay
            if events is not None:
                events(event)  # it catches and counts its own errors
        return None


class SpanlessHandler(BaseSpanHandler[SimpleSpan]):
    """A span handler that builds no span objects: LlamaIndex's abstract span factories
    answer None. What the span_* methods do, if anything, is the subclass's."""

    def new_span(self, id_: str, bound_args: inspect.BoundArguments,
                 instance: Any | None = None, parent_span_id: str | None = None,
                 tags: dict[str, Any] | None = None, **kwargs: Any) -> SimpleSpan | None:
        return None

    def prepare_to_exit_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, result: Any | None = None,
                             **kwargs: Any) -> SimpleSpan | None:
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, err: BaseException | None = None,
                             **kwargs: Any) -> SimpleSpan | None:
        return None


class RoutingSpanHandler(SpanlessHandler):
    """Hands each span to the span sink of the instrumentation active where it runs (which
    builds its own spans)."""

    def __init__(self) -> None:
        super().__init__(open_spans={}, completed_spans=[], dropped_spans=[],
                         current_span_ids={})

    @classmethod
    def class_name(cls) -> str:
        return "AgentReplayRoutingSpanHandler"

    def span_enter(self, id_: str, bound_args: inspect.BoundArguments,
                   instance: Any | None = None, parent_id: str | None = None,
                   tags: dict[str, Any] | None = None, **kwargs: Any) -> None:
        found = _active.get()
        if found is not None:
            spans = found.spans  # None once closed
            if spans is not None:
                spans.enter(id_, parent_id, instance, bound_args)

    def span_exit(self, id_: str, bound_args: inspect.BoundArguments,
                  instance: Any | None = None, result: Any | None = None,
                  **kwargs: Any) -> None:
        found = _active.get()
        if found is not None:
            spans = found.spans
            if spans is not None:
                spans.exit(id_, bound_args, result)

    def span_drop(self, id_: str, bound_args: inspect.BoundArguments,
                  instance: Any | None = None, err: BaseException | None = None,
                  **kwargs: Any) -> None:
        found = _active.get()
        if found is not None:
            spans = found.spans
            if spans is not None:
                spans.drop(id_, bound_args, err)


_lock = threading.Lock()
_open: list[Instrumentation] = []
_routers: tuple[RoutingEventHandler, RoutingSpanHandler] | None = None


def open_instrumentations() -> list[Instrumentation]:
    """Every instrumentation not yet closed, in any context."""
    with _lock:
        return list(_open)


def join(instrumentation: Instrumentation) -> None:
    """Count `instrumentation` as open; the first one attaches the routing handlers."""
    global _routers
    with _lock:
        if _routers is None:
            _routers = (RoutingEventHandler(), RoutingSpanHandler())
            root = get_dispatcher()
            root.add_event_handler(_routers[0])
            root.add_span_handler(_routers[1])
        _open.append(instrumentation)


def leave(instrumentation: Instrumentation) -> None:
    """Count `instrumentation` as closed; the last one detaches the routing handlers.

    The dispatcher has no remove method: its lists are filtered (a new list, so a dispatch
    iterating the old one in another thread is not disturbed).
    """
    global _routers
    with _lock:
        if instrumentation in _open:
            _open.remove(instrumentation)
        if _open or _routers is None:
            return
        events, spans = _routers
        _routers = None
        root = get_dispatcher()
        root.event_handlers = [h for h in root.event_handlers if h is not events]
        root.span_handlers = [h for h in root.span_handlers if h is not spans]
