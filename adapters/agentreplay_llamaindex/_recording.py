"""The recording of one run: LlamaIndex events and spans become steps.

LlamaIndex swallows every exception a handler raises, so each entry point catches its own,
logs it and counts it in `recorder.stats.internal_errors` (reported when the run is sealed).
The host agent never sees a recording failure, and its own exceptions pass through untouched.

This runs on the host's thread for every event and span of the instrumented context, most of
which record nothing: those return after a dict lookup (events) or one tree update (spans).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from contextvars import Token
from datetime import datetime, timezone
from typing import Any

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

from agentreplay_core import Recorder
from agentreplay_core._codec import canonical_bytes, encode
from agentreplay_core._keys import _current_path, join_path
from agentreplay_core._recorded_errors import error_to_record
from agentreplay_llamaindex._compat import is_workflow_suspension
from agentreplay_llamaindex._convert import (
    nodes_json,
    query_text,
    tool_request,
)
from agentreplay_llamaindex._llm_calls import LlmRecorder
from agentreplay_llamaindex._stream_events import watch, written
from agentreplay_llamaindex._tree import (
    EMBEDDING_ENTRY_POINTS,
    RETRIEVER_ENTRY_POINTS,
    SpanInfo,
    SpanTree,
)
from agentreplay_llamaindex._waiting import suspension_output
from agentreplay_llamaindex._workflow_state import (
    context_in,
    snapshot,
    tool_step_output,
    with_effects,
)

log = logging.getLogger("agentreplay.llamaindex")

Route = Callable[["RecordingSession", Any], None]

#: spans whose result is replayed whole: while one runs, the core's current path is its path,
#: so what is recorded inside it (a model's own clock, ids or random reads with
#: `entropy=True`) is known to be inside it and is not expected again when it is replayed.
#: Embedding spans are not among them: their vectors are steps below the span, not the span
#: itself, and what is drawn inside one belongs to the step of the first text of its batch.
_BOUNDARY_OWNERS = frozenset({"llm", "tool", "retriever"})


class RecordingSession:
    """The recording state of one run: events become steps, spans give paths and tool calls.

    `instrument()` routes this context's events and spans straight here (plain calls: the
    pydantic handlers' private attributes cost ~1.5 us per access); attached by hand, the
    `RecordingEventHandler` and `RecordingSpanHandler` forward to it. Every entry point
    catches its own errors, counts them and logs them.
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.tree = SpanTree()
        self.llm = LlmRecorder(recorder, self.tree)
        self._rerank: dict[str, dict[str, Any]] = {}
        #: span id -> the token that set the core's current path to its path
        self._paths: dict[str, Token[str]] = {}
        #: span id of a tool given the workflow Context -> (the Context, its state before)
        self._states: dict[str, tuple[Any, dict[str, Any]]] = {}
        #: span id of a tool given the workflow Context -> the token of its stream's events
        self._streams: dict[str, Token[list[str] | None]] = {}
        #: (tool name, request) of a call suspended waiting for an event and not resumed yet
        #: -> its step (name, request, output, path, timing), recorded if the run ends so
        self._suspended: dict[tuple[str, bytes], tuple[str, Any, dict[str, Any], str,
                                                     dict[str, Any]]] = {}

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
        timing = info.timing() if info is not None else {}  # of the call that made them all
        for text, vector in zip(event.chunks, event.embeddings, strict=False):
            self.recorder.record("embedding", name, {"mode": mode, "text": text},
                                 list(map(float, vector)),
                                 path=join_path(base, str(self.tree.count(base))), **timing)
        if event.span_id in self._paths:  # (reset to the caller's path when the span ends)
            _current_path.set(self._next_text_path(base))

    def _next_text_path(self, base: str) -> str:
        """The path the next text of an embedding span is recorded at."""
        return join_path(base, str(self.tree.counted(base)))

    def retrieval(self, event: RetrievalEndEvent) -> None:
        info = self.tree.get(event.span_id)
        name = info.name if info is not None and info.owner == "retriever" else "retriever"
        self.recorder.record("retriever", name,
                             {"query": query_text(event.str_or_query_bundle)},
                             nodes_json(event.nodes),
                             path=self.path_for(event.span_id, f"retriever:{name}"),
                             **(info.timing() if info is not None else {}))

    def _entry_span(self, span_id: str, owner: str, entry_points: frozenset[str]
                    ) -> SpanInfo | None:
        """The span, if it is one of `owner`'s public methods (`entry_points`), where its
        steps are recorded."""
        info = self.tree.get(span_id)
        if info is None or info.owner != owner or \
                info.method.rsplit(".", 1)[-1] not in entry_points:
            return None
        return info

    def retrieval_failed(self, span_id: str, bound: inspect.BoundArguments,
                         err: BaseException) -> None:
        """A retriever's `retrieve` raised (a vector store timing out): its error step, where
        its nodes would have been, so that a replay raises it where the program met it."""
        info = self._entry_span(span_id, "retriever", RETRIEVER_ENTRY_POINTS)
        if info is None:
            return
        query = bound.arguments.get("str_or_query_bundle")
        self.recorder.record("retriever", info.name, {"query": query_text(query)},
                             error_to_record(err), is_error=True, path=info.path,
                             **info.timing())

    def rerank_start(self, event: ReRankStartEvent) -> None:
        if event.span_id is not None:
            self._rerank[event.span_id] = {
                "model": event.model_name,
                "request": {"query": query_text(event.query) if event.query else None,
                            "node_ids": [n.node.node_id for n in event.nodes],
                            "top_n": event.top_n},
                "started": datetime.now(timezone.utc), "t0": time.perf_counter()}

    def rerank_end(self, event: ReRankEndEvent) -> None:
        started = self._rerank.pop(event.span_id, None) if event.span_id else None
        if started is None:
            return
        name = str(started["model"] or "rerank")
        self.recorder.record("rerank", name, started["request"], nodes_json(event.nodes),
                             path=self.path_for(event.span_id, f"rerank:{name}"),
                             started_at=started["started"],
                             duration_ms=(time.perf_counter() - started["t0"]) * 1000.0)

    def tool_started(self, span_id: str, bound: inspect.BoundArguments) -> None:
        """A tool given the workflow Context: keep the state it starts from."""
        ctx = context_in(bound.arguments.values())
        if ctx is not None:
            before = snapshot(ctx)
            if before is not None:
                self._states[span_id] = (ctx, before)
            self._streams[span_id] = watch(ctx)

    def tool_done(self, span_id: str, info: SpanInfo | None, bound: inspect.BoundArguments,
                  result: Any, err: BaseException | None) -> None:
        state = self._states.pop(span_id, None) if self._states else None
        token = self._streams.pop(span_id, None) if self._streams else None
        events = written(token) if token is not None else None
        if info is None or info.owner != "tool" or info.nested:
            return
        request = tool_request(bound.args, bound.kwargs)
        if is_workflow_suspension(err):
            # The call is run again when its event arrives, and that call's result is the
            # tool's. A run may end first (a server resumes in another request): its replay
            # must suspend there too, so what a call still waits for then is recorded at
            # `close`. A suspension of a call already waiting is that call waiting further.
            assert err is not None
            self._suspended[(info.name, _request_key(request))] = (
                info.name, request, with_effects(suspension_output(err), state, events),
                info.path, info.timing())
            return
        if self._suspended:  # (the call it resumed, if it was one)
            self._suspended.pop((info.name, _request_key(request)), None)
        if err is not None:
            # what it wrote before raising happened, and the agent goes on from there
            self.recorder.record("tool", info.name, request,
                                 with_effects(error_to_record(err), state, events),
                                 is_error=True, path=info.path, **info.timing())
        elif result is not None and not inspect.isawaitable(result):
            output = tool_step_output(result, state, events)
            self.recorder.record("tool", info.name, request, output, path=info.path,
                                 **info.timing())

    def embedding_failed(self, span_id: str, bound: inspect.BoundArguments,
                         err: BaseException) -> None:
        """An embedding call raised: record the error on the first text not yet embedded."""
        info = self._entry_span(span_id, "embedding", EMBEDDING_ENTRY_POINTS)
        if info is None:
            return
        args = bound.arguments
        texts = [args["query"]] if "query" in args else [args["text"]] if "text" in args \
            else list(args.get("texts") or [])
        done = self.tree.counted(info.path)  # texts of earlier batches that succeeded
        if done >= len(texts):
            return
        mode = "query" if "query" in info.method.rsplit(".", 1)[-1] else "text"
        self.recorder.record("embedding", info.name, {"mode": mode, "text": texts[done]},
                             error_to_record(err), is_error=True,
                             path=join_path(info.path, str(done)), **info.timing())

    def close(self) -> None:
        self.llm.close()
        suspended, self._suspended = self._suspended, {}
        for name, request, output, path, timing in suspended.values():
            try:
                self.recorder.record("tool", name, request, output, path=path, **timing)
            except Exception:
                self.failed(f"suspended call of tool {name!r}")
        self.tree.clear()

    # -- entry points ---------------------------------------------------------------------

    def handle(self, event: BaseEvent) -> None:
        """One LlamaIndex event (of any kind: most are not recorded)."""
        try:
            route = _ROUTES.get(type(event), _UNRESOLVED)
            if route is _UNRESOLVED:
                route = _resolve(type(event))
            if route is not None:
                route(self, event)
        except Exception:
            self.failed(type(event).__name__)

    def enter(self, span_id: str, parent_id: str | None, instance: Any,
              bound: inspect.BoundArguments) -> None:
        try:
            info = self.tree.enter(span_id, parent_id, instance)
            if info.owner == "llm" and info.parent is not None:
                self.llm.entered(info)
            # (a call inside a call of the same LLM or tool is inside its path already)
            if info.owner in _BOUNDARY_OWNERS and not (info.nested or info.inner):
                # LlamaIndex enters and exits a span in the context its code runs in
                self._paths[span_id] = _current_path.set(info.path)
                if info.owner == "tool":
                    self.tool_started(span_id, bound)
            elif info.owner == "embedding" and \
                    info.method.rsplit(".", 1)[-1] in EMBEDDING_ENTRY_POINTS:
                # what the client draws (a request id) sits inside the step of the first
                # text of the batch it draws for, which a replay serves: advanced per batch
                self._paths[span_id] = _current_path.set(self._next_text_path(info.path))
        except Exception:
            self.failed("span start")

    def _left(self, span_id: str) -> None:
        if self._paths:  # on every span's exit: mostly nothing to do
            token = self._paths.pop(span_id, None)
            if token is not None:
                try:  # noqa: SIM105 - a `suppress` object per span costs more than this
                    _current_path.reset(token)
                except ValueError:  # exited in another context: the path was set in that one
                    pass

    def exit(self, span_id: str, bound: inspect.BoundArguments, result: Any) -> None:
        try:
            self._left(span_id)
            info = self.tree.exited(span_id)
            if info is not None and info.owner == "tool":
                self.tool_done(span_id, info, bound, result, None)
        except Exception:
            self.failed("span end")

    def drop(self, span_id: str, bound: inspect.BoundArguments, err: BaseException | None
             ) -> None:
        try:
            self._left(span_id)
            error = err if err is not None else RuntimeError("span dropped without an error")
            self.tool_done(span_id, self.tree.get(span_id), bound, None, error)
            if self.llm.is_open(span_id):  # a non-streaming LLM call that raised
                self.llm.failed(span_id, error, streaming=False)
            self.embedding_failed(span_id, bound, error)
            self.retrieval_failed(span_id, bound, error)
            self.tree.exited(span_id)
        except Exception:
            self.failed("span error")


