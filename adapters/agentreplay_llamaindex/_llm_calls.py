"""Recording LLM calls from chat and completion events (start, in-progress, end, errors).

One LLM call fires events at several levels (`CustomLLM.achat -> chat -> complete`); only the
outermost call of the same LLM object is recorded. Streams are recorded chunk by chunk: the
end event carries only the last chunk and never fires for a stream the host abandoned.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any

from llama_index.core.llms.function_calling import FunctionCallingLLM

from agentreplay_core import Recorder
from agentreplay_core._recorded_errors import error_to_record
from agentreplay_llamaindex._chunk_growth import compacted_growth
from agentreplay_llamaindex._chunk_texts import (
    Texts,
    compacted,
    texts_of,
)
from agentreplay_llamaindex._compat import is_wrapper_llm
from agentreplay_llamaindex._convert import (
    TOOL_CALLS_ERROR,
    llm_kwargs,
    llm_metadata,
    llm_view,
    tool_selections_json,
)
from agentreplay_llamaindex._responses import response_json
from agentreplay_llamaindex._stream_secrets import redacted_stream
from agentreplay_llamaindex._tree import SpanInfo, SpanTree


class LlmCall:
    """One LLM call being recorded (or skipped because an outer call of the same LLM is).

    A slots class with a plain `__init__`: one is made for every LLM call, and a skipped
    call (a wrapper's, or one nested deeper in a call of the same LLM) needs no clock
    readings. The `complete` directly inside `CustomLLM.chat` makes none: its span is marked
    `inner` when it opens.
    """

    __slots__ = ("chunks", "instance", "kwargs", "metadata", "mode", "name", "path",
                 "request", "skip", "started", "stream", "t0", "texts")

    def __init__(self, skip: bool, mode: str = "", name: str = "",
                 request: dict[str, Any] | None = None, kwargs: dict[str, Any] | None = None,
                 metadata: dict[str, Any] | None = None, path: str = "", instance: Any = None,
                 stream: bool = False) -> None:
        self.skip = skip
        self.mode = mode
        self.name = name
        #: the stored request (`llm_view`): what the call is matched on
        self.request = request if request is not None else {}
        self.kwargs = kwargs if kwargs is not None else {}
        #: the replay-relevant part of the LLM's metadata, stored with the output
        self.metadata = metadata if metadata is not None else {}
        self.path = path
        self.instance = instance
        self.stream = stream
        self.chunks: list[dict[str, Any]] = []
        #: the texts of the last chunk, whole (the next chunk is stored with what it adds)
        self.texts: Texts = []
        self.started = _EPOCH if skip else datetime.now(timezone.utc)
        self.t0 = 0.0 if skip else time.perf_counter()


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def llm_step_name(model_name: object, instance: Any) -> str:
    """The name an LLM's steps are recorded under: its model name, or its class name when it
    has none (LlamaIndex's default is "unknown")."""
    return str(model_name) if model_name and model_name != "unknown" \
        else type(instance).__name__


def _name_of(metadata: dict[str, Any], instance: Any) -> str:
    return llm_step_name(metadata.get("model_name"), instance)


#: the output key of what reading a chat response's tool calls with
#: `error_on_no_tool_call=True` gave, stored where the ordinary reading found none: a list (an
#: integration that ignores the flag), or `{"error": ...}`. Runs recorded without it replay
#: as they did: a made-up error.
TOOL_CALLS_REQUIRED = "tool_calls_required"


def _tool_calls(instance: Any, response: Any, *, strict: bool = False
                ) -> list[dict[str, Any]] | dict[str, Any] | None:
    """The tool calls the live LLM reads from its own response (replay serves the same), or
    the error it raised reading them (`{"error": ...}`, raised again in replay if asked).
    `strict`: read with `error_on_no_tool_call=True` (what `predict_and_call` and
    `structured_predict` ask), which integrations honour differently."""
    if not isinstance(instance, FunctionCallingLLM) or response is None:
        return None
    try:
        return tool_selections_json(
            instance.get_tool_calls_from_response(response, error_on_no_tool_call=strict))
    except Exception as exc:
        # integrations that do not implement it, or reject this response (a streamed chunk
        # whose arguments are not whole JSON yet, which structured streams skip)
        return {TOOL_CALLS_ERROR: error_to_record(exc)}


def add_tool_calls(output: dict[str, Any], instance: Any, response: Any) -> None:
    """Store the tool calls read from a chat response, and, where there were none, what
    reading them with `error_on_no_tool_call=True` did (`TOOL_CALLS_REQUIRED`).

    Only the live model knows whether it raises then (OpenAI's does, LlamaIndex's mock and
    some integrations return no calls), and with which error: a replay that guessed would
    raise where the live program went on, or raise another error than the live one. Asked
    again only for a response without tool calls, where the answers may differ.
    """
    calls = _tool_calls(instance, response)
    output["tool_calls"] = calls
    if calls == []:
        output[TOOL_CALLS_REQUIRED] = _tool_calls(instance, response, strict=True)


def tool_calls_required(instance: Any, response: Any
                        ) -> list[dict[str, Any]] | dict[str, Any] | None:
    """What reading `response`'s tool calls with `error_on_no_tool_call=True` gives."""
    return _tool_calls(instance, response, strict=True)


class LlmRecorder:
    """Turns LLM events of one run into `llm` steps."""

    def __init__(self, recorder: Recorder, tree: SpanTree) -> None:
        self._recorder = recorder
        self._tree = tree
        self._lock = threading.Lock()
        self._calls: dict[str, LlmCall] = {}
        #: id(chunk) -> (chunk, call that saw it first): finds streams that re-yield another
        #: stream's chunks (CustomLLM.astream_complete iterates stream_complete lazily, after
        #: its span closed, so span ancestry cannot tell the inner stream is nested)
        self._chunk_owner: dict[int, tuple[Any, LlmCall]] = {}

    def entered(self, info: SpanInfo) -> None:
        """An LLM span opened inside another span: directly inside a call of the same LLM
        being recorded, its events are known to record nothing (the outer call is it)."""
        outer = self._calls.get(info.parent) if info.parent is not None else None
        if outer is not None and outer.instance is info.instance:
            info.inner = True

    def start(self, span_id: str | None, mode: str, payload: Any, kwargs: dict[str, Any]
              ) -> None:
        info = self._tree.get(span_id)
        if span_id is None or info is None or info.owner != "llm" or info.inner:
            return  # outside an LLM span (nothing to attribute it to), or inside its call
        instance = info.instance
        if is_wrapper_llm(instance):
            # A wrapper (`as_structured_llm`) only formats what its inner LLM answers: record
            # the inner call alone, the one that reaches a model. Recording both would hold
            # the same answer twice, and a replay that puts `ReplayLLM` in for the inner model
            # (the wrapper runs again as local code) would leave the wrapper's step unused.
            with self._lock:
                self._calls[span_id] = LlmCall(skip=True, instance=instance)
            return
        if self._calls and self._inside_call_of(instance, info.parent, span_id):
            # the same LLM called itself (CustomLLM.chat -> complete): the outer call is the
            # one recorded
            with self._lock:
                self._calls[span_id] = LlmCall(skip=True, instance=instance)
            return
        call = new_call(instance, mode, payload, kwargs, info.path,
                        stream="stream" in info.method)
        with self._lock:
            self._calls[span_id] = call

    def _inside_call_of(self, instance: Any, parent: str | None, span_id: str) -> bool:
        """Whether an open call of `instance` encloses the span (its parent, most often)."""
        outer = self._calls.get(parent) if parent is not None else None
        if outer is not None and outer.instance is instance:
            return True
        ancestors = self._tree.ancestor_ids(span_id)
        with self._lock:
            return any(c.instance is instance for c in map(self._calls.get, ancestors)
                       if c is not None)

    def chunk(self, span_id: str | None, response: Any) -> None:
        call = self._calls.get(span_id) if span_id else None
        if call is None or call.skip:
            return
        call.stream = True
        with self._lock:
            seen = self._chunk_owner.get(id(response))
            if seen is not None and seen[0] is response and seen[1] is not call \
                    and seen[1].instance is call.instance:
                seen[1].skip = True  # the inner stream: the outer one is what the host called
            self._chunk_owner[id(response)] = (response, call)
        call.chunks.append(chunk_item(call, response))

    def end(self, span_id: str | None, response: Any) -> None:
        call = self._pop(span_id)
        if call is None:
            return
        write_call(self._recorder, call, response=response)

    def failed(self, span_id: str | None, err: BaseException, *, streaming: bool) -> None:
        """The call raised, or (`streaming`) its stream did or the host closed it early.

        A stream's error is stored after its chunks, so replay raises it while the host
        iterates, where the host met it; an error of the call itself is the step's error.
        """
        call = self._pop(span_id)
        if call is None:
            return
        if isinstance(err, GeneratorExit):
            write_call(self._recorder, call, response=None, abandoned=True)
        elif streaming:
            call.stream = True
            write_call(self._recorder, call, response=None, error=error_to_record(err))
        else:
            write_error(self._recorder, call, err)

    def is_open(self, span_id: str) -> bool:
        return span_id in self._calls

    def close(self) -> None:
        """Streams still open when recording stops were abandoned by the host."""
        with self._lock:
            calls = list(self._calls.items())
            self._calls.clear()
            self._chunk_owner.clear()
        for _, call in calls:
            if not call.skip and call.stream:
                write_call(self._recorder, call, response=None, abandoned=True)

    def _pop(self, span_id: str | None) -> LlmCall | None:
        with self._lock:
            call = self._calls.pop(span_id, None) if span_id else None
            if call is not None and call.stream:
                for key in [k for k, (_, c) in self._chunk_owner.items() if c is call]:
                    del self._chunk_owner[key]
        return None if call is None or call.skip else call


def new_call(instance: Any, mode: str, payload: Any, kwargs: dict[str, Any], path: str, *,
             name: str | None = None, stream: bool = False) -> LlmCall:
    """The record of a call `instance` is making; `name` overrides the model's own name."""
    metadata = llm_metadata(instance)
    return LlmCall(skip=False, mode=mode, name=name or _name_of(metadata, instance),
                   request=llm_view(mode, payload, kwargs), kwargs=llm_kwargs(kwargs),
                   metadata=metadata, path=path, instance=instance, stream=stream)


def chunk_item(call: LlmCall, response: Any) -> dict[str, Any]:
    """One streamed chunk as stored: the response and the tool calls read from it."""
    # a snapshot: the chunks are stored when the stream ends, and streaming integrations
    # may reuse and mutate the message object meanwhile
    stored = response_json(response, snapshot=True)
    item: dict[str, Any] = {"response": compacted(stored, call.texts)}
    call.texts = texts_of(stored)
    if call.mode == "chat":
        item["tool_calls"] = _tool_calls(call.instance, response)
    return item


def _ms(call: LlmCall) -> float:
    return (time.perf_counter() - call.t0) * 1000


def write_call(recorder: Recorder, call: LlmCall, *, response: Any, abandoned: bool = False,
               error: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record a finished call (or stream); returns the stored output.

    No match key is passed: the recorder derives it from the stored request, which is the
    call's match view (`llm_view`), from the canonical bytes it makes anyway.
    """
    output: dict[str, Any] = {
        "response": response_json(response),
        "request_kwargs": call.kwargs, "metadata": call.metadata}
    if call.mode == "chat":
        add_tool_calls(output, call.instance, response)
    if call.stream:
        chunks = call.chunks if recorder.redactor is None \
            else redacted_stream(call.chunks, recorder.redactor.redact_pieces)
        chunks = compacted_growth(chunks)  # after redaction: what a chunk adds is redacted
        output.update(stream=True, chunks=chunks, abandoned=abandoned, error=error)
    recorder.record("llm", call.name, call.request, output, path=call.path,
                    started_at=call.started, duration_ms=_ms(call))
    return output


def write_error(recorder: Recorder, call: LlmCall, err: BaseException) -> None:
    """Record a call that raised before answering (not a stream that failed midway)."""
    error = {**error_to_record(err), "request_kwargs": call.kwargs, "metadata": call.metadata}
    recorder.record("llm", call.name, call.request, error, is_error=True, path=call.path,
                    started_at=call.started, duration_ms=_ms(call))
