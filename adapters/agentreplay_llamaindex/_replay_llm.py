"""`ReplayLLM`: a function-calling LLM that serves the recorded responses of a run."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Generator, Sequence
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
    llm_match_key,
    llm_request,
    llm_view,
    recorded_tool_calls,
)
from agentreplay_llamaindex._live_llm import TOOL_OPTIONS, LiveLLM, tool_options
from agentreplay_llamaindex._recorded import (
    has_legacy_llm_steps,
    recorded_llm_metadata,
    recorded_name,
)
from agentreplay_llamaindex._responses import response_from_json
from agentreplay_llamaindex._tracking import live_path, replay_path

if TYPE_CHECKING:
    from llama_index.core.tools.types import BaseTool

#: responses remembered for `get_tool_calls_from_response` (agents ask right after the call)
_REMEMBERED = 256
#: a recorded step and its output (decoded), as served to one call
Served = tuple[Step, dict[str, Any]]


def _recorded_chunks(chunks: list[dict[str, Any]]
                     ) -> list[tuple[Any, list[dict[str, Any]] | None]]:
    """A recorded stream's responses, each with its tool calls; a chunk stored with what it
    adds to the one before it gets its whole texts back."""
    served: list[tuple[Any, list[dict[str, Any]] | None]] = []
    previous: list[str | None] = []
    before: dict[str, Any] | None = None
    for chunk in chunks:
        whole = expanded_growth(chunk, before)
        stored = expanded(whole["response"], previous)
        previous = texts_of(stored)
        before = {**whole, "response": stored}
        served.append((response_from_json(stored), whole.get("tool_calls")))
    return served


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
    """

    recorded_name: str = Field(description="The recorded model name this LLM replays.")
    _player: Player = PrivateAttr()
    _meta: dict[str, Any] = PrivateAttr()
    _served: list[tuple[Any, list[dict[str, Any]] | None]] = PrivateAttr()
    _window: int = PrivateAttr()
    _live: LiveLLM | None = PrivateAttr()
    _legacy: bool = PrivateAttr()

    def __init__(self, player: Player, *, name: str | None = None, live: LLM | None = None,
                 **kwargs: Any) -> None:
        resolved = recorded_name(player, "llm", name)
        super().__init__(recorded_name=resolved, **kwargs)
        self._player = player
        self._meta = recorded_llm_metadata(player, resolved)
        self._legacy = has_legacy_llm_steps(player, resolved)
        self._served = []
        #: how many served responses are remembered: all of the longest stream's chunks (a
        #: program may ask for the tool calls of each after the stream ended)
        self._window = _REMEMBERED
        self._live = None if live is None else LiveLLM(live, resolved, self._remember)

    @classmethod
    def class_name(cls) -> str:
        return "ReplayLLM"

    @property
    def metadata(self) -> LLMMetadata:
        known = {k: v for k, v in self._meta.items() if k in LLMMetadata.model_fields}
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
        legacy = llm_request(mode, payload, kwargs, self._meta)
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

    def _remember(self, response: Any, tool_calls: list[dict[str, Any]] | None) -> None:
        self._served.append((response, tool_calls))
        del self._served[:-self._window]

    def _chunks(self, out: dict[str, Any]) -> list[tuple[Any, list[dict[str, Any]] | None]]:
        """The responses to yield: the recorded chunks, or the whole response as one chunk."""
        if out.get("stream"):
            return _recorded_chunks(out.get("chunks") or [])
        response = response_from_json(out["response"])
        if getattr(response, "delta", None) is None:
            text = response.message.content if isinstance(response, ChatResponse) \
                else response.text
            response.delta = text or ""
        return [(response, out.get("tool_calls"))]

    def _final(self, step: Step, out: dict[str, Any]) -> Any:
        """The one response a non-streaming call returns (a recorded stream's last chunk)."""
        if out.get("error"):
            raise error_from_record(out["error"])
        if out.get("abandoned"):  # the whole response was never received
            raise abandoned_stream(step)
        response, tool_calls = response_from_json(out.get("response")), out.get("tool_calls")
        if response is None and out.get("chunks"):
            response, tool_calls = _recorded_chunks(out["chunks"])[-1]
        self._remember(response, tool_calls)
        return response

    def _stream(self, step: Step, out: dict[str, Any]) -> Generator[Any, None, None]:
        chunks = self._chunks(out)
        self._window = max(self._window, len(chunks))
        for response, tool_calls in chunks:
            self._remember(response, tool_calls)
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
        """The tool calls the live LLM read from this recorded response."""
        found: Any = None
        for served, calls in reversed(self._served):
            if served is response:
                found = calls
                break
        else:
            for served, calls in reversed(self._served):
                if isinstance(served, ChatResponse) and served.message == response.message:
                    found = calls
                    break
        selections = recorded_tool_calls(found)
        if not selections and error_on_no_tool_call:
            raise ValueError(f"Expected at least one tool call, but got {len(selections)} "
                             "tool calls (replayed from the recording).")
        return selections
