"""The instrumentation handlers: events become steps, spans give paths and tool calls.

LlamaIndex swallows every exception a handler raises, so each entry point catches its own,
logs it and counts it in `recorder.stats.internal_errors` (reported when the run is sealed).
The host agent never sees a recording failure, and its own exceptions pass through untouched.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.embedding import EmbeddingEndEvent
from llama_index.core.instrumentation.events.exception import ExceptionEvent
from llama_index.core.instrumentation.events.llm import (
    LLMChatEndEvent,
    LLMChatInProgressEvent,
    LLMChatStartEvent,
    LLMCompletionEndEvent,
    LLMCompletionInProgressEvent,
    LLMCompletionStartEvent,
)
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent
from llama_index.core.instrumentation.span import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from pydantic import PrivateAttr

from agentreplay_core import Recorder
from agentreplay_core._keys import join_path
from agentreplay_core._recorded_errors import error_to_record
from agentreplay_llamaindex._convert import (
    nodes_json,
    query_text,
    tool_output_for_storage,
    tool_request,
)
from agentreplay_llamaindex._llm_calls import LlmRecorder
from agentreplay_llamaindex._tree import EMBEDDING_ENTRY_POINTS, SpanTree

log = logging.getLogger("agentreplay.llamaindex")

class _Session:
    """The recording state shared by the event handler and the span handler of one run."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.tree = SpanTree()
        self.llm = LlmRecorder(recorder, self.tree)
        self._rerank: dict[str, dict[str, Any]] = {}

    def failed(self, where: str) -> None:
        self.recorder.stats.internal_errors += 1
        log.exception("agentreplay: run %s: could not record LlamaIndex %s",
                      self.recorder.run_id, where)

    def path_for(self, span_id: str | None, segment: str) -> str:
        info = self.tree.get(span_id)
        return info.path if info is not None else self.tree.loose_path(segment)

    def embeddings(self, event: EmbeddingEndEvent) -> None:
        info = self.tree.get(event.span_id)
        name = info.name if info is not None and info.owner == "embedding" else "embedding"
        # query and text embeddings of one model differ (instructions, prefixes): the span
        # (get_query_embedding vs get_text_embedding_batch) tells which this was
        mode = "query" if info is not None and "query" in info.method.lower() else "text"
        base = self.path_for(event.span_id, f"embedding:{name}")
        for text, vector in zip(event.chunks, event.embeddings, strict=False):
            self.recorder.record("embedding", name, {"mode": mode, "text": text},
                                 [float(x) for x in vector],
                                 path=join_path(base, str(self.tree.count(base))))

    def retrieval(self, event: RetrievalEndEvent) -> None:
        info = self.tree.get(event.span_id)
        name = info.name if info is not None and info.owner == "retriever" else "retriever"
        self.recorder.record("retriever", name,
                             {"query": query_text(event.str_or_query_bundle)},
                             nodes_json(event.nodes),
                             path=self.path_for(event.span_id, f"retriever:{name}"))

    def rerank_start(self, event: ReRankStartEvent) -> None:
        if event.span_id is not None:
            self._rerank[event.span_id] = {
                "model": event.model_name,
                "request": {"query": query_text(event.query) if event.query else None,
                            "node_ids": [n.node.node_id for n in event.nodes],
                            "top_n": event.top_n}}

    def rerank_end(self, event: ReRankEndEvent) -> None:
        started = self._rerank.pop(event.span_id, None) if event.span_id else None
        if started is None:
            return
        name = str(started["model"] or "rerank")
        self.recorder.record("rerank", name, started["request"], nodes_json(event.nodes),
                             path=self.path_for(event.span_id, f"rerank:{name}"))

    def tool_done(self, span_id: str, bound: inspect.BoundArguments, result: Any,
                  err: BaseException | None) -> None:
        info = self.tree.get(span_id)
        if info is None or info.owner != "tool" or info.nested:
            return
        request = tool_request(bound.args, bound.kwargs)
        if err is not None:
            self.recorder.record("tool", info.name, request, error_to_record(err),
                                 is_error=True, path=info.path)
        elif result is not None and not inspect.isawaitable(result):
            self.recorder.record("tool", info.name, request, tool_output_for_storage(result),
                                 path=info.path)

    def embedding_failed(self, span_id: str, bound: inspect.BoundArguments,
                         err: BaseException) -> None:
        """An embedding call raised: record the error on the first text not yet embedded."""
        info = self.tree.get(span_id)
        method = info.method.rsplit(".", 1)[-1] if info is not None else ""
        if info is None or info.owner != "embedding" or method not in EMBEDDING_ENTRY_POINTS:
            return
        args = bound.arguments
        texts = [args["query"]] if "query" in args else [args["text"]] if "text" in args \
            else list(args.get("texts") or [])
        done = self.tree.counted(info.path)  # texts of earlier batches that succeeded
        if done >= len(texts):
            return
        mode = "query" if "query" in method else "text"
        self.recorder.record("embedding", info.name, {"mode": mode, "text": texts[done]},
                             error_to_record(err), is_error=True,
                             path=join_path(info.path, str(done)))

    def close(self) -> None:
        self.llm.close()
        self.tree.clear()


