"""ReplayChatModel: a real LangChain chat model that answers from a recorded run."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, cast
from uuid import UUID

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field

from agentreplay_core import Player, Step
from agentreplay_core._keys import current_path
from agentreplay_langchain._batch_index import with_tracker
from agentreplay_langchain._compat import format_for_tracing, keep_signatures
from agentreplay_langchain._construct import chat_result
from agentreplay_langchain._handler import CHAT_MODEL
from agentreplay_langchain._requests import chat_request
from agentreplay_langchain._served import (
    chat_chunks,
    chat_generations,
    error_of,
    live_call,
    protocol_events,
    served_or_live,
    wait_if_cancelled,
)
from agentreplay_langchain._structured import structured_output
from agentreplay_langchain._tree import tracked_path

RunManager = CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun


class ReplayChatModel(BaseChatModel):
    """Answers every call with the recorded response of the same call in a recorded run.

    It is a real `BaseChatModel`: invoke, batch, stream (re-emitting the recorded chunks, so
    token callbacks and LangGraph's `stream_mode="messages"` see the same tokens), `bind_tools`
    and `with_structured_output` work as with the recorded model, and the returned messages are
    fresh copies with the recorded ids, tool calls, usage and metadata. A call that streamed
    while recording fires the same token callbacks when it is invoked (as a model created with
    `streaming=True` does). A call the recording does not hold raises `ReplayDivergence`;
    nothing ever goes to the network, unless the replay was opened with
    `on_divergence="live"` and a `live` model is given: from the first divergent call on, that
    model answers and its answers are recorded into the forked run.

    Example:
        >>> model = ReplayChatModel(player=player)  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    player: Player = Field(exclude=True)
    #: a replay must never answer from LangChain's cache
    cache: bool | None = False
    #: the model that answers from the first divergence on (`on_divergence="live"` only)
    live: BaseChatModel | None = Field(default=None, exclude=True)
    #: the recorded model's name, for code that decides by it what to ask (`create_agent`
    #: takes provider-native structured output for models it knows by name); give it with the
    #: recorded model's `profile` where the agent's code inspects the model it is given
    model_name: str | None = None

    @classmethod
    def standing_in_for(cls, model: BaseChatModel, player: Player, *,
                        live: bool = False) -> ReplayChatModel:
        """The replay model for `model`: it shows code that inspects the model it is given
        what `model` shows, its profile and model name (`create_agent` picks how to ask for a
        `response_format` by them, provider-native or as a tool), so that the replay asks as
        the recording did, and its run name (callbacks and `astream_events` name the replay's
        model runs as the live ones); `live=True` makes `model` its live counterpart."""
        name = next((value for attr in ("model_name", "model", "model_id")
                     if isinstance(value := getattr(model, attr, None), str)), None)
        # the user cannot name a stand-in that a middleware builds: it takes the live name
        shown: dict[str, Any] = {"model_name": name, "name": model.get_name()}
        if "profile" in BaseChatModel.model_fields:  # langchain-core 1.x
            shown["profile"] = getattr(model, "profile", None)
        return cls(player=player, live=model if live else None, **shown)

    @property
    def _llm_type(self) -> str:
        return "agentreplay-replay"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"replayed_run_id": _run_label(self.player.run_id)}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        # Not built on the base class's version: it probes `model`, `model_name`,
        # `temperature` and `max_tokens` with hasattr, four pydantic attribute misses that
        # cost a replayed call ~10 us.
        model = kwargs.get("model")
        params = LangSmithParams(ls_provider="agentreplay", ls_model_type="chat",
                                 ls_model_name=model if isinstance(model, str) else "replay")
        if stop:
            params["ls_stop"] = stop
        temperature, max_tokens = kwargs.get("temperature"), kwargs.get("max_tokens")
        if isinstance(temperature, (int, float)):
            params["ls_temperature"] = temperature
        if isinstance(max_tokens, int):
            params["ls_max_tokens"] = max_tokens
        return params

    def _step(self, messages: list[BaseMessage], stop: list[str] | None,
              run_manager: RunManager | None, kwargs: dict[str, Any], *,
              streamed: bool = False) -> tuple[Step | None, Any]:
        """The recorded step and its output; no step when the call went live (fork mode)."""
        if run_manager is not None:
            path = tracked_path(run_manager.handlers, run_manager.run_id)
        else:
            path = _streaming_path()
        traced, tools, live = format_for_tracing(messages), kwargs.get("tools"), self.live
        return served_or_live(
            self.player, CHAT_MODEL,
            # encoded before anything else runs: no snapshot copies needed
            lambda: chat_request(traced, tools, stop, snapshot=False), path,
            None if live is None else lambda: live_call(live, messages, stop, kwargs,
                                                        streamed=streamed),
            # recorded after the live call returns: a copy of what was asked
            lambda: chat_request(traced, tools, stop))

    async def _astep(self, messages: list[BaseMessage], stop: list[str] | None,
                     run_manager: RunManager | None, kwargs: dict[str, Any], *,
                     streamed: bool = False) -> tuple[Step | None, Any]:
        if self.live is None:
            step, output = self._step(messages, stop, run_manager, kwargs, streamed=streamed)
            if step is not None:  # concurrent calls end in the order they ended recording
                await self.player.in_recorded_order(step)
            return step, output
        # a live call (fork mode) runs the live model's sync API: off the event loop
        return await asyncio.to_thread(self._step, messages, stop, run_manager, kwargs,
                                       streamed=streamed)

    def _should_stream(self, *, async_api: bool, run_manager: RunManager | None = None,
                       **kwargs: Any) -> bool:
        if not super()._should_stream(async_api=async_api, run_manager=run_manager, **kwargs):
            return False
        if kwargs.get("stream") or run_manager is None:
            return True
        # LangChain streams on its own when a streaming handler is attached (LangGraph's
        # stream_mode="messages") and the model has `_stream`, which this one always has: a
        # call recorded from a model without it must come back as one message, not as chunks
        path = tracked_path(run_manager.handlers, run_manager.run_id)
        if path is None:
            return True
        recorded = [s for s in self.player.recorded_at(path)
                    if s.kind == "llm" and s.name == CHAT_MODEL]
        pending = [s for s in recorded if not self.player.is_consumed(s)] or recorded
        return not pending or not isinstance(pending[0].output, dict) \
            or "chunks" in pending[0].output

    def batch(self, inputs: list[LanguageModelInput],
              config: RunnableConfig | list[RunnableConfig] | None = None, *,
              return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        # equal inputs get the answers recorded at their own positions, tracked or not
        return super().batch(inputs, with_tracker(config, len(inputs)),  # type: ignore[arg-type]
                             return_exceptions=return_exceptions, **kwargs)

    async def abatch(self, inputs: list[LanguageModelInput],
                     config: RunnableConfig | list[RunnableConfig] | None = None, *,
                     return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        return await super().abatch(inputs, with_tracker(config, len(inputs)),  # type: ignore[arg-type]
                                    return_exceptions=return_exceptions, **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        step, output = self._step(messages, stop, run_manager, kwargs)
        if run_manager is not None and "chunks" in output:
            for chunk in chat_chunks(output):
                run_manager.on_llm_new_token(_token(chunk), chunk=chunk)
        if step is not None and step.is_error:
            raise error_of(step, output)
        return chat_result(chat_generations(output), output.get("llm_output"))

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        step, output = await self._astep(messages, stop, run_manager, kwargs)
        if run_manager is not None and "chunks" in output:
            for chunk in chat_chunks(output):
                await run_manager.on_llm_new_token(_token(chunk), chunk=chunk)
        if step is not None and step.is_error:
            await wait_if_cancelled(output)
            raise error_of(step, output)
        return chat_result(chat_generations(output), output.get("llm_output"))

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        # LangChain's own stream() fires on_llm_new_token for each chunk yielded here
        step, output = self._step(messages, stop, run_manager, kwargs, streamed=True)
        chunks = chat_chunks(output)
        yield from chunks
        if step is not None and step.is_error:
            raise error_of(step, output, len(chunks))

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        step, output = await self._astep(messages, stop, run_manager, kwargs, streamed=True)
        chunks = chat_chunks(output)
        for chunk in chunks:
            yield chunk
        if step is not None and step.is_error:
            await wait_if_cancelled(output)
            raise error_of(step, output, len(chunks))

    def _stream_chat_model_events(self, messages: list[BaseMessage], stop: list[str] | None = None,
                                  run_manager: CallbackManagerForLLMRun | None = None,
                                  **kwargs: Any) -> Iterator[Any]:
        # langchain-core 1.8 asks for these (instead of `_stream`) in `stream_events(
        # version="v3")` and under LangGraph's v3 stream: the recorded events come back as
        # they were, message id included, also from a model that fired no token callbacks
        step, output = self._step(messages, stop, run_manager, kwargs, streamed=True)
        failed = step is not None and step.is_error
        events = protocol_events(output, _message_id(run_manager), failed=failed)
        yield from events
        if step is not None and failed:
            raise error_of(step, output, len(events), "event")

    async def _astream_chat_model_events(
            self, messages: list[BaseMessage], stop: list[str] | None = None,
            run_manager: AsyncCallbackManagerForLLMRun | None = None,
            **kwargs: Any) -> AsyncIterator[Any]:
        step, output = await self._astep(messages, stop, run_manager, kwargs, streamed=True)
        failed = step is not None and step.is_error
        events = protocol_events(output, _message_id(run_manager), failed=failed)
        for event in events:
            yield event
        if step is not None and failed:
            await wait_if_cancelled(output)
            raise error_of(step, output, len(events), "event")

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools as an OpenAI-style model does (`strict` shapes the schemas as it does
        there); other keyword arguments are forwarded."""
        formatted = [convert_to_openai_tool(tool, strict=strict) for tool in tools]
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=formatted, **kwargs)

    def with_structured_output(
        self, schema: dict[str, Any] | type, *, include_raw: bool = False,
        method: str | None = None, **kwargs: Any,
    ) -> Runnable[LanguageModelInput, Any]:
        """Structured output the way the recording got it: from a tool call (function calling)
        or from JSON in the content (json_schema / json_mode), and with the recorded `strict`
        (it changes the bound tool's schema); `method` and `strict` override the guess."""
        return structured_output(self, schema, include_raw=include_raw, method=method,
                                 strict=kwargs.get("strict"))


keep_signatures(ReplayChatModel._generate, ReplayChatModel._agenerate)


@functools.lru_cache(maxsize=64)
def _run_label(run_id: UUID) -> str:
    # LangChain asks for the identifying parameters several times per call
    return str(run_id)


def _token(chunk: ChatGenerationChunk) -> str:
    # what LangChain passes as the token: the content as it is (a list of blocks for some
    # providers), not its string form
    return cast(str, chunk.message.content)


def _streaming_path() -> str | None:
    """The path of a streamed call. LangChain does not pass the run manager to `_stream`, but a
    run-tree tracker has made the model's own path the current one when the run started."""
    path = current_path()
    return path if path.rpartition("/")[2].startswith("chat_model:") else None


def _message_id(run_manager: RunManager | None) -> str:
    """The id LangChain gives a streamed message of this run (`ChatModelStream`)."""
    return f"lc_run--{run_manager.run_id}" if run_manager is not None else "lc_run--replay"