def _request_key(request: Any) -> bytes:
    """Tells the calls of one tool apart as a replay does (a call the workflow runs again
    has the same)."""
    try:
        return canonical_bytes(encode(request, path="request"))
    except Exception:  # not storable: the step's own recording reports it
        return repr(request).encode()


def _chat_start(s: RecordingSession, e: LLMChatStartEvent) -> None:
    s.llm.start(e.span_id, "chat", e.messages, e.additional_kwargs)  # read, never kept


def _completion_start(s: RecordingSession, e: LLMCompletionStartEvent) -> None:
    s.llm.start(e.span_id, "complete", e.prompt, e.additional_kwargs)


def _chunk(s: RecordingSession, e: LLMChatInProgressEvent | LLMCompletionInProgressEvent
           ) -> None:
    s.llm.chunk(e.span_id, e.response)


def _end(s: RecordingSession, e: LLMChatEndEvent | LLMCompletionEndEvent) -> None:
    s.llm.end(e.span_id, e.response)


def _exception(s: RecordingSession, e: ExceptionEvent) -> None:
    s.llm.failed(e.span_id, e.exception, streaming=True)


#: event class -> what records it, in the order they are tested (subclasses included)
_BY_CLASS: tuple[tuple[type, Route], ...] = (
    (LLMChatStartEvent, _chat_start),
    (LLMCompletionStartEvent, _completion_start),
    (LLMChatInProgressEvent, _chunk),
    (LLMCompletionInProgressEvent, _chunk),
    (LLMChatEndEvent, _end),
    (LLMCompletionEndEvent, _end),
    (ExceptionEvent, _exception),
    (EmbeddingEndEvent, RecordingSession.embeddings),
    (RetrievalEndEvent, RecordingSession.retrieval),
    (ReRankStartEvent, RecordingSession.rerank_start),
    (ReRankEndEvent, RecordingSession.rerank_end),
)
_UNRESOLVED: Any = object()
#: event type -> its route, or None for events nothing is recorded from (filled as met)
_ROUTES: dict[type, Route | None] = {}


def _resolve(cls: type) -> Route | None:
    route = next((r for base, r in _BY_CLASS if issubclass(cls, base)), None)
    _ROUTES[cls] = route
    return route
