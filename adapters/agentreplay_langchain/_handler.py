"""RecordingCallbackHandler: records what a LangChain agent's models, tools and retrievers
returned, from the callbacks LangChain already fires."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar, cast
from uuid import UUID

from agentreplay_core import Recorder
from agentreplay_core._key_order import keep_key_order
from agentreplay_core._keys import current_path, is_inside
from agentreplay_core._recorded_errors import error_to_record
from agentreplay_langchain._chunk_secrets import redacted_chunks
from agentreplay_langchain._convert import (
    EVENTS,
    EVENTS_ORDER,
    LLM_OUTPUT_ORDER,
    dump,
    retriever_output,
    storable,
    tool_output,
)
from agentreplay_langchain._custom_events import CUSTOM_EVENTS, event_entry
from agentreplay_langchain._decisions import (
    DECISION,
    DECISION_MODEL,
    decision_output,
    is_decision_run,
    request_of,
)
from agentreplay_langchain._interrupts import resume_answers, tool_error_record
from agentreplay_langchain._requests import (
    chat_request,
    llm_request,
    retriever_request,
    tool_request,
)
from agentreplay_langchain._store_writes import noted as store_writes
from agentreplay_langchain._store_writes import watch as watch_store
from agentreplay_langchain._stream_writes import install as install_stream_noting
from agentreplay_langchain._stream_writes import noted as stream_noted
from agentreplay_langchain._stream_writes import store_writes_into
from agentreplay_langchain._stream_writes import watch as watch_stream
from agentreplay_langchain._tree import RunTreeTracker

log = logging.getLogger("agentreplay")
F = TypeVar("F", bound=Callable[..., None])

#: the calls whose steps keep the custom events dispatched while they run
_DISPATCHERS = ("tool", "retriever")

#: step names of model calls; the replay models use the same ones whatever the original class
CHAT_MODEL = "chat_model"
TEXT_LLM = "llm"


class _Call:
    """A model, tool or retriever call between its start and end callbacks."""

    __slots__ = ("chunks", "events", "extra", "kind", "name", "path", "request", "started",
                 "t0")

    def __init__(self, kind: str, name: str, request: Any, path: str,
                 extra: dict[str, Any] | None = None) -> None:
        self.kind = kind
        self.name = name
        self.request = request
        self.path = path
        self.extra = extra if extra is not None else {}
        self.started = datetime.now(timezone.utc)
        self.t0 = time.perf_counter()
        self.chunks: list[Any] | None = None
        self.events: list[Any] | None = None


def _guarded(method: F) -> F:
    """Recording never raises into the agent: a failure is logged and counted."""
    @functools.wraps(method)
    def wrapper(self: RecordingCallbackHandler, *args: Any, **kwargs: Any) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception:
            self.recorder.stats.internal_errors += 1
            log.exception("agentreplay: run %s: recording callback %s failed",
                          self.recorder.run_id, method.__name__)
            run_id = kwargs.get("run_id")
            if run_id is not None and method.__name__.endswith(("_end", "_error")):
                # the run ended all the same: it must not stay the current path
                self._leave(run_id)
                self._take(run_id)
    return cast(F, wrapper)


def _with_effects(stored: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """A tool's stored output or error record, with the custom events it dispatched and what
    it wrote to LangGraph's stream, if anything (the noting of the writes stops here)."""
    if CUSTOM_EVENTS in extra:
        stored[CUSTOM_EVENTS] = extra[CUSTOM_EVENTS]
    token = extra.get("stream")
    writes = stream_noted(token) if token is not None else None
    return store_writes_into(stored, writes) if writes else stored


