"""The instrumentation handlers, for attaching by hand to a dispatcher.

Both forward to the run's `RecordingSession`, which records and never raises; `instrument()`
routes its context's events and spans to that session directly (see `_routing`).
"""

from __future__ import annotations

import inspect
from typing import Any

from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.span import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from pydantic import PrivateAttr

from agentreplay_core import Recorder
from agentreplay_llamaindex._recording import RecordingSession


class RecordingEventHandler(BaseEventHandler):
    """Records LLM, embedding, retriever and rerank events of LlamaIndex into a `Recorder`.

    `instrument(recorder)` hands it the events of its own context (and its `span_handler`
    the spans: paths, tool calls, errors). Attached by hand to the root dispatcher, both
    record every LlamaIndex call in the process, whatever its context.
    """

    _session: RecordingSession = PrivateAttr()
    _span_handler: RecordingSpanHandler = PrivateAttr()

    def __init__(self, recorder: Recorder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._session = RecordingSession(recorder)
        self._span_handler = RecordingSpanHandler(self._session)

    @property
    def session(self) -> RecordingSession:
        """Where the events and spans are recorded (`instrument()` calls it directly)."""
        return self._session

    @property
    def span_handler(self) -> RecordingSpanHandler:
        """The span handler that must be attached next to this event handler."""
        return self._span_handler

    @classmethod
    def class_name(cls) -> str:
        return "AgentReplayRecordingEventHandler"

    @property
    def recorder(self) -> Recorder:
        return self._session.recorder

    def handle(self, event: BaseEvent, **kwargs: Any) -> Any:
        self._session.handle(event)
        return None

    def close(self) -> None:
        """Record streams the host never finished; forget the spans."""
        try:
            self._session.close()
        except Exception:
            self._session.failed("close")


class RecordingSpanHandler(BaseSpanHandler[SimpleSpan]):
    """Builds the span tree (paths) and records tool calls, which have no events."""

    _session: RecordingSession = PrivateAttr()

    def __init__(self, session: RecordingSession) -> None:
        super().__init__(open_spans={}, completed_spans=[], dropped_spans=[],
                         current_span_ids={})
        self._session = session

    @property
    def session(self) -> RecordingSession:
        return self._session

    @classmethod
    def class_name(cls) -> str:
        return "AgentReplayRecordingSpanHandler"

    def new_span(self, id_: str, bound_args: inspect.BoundArguments,
                 instance: Any | None = None, parent_span_id: str | None = None,
                 tags: dict[str, Any] | None = None, **kwargs: Any) -> SimpleSpan | None:
        self._session.enter(id_, parent_span_id, instance, bound_args)
        return None  # the base class keeps no span objects for us: nothing to leak

    def prepare_to_exit_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, result: Any | None = None,
                             **kwargs: Any) -> SimpleSpan | None:
        self._session.exit(id_, bound_args, result)
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, err: BaseException | None = None,
                             **kwargs: Any) -> SimpleSpan | None:
        self._session.drop(id_, bound_args, err)
        return None