class RecordingEventHandler(BaseEventHandler):
    """Records LLM, embedding, retriever and rerank events of LlamaIndex into a `Recorder`.

    `instrument(recorder)` hands it the events of its own context (and its `span_handler`
    the spans: paths, tool calls, errors). Attached by hand to the root dispatcher, both
    record every LlamaIndex call in the process, whatever its context.
    """

    _session: _Session = PrivateAttr()
    _span_handler: RecordingSpanHandler = PrivateAttr()

    def __init__(self, recorder: Recorder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._session = _Session(recorder)
        self._span_handler = RecordingSpanHandler(self._session)

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
        try:
            self._handle(event)
        except Exception:
            self._session.failed(type(event).__name__)
        return None

    def _handle(self, event: BaseEvent) -> None:
        s = self._session
        if isinstance(event, LLMChatStartEvent):
            s.llm.start(event.span_id, "chat", event.messages, dict(event.additional_kwargs))
        elif isinstance(event, LLMCompletionStartEvent):
            s.llm.start(event.span_id, "complete", event.prompt,
                        dict(event.additional_kwargs))
        elif isinstance(event, (LLMChatInProgressEvent, LLMCompletionInProgressEvent)):
            s.llm.chunk(event.span_id, event.response)
        elif isinstance(event, (LLMChatEndEvent, LLMCompletionEndEvent)):
            s.llm.end(event.span_id, event.response)
        elif isinstance(event, ExceptionEvent):
            s.llm.failed(event.span_id, event.exception, streaming=True)
        elif isinstance(event, EmbeddingEndEvent):
            s.embeddings(event)
        elif isinstance(event, RetrievalEndEvent):
            s.retrieval(event)
        elif isinstance(event, ReRankStartEvent):
            s.rerank_start(event)
        elif isinstance(event, ReRankEndEvent):
            s.rerank_end(event)

    def close(self) -> None:
        """Record streams the host never finished; forget the spans."""
        try:
            self._session.close()
        except Exception:
            self._session.failed("close")


class RecordingSpanHandler(BaseSpanHandler[SimpleSpan]):
    """Builds the span tree (paths) and records tool calls, which have no events."""

    _session: _Session = PrivateAttr()

    def __init__(self, session: _Session) -> None:
        super().__init__(open_spans={}, completed_spans=[], dropped_spans=[],
                         current_span_ids={})
        self._session = session

    @classmethod
    def class_name(cls) -> str:
        return "AgentReplayRecordingSpanHandler"

    def new_span(self, id_: str, bound_args: inspect.BoundArguments,
                 instance: Any | None = None, parent_span_id: str | None = None,
                 tags: dict[str, Any] | None = None, **kwargs: Any) -> SimpleSpan | None:
        try:
            self._session.tree.enter(id_, parent_span_id, instance)
        except Exception:
            self._session.failed("span start")
        return None  # the base class keeps no span objects for us: nothing to leak

    def prepare_to_exit_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, result: Any | None = None,
                             **kwargs: Any) -> SimpleSpan | None:
        try:
            self._session.tool_done(id_, bound_args, result, None)
            self._session.tree.exited(id_)
        except Exception:
            self._session.failed("span end")
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, err: BaseException | None = None,
                             **kwargs: Any) -> SimpleSpan | None:
        try:
            error = err if err is not None else RuntimeError("span dropped without an error")
            self._session.tool_done(id_, bound_args, None, error)
            if self._session.llm.is_open(id_):  # a non-streaming LLM call that raised
                self._session.llm.failed(id_, error, streaming=False)
            self._session.embedding_failed(id_, bound_args, error)
            self._session.tree.exited(id_)
        except Exception:
            self._session.failed("span error")
        return None