class RecordingCallbackHandler(RunTreeTracker):
    """Records model, tool and retriever calls of any chain, agent or LangGraph graph.

    Add it with `config={"callbacks": [RecordingCallbackHandler(recorder)]}` or attach it to
    everything with `instrument(recorder)`. Values are serialised when the event fires (LangChain
    mutates some objects later) and handed to the recorder, which does no I/O in the caller.
    """

    raise_error = False

    def __init__(self, recorder: Recorder, *, root_path: str = "") -> None:
        super().__init__(root_path=root_path)
        self.recorder = recorder
        install_stream_noting()
        self._lock = threading.Lock()
        self._calls: dict[UUID, _Call] = {}

    def _record_unfinished(self) -> None:
        """At the end of the run, the calls LangChain never ended: a model call that streamed
        as abandoned, with what it streamed (a `stream_events(version="v3")` stream its
        consumer stopped reading fires neither `on_llm_end` nor `on_llm_error`, where
        `stream()` reports it); one that gave nothing yet, a tool, retriever or decision call
        as cancelled (`asyncio.wait_for(model.ainvoke(...))` timing out reports nothing:
        `agenerate` is cancelled in its `gather`; langchain-core 0.3 and 1.0 report no
        cancelled tool), so that its replay never returns either and the caller's timeout
        fires again. The replay serves it before a retry of the same request recorded
        earlier, as it started first."""
        with self._lock:
            unfinished = [(run_id, call.kind, call.chunks is None and call.events is None)
                          for run_id, call in self._calls.items()]
        for run_id, kind, nothing_yet in unfinished:
            if kind == "llm":
                self.on_llm_error(asyncio.CancelledError() if nothing_yet else GeneratorExit(),
                                  run_id=run_id)
            elif kind == "tool":
                self.on_tool_error(asyncio.CancelledError(), run_id=run_id)
            else:
                self._finish(run_id, error_to_record(asyncio.CancelledError()), is_error=True)

    def _begin(self, run_id: UUID, call: _Call) -> None:
        with self._lock:
            if not self._calls:  # the run holds this handler while it has a call open
                self.recorder.before_seal(self._record_unfinished)
            self._calls[run_id] = call

    def _take(self, run_id: UUID) -> _Call | None:
        with self._lock:
            call = self._calls.pop(run_id, None)
            if call is not None and not self._calls:
                self.recorder.forget_before_seal(self._record_unfinished)
            return call

    def _finish(self, run_id: UUID, output: Any, *, is_error: bool = False) -> None:
        self._leave(run_id)
        call = self._take(run_id)
        if call is None:
            return
        self.recorder.record(
            call.kind, call.name, call.request, output, is_error=is_error, path=call.path,
            started_at=call.started, duration_ms=(time.perf_counter() - call.t0) * 1000)

    # -- models ----------------------------------------------------------------------------

    def _model_info(self, serialized: dict[str, Any] | None, kwargs: dict[str, Any],
                    metadata: dict[str, Any] | None) -> dict[str, Any]:
        """The model's class, provider, name and call parameters. Of `serialized` (the model's
        whole constructor payload, which can hold an API key in plaintext) only the class path
        is kept; credentials among the parameters (some integrations list theirs there) are
        replaced by the store's redaction, like any secret in a recorded value."""
        params = {key: value for key, value in (kwargs.get("invocation_params") or {}).items()
                  if key != "tools"}  # the tools are in the request already
        meta = metadata or {}
        ident = (serialized or {}).get("id")
        info: dict[str, Any] = {
            "class": ".".join(ident) if isinstance(ident, list) else None,
            "ls_provider": meta.get("ls_provider"),
            "ls_model_name": meta.get("ls_model_name"),
            "invocation_params": params,
            "options": kwargs.get("options") or {},
        }
        kept: object = storable(info)
        if kept is not info:
            # one parameter the store cannot take (a client object) is kept as its repr, not
            # the whole description
            info["invocation_params"] = {key: storable(value) for key, value in params.items()}
            options = info["options"]
            info["options"] = {key: storable(value) for key, value in options.items()} \
                if isinstance(options, dict) else options
            info = {key: storable(value) for key, value in info.items()}
        return info

    @_guarded
    def on_chat_model_start(self, serialized: dict[str, Any], messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, tags: list[str] | None = None,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        path = self._enter("chat_model", serialized, run_id, parent_run_id, tags, kwargs)
        params = kwargs.get("invocation_params") or {}
        request = chat_request(messages[0], params.get("tools"), params.get("stop"))
        self._begin(run_id, _Call("llm", CHAT_MODEL, request, path, extra={
            "model": self._model_info(serialized, kwargs, metadata)}))

    @_guarded
    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID,
                     parent_run_id: UUID | None = None, tags: list[str] | None = None,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        path = self._enter("llm", serialized, run_id, parent_run_id, tags, kwargs)
        params = kwargs.get("invocation_params") or {}
        self._begin(run_id, _Call("llm", TEXT_LLM, llm_request(prompts[0], params.get("stop")),
                                  path, extra={"model": self._model_info(serialized, kwargs,
                                                                         metadata)}))

    @_guarded
    def on_llm_new_token(self, token: Any, *, chunk: Any = None, run_id: UUID,
                         parent_run_id: UUID | None = None, tags: list[str] | None = None,
                         **kwargs: Any) -> None:
        with self._lock:
            call = self._calls.get(run_id)
            if call is not None:
                if call.chunks is None:
                    call.chunks = []
                call.chunks.append(dump(chunk) if chunk is not None else {"token": token})

    @_guarded
    def on_stream_event(self, event: Any, *, run_id: UUID, **kwargs: Any) -> None:
        # langchain-core 1.8's protocol events (`stream_events(version="v3")`, LangGraph's v3
        # stream): a model whose `_stream` leaves the token callbacks to `stream()` fires no
        # token here, and a model that makes events natively has no chunks at all
        with self._lock:
            call = self._calls.get(run_id)
            if call is not None:
                if call.events is None:
                    call.events = []
                call.events.append(dump(event))

    def _model_output(self, run_id: UUID) -> dict[str, Any]:
        with self._lock:
            call = self._calls.get(run_id)
            if call is None:
                return {}
            output: dict[str, Any] = {"model": call.extra.get("model")}
            if call.chunks is not None:
                output["chunks"] = call.chunks
            if call.events is not None:
                output[EVENTS] = call.events
                # a UI that prints them shows their keys in the model's order
                keep_key_order(output, EVENTS_ORDER, call.events)
        redactor = self.recorder.redactor
        if redactor is not None:
            # (outside the lock: one scan of each text of the stream)
            for key in ("chunks", EVENTS):
                if key in output:
                    output[key] = redacted_chunks(output[key], redactor)
        return output

    @_guarded
    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        output = self._model_output(run_id)
        generations = response.generations[0] if response.generations else []
        output["generations"] = [dump(g) for g in generations]
        output["llm_output"] = storable(response.llm_output)
        # LangChain merges it into the message's response_metadata, in its order
        keep_key_order(output, LLM_OUTPUT_ORDER, output["llm_output"])
        self._finish(run_id, output)

    @_guarded
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        output = self._model_output(run_id)
        output["error"] = error_to_record(error)
        # a consumer that stops reading a stream closes it: LangChain reports GeneratorExit
        output["abandoned"] = isinstance(error, GeneratorExit)
        self._finish(run_id, output, is_error=True)

    # -- decision models (a chain run of run_type "llm") ------------------------------------

    @_guarded
    def on_chain_start(self, serialized: dict[str, Any], inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: list[str] | None = None,
                       **kwargs: Any) -> None:
        if not is_decision_run(kwargs):
            self._enter("chain", serialized, run_id, parent_run_id, tags, kwargs)
            return
        path = self._enter(DECISION_MODEL, serialized, run_id, parent_run_id, tags, kwargs)
        meta = kwargs.get("metadata") or {}
        model = {"ls_provider": meta.get("ls_provider"), "ls_model_name": meta.get("ls_model_name")}
        self._begin(run_id, _Call(DECISION, DECISION_MODEL, request_of(inputs), path,
                                  extra={"model": storable(model)}))

    @_guarded
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._calls.get(run_id)  # only decision runs among the chains
        if call is None:
            self._leave(run_id)
        else:
            self._finish(run_id, decision_output(outputs, call.extra.get("model")))

    @_guarded
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self._calls:
            self._finish(run_id, error_to_record(error), is_error=True)
        else:
            self._leave(run_id)

    # -- tools -----------------------------------------------------------------------------

    @_guarded
    def on_tool_start(self, serialized: dict[str, Any], input_str: str, *, run_id: UUID,
                      parent_run_id: UUID | None = None, tags: list[str] | None = None,
                      inputs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        path = self._enter("tool", serialized, run_id, parent_run_id, tags, kwargs)
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        request = tool_request(inputs if inputs is not None else input_str, resume_answers())
        # (this callback runs inline, in the context the tool then runs in a copy of)
        self._begin(run_id, _Call("tool", name, request, path, extra={
            "tool_call_id": kwargs.get("tool_call_id"), "store": watch_store(inputs),
            "stream": watch_stream()}))

    def _extra(self, run_id: UUID) -> dict[str, Any]:
        """What a tool or retriever call noted beside its request while it ran."""
        with self._lock:
            call = self._calls.get(run_id)
            return call.extra if call else {}

    @_guarded
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        extra = self._extra(run_id)
        call_id = extra.get("tool_call_id") or getattr(output, "tool_call_id", None)
        token = extra.get("store")
        writes = store_writes(token) if token is not None else None
        self._finish(run_id, _with_effects(tool_output(output, call_id, writes), extra))

    @_guarded
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        extra = self._extra(run_id)
        token = extra.get("store")
        if token is not None:
            store_writes(token)  # stop noting: an error is recorded without them
        # with what it reported before it failed
        self._finish(run_id, _with_effects(tool_error_record(error), extra), is_error=True)

    @_guarded
    def on_custom_event(self, name: Any, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        # `dispatch_custom_event` inside a tool or retriever: `run_id` is its run, a run
        # inside it, or, given the config it was called with, the run around it; this callback
        # runs inline, where the core's current path is the call's (or one inside it). Every
        # such call keeps the event: a replay serves the outermost one whole (its stand-in
        # dispatches the events of the calls inside it), or runs it and serves an inner one.
        where = current_path()
        with self._lock:
            holders = {id(c): c for c in self._calls.values() if c.kind in _DISPATCHERS and (
                where == c.path or is_inside(where, c.path))}
            direct = self._calls.get(run_id)
            if direct is not None and direct.kind in _DISPATCHERS:
                holders[id(direct)] = direct
            if holders:
                entry = event_entry(str(name), data)
                for call in holders.values():
                    call.extra.setdefault(CUSTOM_EVENTS, []).append(entry)

    # -- retrievers ------------------------------------------------------------------------

    @_guarded
    def on_retriever_start(self, serialized: dict[str, Any], query: str, *, run_id: UUID,
                           parent_run_id: UUID | None = None, tags: list[str] | None = None,
                           **kwargs: Any) -> None:
        path = self._enter("retriever", serialized, run_id, parent_run_id, tags, kwargs)
        self._begin(run_id, _Call("retriever", "retriever", retriever_request(query), path,
                                  extra={"stream": watch_stream()}))

    @_guarded
    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        effects = _with_effects({}, self._extra(run_id))
        self._finish(run_id, retriever_output([dump(d) for d in documents], effects))

    @_guarded
    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        stored = _with_effects(error_to_record(error), self._extra(run_id))
        self._finish(run_id, stored, is_error=True)
