"""`ReplayLLM`: a function-calling LLM that serves the recorded responses of a run."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM
from llama_index.core.tools import ToolSelection
from pydantic import Field, PrivateAttr

from agentreplay_core import Player, Recorder, ReplayDivergence, Step
from agentreplay_core._divergence import abandoned_stream
from agentreplay_core._recorded_errors import error_from_record
from agentreplay_llamaindex._chunk_growth import expanded_growth
from agentreplay_llamaindex._chunk_texts import expanded, texts_of
from agentreplay_llamaindex._convert import (
    METADATA_FIELDS,
    llm_match_key,
    llm_metadata,
    llm_request,
    llm_view,
    recorded_tool_calls,
)
from agentreplay_llamaindex._live_llm import TOOL_OPTIONS, LiveLLM, Reading, tool_options
from agentreplay_llamaindex._llm_calls import TOOL_CALLS_REQUIRED
from agentreplay_llamaindex._recorded import (
    has_legacy_llm_steps,
    recorded_llm_steps,
    recorded_name,
    step_llm_metadata,
)
from agentreplay_llamaindex._responses import response_from_json
from agentreplay_llamaindex._tracking import live_path, replay_path

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool

#: responses remembered for `get_tool_calls_from_response` (agents ask right after the call)
_REMEMBERED = 256
#: a recorded step and its output (decoded), as served to one call
Served = tuple[Step, dict[str, Any]]


def _reading(out: dict[str, Any], calls: Any) -> Reading:
    """What `get_tool_calls_from_response` serves for a response whose recorded tool calls
    are `calls`, from the output of its step."""
    reading: Reading = {"tool_calls": calls}
    if calls == [] and TOOL_CALLS_REQUIRED in out:
        # stored once per step (for its final response): the integration answers a chunk
        # without tool calls as it answered the final response without them
        reading[TOOL_CALLS_REQUIRED] = out[TOOL_CALLS_REQUIRED]
    return reading


def _recorded_chunks(out: dict[str, Any]) -> list[tuple[Any, Reading]]:
    """A recorded stream's responses, each with its tool calls; a chunk stored with what it
    adds to the one before it gets its whole texts back."""
    chunks: list[dict[str, Any]] = out.get("chunks") or []
    served: list[tuple[Any, Reading]] = []
    previous: list[str | None] = []
    before: dict[str, Any] | None = None
    for chunk in chunks:
        whole = expanded_growth(chunk, before)
        stored = expanded(whole["response"], previous)
        previous = texts_of(stored)
        before = {**whole, "response": stored}
        served.append((response_from_json(stored), _reading(out, whole.get("tool_calls"))))
    return served


def _plain_metadata(metadata: LLMMetadata | Mapping[str, Any]) -> dict[str, Any]:
    """Settings to choose recorded steps by, as the recording stores them."""
    if isinstance(metadata, LLMMetadata):
        items = {k: getattr(metadata, k, None) for k in METADATA_FIELDS}
    else:
        items = dict(metadata)
        unknown = sorted(set(items) - set(METADATA_FIELDS))
        if unknown:
            raise ValueError(f"ReplayLLM(metadata=...) got {', '.join(unknown)}; the recorded "
                             f"settings are {', '.join(METADATA_FIELDS)}")
    return {k: v.value if isinstance(v, Enum) else v for k, v in items.items() if v is not None}


def _fits(recorded: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(recorded.get(k) == v for k, v in wanted.items())


def _distinct(metas: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for meta in metas:
        if meta not in out:
            out.append(meta)
    return out


def _shown(meta: dict[str, Any], fields: Sequence[str]) -> str:
    return ", ".join(f"{k}={meta.get(k)!r}" for k in fields)


def _differing(metas: Sequence[dict[str, Any]]) -> list[str]:
    """The fields whose values differ among `metas`."""
    return [k for k in METADATA_FIELDS if len({repr(m.get(k)) for m in metas}) > 1]


class ReplayLLM(FunctionCallingLLM):
    """Serves a recorded run's LLM responses, never calling a model.

    A `FunctionCallingLLM` (a `CustomLLM` would flatten chat into completion and lose tool
    calls) with the recorded metadata, which decides chat vs completion and how many calls a
    RAG query makes. A call the recording does not hold raises `ReplayDivergence`, unless
    the replay was opened with `on_divergence="live"` and a `live` LLM is given: then that
    call and every later one go to the live LLM and are recorded into the forked run.

    Args:
        player: the `Player` of `store.replay(run_id)`.
        name: the recorded model name; needed only when the run used several LLMs.
        live: the real LLM to continue with after a divergence (fork and continue).
        metadata: which settings of the model this stands for (the live model's `metadata`,
            or a dict of the fields that tell them apart: `{"num_output": 1000}`), when the
            run recorded the model name with several (two query engines over one model name
            with different `max_tokens`). Without it, `live`'s metadata chooses if it was
            recorded, else `metadata` is that of the earliest recorded step of the name not
            served yet, which is right when the program builds each component that reads it
            just before using it.
    """

    recorded_name: str = Field(description="The recorded model name this LLM replays.")
    _player: Player = PrivateAttr()
    _meta: dict[str, Any] = PrivateAttr()
    #: this stand-in's steps with their settings, when those differ (else empty: `_meta`)
    _settings: list[tuple[Step, dict[str, Any]]] = PrivateAttr()
    _next_setting: int = PrivateAttr()
    #: every setting the name was recorded with, and those this stand-in reported
    _recorded_settings: list[dict[str, Any]] = PrivateAttr()
    _reported: list[dict[str, Any]] = PrivateAttr()
    _served: list[tuple[Any, Reading]] = PrivateAttr()
    _window: int = PrivateAttr()
    _live: LiveLLM | None = PrivateAttr()
    _legacy: bool = PrivateAttr()

    def __init__(self, player: Player, *, name: str | None = None, live: LLM | None = None,
                 metadata: LLMMetadata | Mapping[str, Any] | None = None, **kwargs: Any
                 ) -> None:
        resolved = recorded_name(player, "llm", name)
        super().__init__(recorded_name=resolved, **kwargs)
        self._player = player
        steps = recorded_llm_steps(player, resolved)
        self._recorded_settings = _distinct([m for _, m in steps])
        steps = self._chosen(steps, metadata, live)
        settings = _distinct([m for _, m in steps])
        self._meta = settings[0] if settings else {
            "model_name": resolved, **(_plain_metadata(metadata) if metadata else {})}
        self._settings = steps if len(settings) > 1 else []
        self._next_setting = 0
        self._reported = []
        self._legacy = has_legacy_llm_steps(player, resolved)
        self._served = []
        #: how many served responses are remembered: all of the longest stream's chunks (a
        #: program may ask for the tool calls of each after the stream ended)
        self._window = _REMEMBERED
        self._live = None if live is None else LiveLLM(live, resolved, self._remember)

    @classmethod
    def class_name(cls) -> str:
        return "ReplayLLM"

    def _chosen(self, steps: list[tuple[Step, dict[str, Any]]],
                metadata: LLMMetadata | Mapping[str, Any] | None, live: LLM | None
                ) -> list[tuple[Step, dict[str, Any]]]:
        """The recorded steps whose settings this stand-in serves."""
        if metadata is not None:
            wanted = _plain_metadata(metadata)
            chosen = [(s, m) for s, m in steps if _fits(m, wanted)]
            if steps and not chosen:
                raise ValueError(
                    f"run {self._player.run_id} recorded LLM {self.recorded_name!r} with "
                    f"{self._settings_listed()}; none has {_shown(wanted, list(wanted))}")
            return chosen
        if live is not None:
            # the model the run was recorded with, most often; a different one chooses nothing
            wanted = _plain_metadata(llm_metadata(live))
            chosen = [(s, m) for s, m in steps if _fits(m, wanted)]
            if chosen:
                return chosen
        return steps

    def _settings_listed(self) -> str:
        recorded = self._recorded_settings
        fields = _differing(recorded) or list(METADATA_FIELDS)
        return " / ".join(f"({_shown(m, fields)})" for m in recorded)

    def _current(self) -> dict[str, Any]:
        """The recorded settings of the step this stand-in serves next."""
        settings = self._settings
        if not settings:
            return self._meta
        i = self._next_setting
        is_consumed = self._player.is_consumed
        while i < len(settings) - 1 and is_consumed(settings[i][0]):
            i += 1
        self._next_setting = i
        return settings[i][1]

    def _explain(self, diverged: ReplayDivergence) -> None:
        """Say so when the recorded step nearest to a diverging call was made with other
        settings than this stand-in reported: the program built the call from them (packed
        its prompt for another context window or output size), so the prompt differs although
        the program did not change."""
        if diverged.kind != "llm" or diverged.name != self.recorded_name \
                or diverged.step is None:
            return
        recorded = next((s for s in self._player.steps if s.step == diverged.step), None)
        meta = step_llm_metadata(recorded) if recorded is not None else None
        reported = [m for m in self._reported if m != meta]
        if meta is None or not reported:
            return
        fields = _differing([meta, *reported])
        detail = (f"the model's settings differ: step {diverged.step} was recorded with "
                  f"{_shown(meta, fields)}, this ReplayLLM reported "
                  f"{' and '.join(_shown(m, fields) for m in reported)}, and a program builds "
                  "its calls from them (a prompt packed for another output size)")
        if len(self._recorded_settings) > 1:
            detail += (f"; run {self._player.run_id} recorded {self.recorded_name!r} with "
                       f"{self._settings_listed()}: pass ReplayLLM(player, metadata=...) "
                       "(the live model's metadata, or the fields that tell them apart) to "
                       "say which one this stand-in is")
        diverged.classification = "params_changed"
        diverged.detail = detail + (f"\n{diverged.detail}" if diverged.detail else "")
        diverged.args = (diverged._message(),)

    @property
    def metadata(self) -> LLMMetadata:
        meta = self._current()
        if meta not in self._reported:
            self._reported.append(meta)
        known = {k: v for k, v in meta.items() if k in LLMMetadata.model_fields}
        if "system_role" in known:
            known["system_role"] = MessageRole(known["system_role"])
        return LLMMetadata(**known)

    # -- taking recorded steps ------------------------------------------------------------

    def _asks(self, mode: str, payload: Any, kwargs: dict[str, Any]
              ) -> list[tuple[Any, str | None]]:
        """(request, match key) to ask the player for, in order; a divergence names the last.

        The request is the call's match view, keyed by the player as the recorder keyed it.
        A run recorded before that view (or forked from one) is asked again with the old
        request and key: they give the same key unless the request held secrets (the old key
        was then keyed with the redaction key).
        """
        view = llm_view(mode, payload, kwargs)
        if not self._legacy:
            return [(view, None)]
        legacy = llm_request(mode, payload, kwargs, self._current())
        return [(view, None),
                (legacy, llm_match_key(self.recorded_name, legacy, self._player.redactor))]

    def _take(self, mode: str, payload: Any, kwargs: dict[str, Any]) -> Served | Recorder:
        """The recorded step and output, or the forked run's recorder when this call goes
        live. The step, not only its output: an error about it names it."""
        asks = self._asks(mode, payload, kwargs)
        player = self._player
        if self._live is not None and player.fork is not None:
            return player.fork  # after the first divergence every call goes live
        for request, key in asks[:-1]:
            with contextlib.suppress(ReplayDivergence):
                step = player.next_step("llm", self.recorded_name, request, match_key=key,
                                        path=replay_path(), tentative=True)
                return step, player.result_of(step)
        request, key = asks[-1]
        try:
            step = player.next_step("llm", self.recorded_name, request, match_key=key,
                                    path=replay_path())
        except ReplayDivergence as diverged:
            self._explain(diverged)
            if self._live is None:
                raise
            return player.go_live(diverged)  # raises it unless on_divergence="live"
        return step, player.result_of(step)

    async def _atake(self, mode: str, payload: Any, kwargs: dict[str, Any]
                     ) -> Served | Recorder:
        asks = self._asks(mode, payload, kwargs)
        player = self._player
        if self._live is not None and player.fork is not None:
            return player.fork
        for request, key in asks[:-1]:
            with contextlib.suppress(ReplayDivergence):
                step = player.next_step("llm", self.recorded_name, request, match_key=key,
                                        path=replay_path(), tentative=True)
                return step, await player.aresult_of(step)
        request, key = asks[-1]
        try:
            step = player.next_step("llm", self.recorded_name, request, match_key=key,
                                    path=replay_path())
        except ReplayDivergence as diverged:
            self._explain(diverged)
            if self._live is None:
                raise
            return player.go_live(diverged)
        return step, await player.aresult_of(step)

    def _serve(self, method: str, mode: str, payload: Any, kwargs: dict[str, Any],
               *positional: Any) -> Any:
        """The recorded response (or stream) for this call, or the live LLM's."""
        served = self._take(mode, payload, kwargs)
        if isinstance(served, Recorder):
            assert self._live is not None
            return self._live.call(served, method, mode, payload, kwargs,
                                   live_path("llm", self.recorded_name), *positional)
        return self._stream(*served) if method.startswith("stream") else self._final(*served)

    async def _aserve(self, method: str, mode: str, payload: Any, kwargs: dict[str, Any],
                      *positional: Any) -> Any:
        served = await self._atake(mode, payload, kwargs)
        if isinstance(served, Recorder):
            assert self._live is not None
            return await self._live.acall(served, method, mode, payload, kwargs,
                                          live_path("llm", self.recorded_name), *positional)
        return self._astream(*served) if method.startswith("astream") \
            else self._final(*served)

    def _remember(self, response: Any, reading: Reading) -> None:
        self._served.append((response, reading))
        del self._served[:-self._window]

    def _chunks(self, out: dict[str, Any]) -> list[tuple[Any, Reading]]:
        """The responses to yield: the recorded chunks, or the whole response as one chunk."""
        if out.get("stream"):
            return _recorded_chunks(out)
        response = response_from_json(out["response"])
        if getattr(response, "delta", None) is None:
            text = response.message.content if isinstance(response, ChatResponse) \
                else response.text
            response.delta = text or ""
        return [(response, _reading(out, out.get("tool_calls")))]

    def _final(self, step: Step, out: dict[str, Any]) -> Any:
        """The one response a non-streaming call returns (a recorded stream's last chunk)."""
        if out.get("error"):
            raise error_from_record(out["error"])
        if out.get("abandoned"):  # the whole response was never received
            raise abandoned_stream(step)
        response = response_from_json(out.get("response"))
        reading = _reading(out, out.get("tool_calls"))
        if response is None and out.get("chunks"):
            response, reading = _recorded_chunks(out)[-1]
        self._remember(response, reading)
        return response

    def _stream(self, step: Step, out: dict[str, Any]) -> Generator[Any, None, None]:
        chunks = self._chunks(out)
        self._window = max(self._window, len(chunks))
        for response, reading in chunks:
            self._remember(response, reading)
            yield response
        if out.get("error"):  # the recorded stream failed after these chunks
            raise error_from_record(out["error"])
        if out.get("abandoned"):
            # The recording stopped reading here; a live model would have gone on. Ending
            # the stream would hand the program a shorter answer than any model gave. (A
            # replay that stops reading here too never asks: the generator is closed.)
            raise abandoned_stream(step, len(chunks))

    async def _astream(self, step: Step, out: dict[str, Any]) -> AsyncGenerator[Any, None]:
        for response in self._stream(step, out):
            yield response

    # -- chat -----------------------------------------------------------------------------

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        response: ChatResponse = self._serve("chat", "chat", messages, kwargs)
        return response

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        response: ChatResponse = await self._aserve("achat", "chat", messages, kwargs)
        return response

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        stream: ChatResponseGen = self._serve("stream_chat", "chat", messages, kwargs)
        return stream

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any
                           ) -> ChatResponseAsyncGen:
        # a coroutine returning an async generator, as LlamaIndex's own LLMs are
        stream: ChatResponseAsyncGen = await self._aserve("astream_chat", "chat", messages,
                                                          kwargs)
        return stream

    # -- completion -----------------------------------------------------------------------

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        response: CompletionResponse = self._serve("complete", "complete", prompt, kwargs,
                                                   formatted)
        return response

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponse:
        response: CompletionResponse = await self._aserve("acomplete", "complete", prompt,
                                                          kwargs, formatted)
        return response

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        stream: CompletionResponseGen = self._serve("stream_complete", "complete", prompt,
                                                     kwargs, formatted)
        return stream

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                               ) -> CompletionResponseAsyncGen:
        stream: CompletionResponseAsyncGen = await self._aserve(
            "astream_complete", "complete", prompt, kwargs, formatted)
        return stream

    # -- tools ----------------------------------------------------------------------------

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(user_msg if isinstance(user_msg, ChatMessage)
                            else ChatMessage(role=MessageRole.USER, content=user_msg))
        # the tools are matched by name; the live integration's JSON schemas are not rebuilt
        prepared = {"messages": messages, "tools": list(tools), **kwargs}
        if self._live is not None:  # for a live LLM to build its own schemas after a fork
            prepared[TOOL_OPTIONS] = tool_options(verbose, allow_parallel_tool_calls,
                                                  tool_required)
        return prepared

    def get_tool_calls_from_response(self, response: ChatResponse,
                                     error_on_no_tool_call: bool = True, **kwargs: Any
                                     ) -> list[ToolSelection]:
        """The tool calls the live LLM read from this recorded response, or what it did
        reading none with `error_on_no_tool_call=True` (raised, or went on)."""
        found: Reading = {}
        for served, reading in reversed(self._served):
            if served is response:
                found = reading
                break
        else:
            for served, reading in reversed(self._served):
                if isinstance(served, ChatResponse) and served.message == response.message:
                    found = reading
                    break
        selections = recorded_tool_calls(found.get("tool_calls"))
        if selections or not error_on_no_tool_call:
            return selections
        if TOOL_CALLS_REQUIRED in found:
            return recorded_tool_calls(found[TOOL_CALLS_REQUIRED])
        # recorded before the live model's own answer was: as those runs always replayed
        raise ValueError(f"Expected at least one tool call, but got {len(selections)} "
                         "tool calls (replayed from the recording).")
