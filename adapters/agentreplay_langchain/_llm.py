"""ReplayLLM: a text-completion LLM that answers from a recorded run."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseLLM
from langchain_core.outputs import Generation, GenerationChunk, LLMResult
from pydantic import ConfigDict, Field

from agentreplay_core import Player, Step
from agentreplay_langchain._compat import keep_signatures
from agentreplay_langchain._handler import TEXT_LLM
from agentreplay_langchain._requests import llm_request
from agentreplay_langchain._served import (
    error_of,
    live_text_call,
    served_or_live,
    text_chunks,
    text_generations,
    wait_if_cancelled,
)
from agentreplay_langchain._tree import tracked_path


class ReplayLLM(BaseLLM):
    """The text-completion counterpart of `ReplayChatModel` (for `on_llm_start` recordings).

    invoke, batch, stream and their async forms answer from the recording; recorded stream
    chunks come back with the same token callbacks, also when a call that streamed while
    recording is invoked. In a replay opened with `on_divergence="live"` and a `live` LLM
    given, that LLM answers from the first divergent call on, recorded into the forked run.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    player: Player = Field(exclude=True)
    #: the LLM that answers from the first divergence on (`on_divergence="live"` only)
    live: BaseLLM | None = Field(default=None, exclude=True)
    cache: bool | None = False

    @property
    def _llm_type(self) -> str:
        return "agentreplay-replay-llm"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"replayed_run_id": str(self.player.run_id)}

    def _step(self, prompt: str, stop: list[str] | None, run_manager: Any,
              kwargs: dict[str, Any], *, streamed: bool = False) -> tuple[Step | None, Any]:
        """The recorded step and its output; no step when the call went live (fork mode)."""
        path = tracked_path(run_manager.handlers, run_manager.run_id) if run_manager else None
        live = self.live
        request = functools.partial(llm_request, prompt, stop)
        return served_or_live(
            self.player, TEXT_LLM, request, path,
            None if live is None else lambda: live_text_call(live, prompt, stop, kwargs,
                                                             streamed=streamed),
            request)

    async def _astep(self, prompt: str, stop: list[str] | None, run_manager: Any,
                     kwargs: dict[str, Any], *, streamed: bool = False
                     ) -> tuple[Step | None, Any]:
        if self.live is None:
            return self._step(prompt, stop, run_manager, kwargs, streamed=streamed)
        # a live call (fork mode) runs the live LLM's sync API: off the event loop
        return await asyncio.to_thread(self._step, prompt, stop, run_manager, kwargs,
                                       streamed=streamed)

    def _generate(self, prompts: list[str], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> LLMResult:
        generations: list[list[Generation]] = []
        for prompt in prompts:
            step, output = self._step(prompt, stop, run_manager, kwargs)
            if run_manager is not None and "chunks" in output:
                for chunk in text_chunks(output):
                    run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            if step is not None and step.is_error:
                raise error_of(step, output)
            generations.append(text_generations(output))
        return LLMResult(generations=generations)

    async def _agenerate(self, prompts: list[str], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> LLMResult:
        generations: list[list[Generation]] = []
        for prompt in prompts:
            step, output = await self._astep(prompt, stop, run_manager, kwargs)
            if run_manager is not None and "chunks" in output:
                for chunk in text_chunks(output):
                    await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            if step is not None and step.is_error:
                await wait_if_cancelled(output)
                raise error_of(step, output)
            generations.append(text_generations(output))
        return LLMResult(generations=generations)

    def _stream(self, prompt: str, stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[GenerationChunk]:
        step, output = self._step(prompt, stop, run_manager, kwargs, streamed=True)
        chunks = text_chunks(output)
        for chunk in chunks:
            if run_manager:  # BaseLLM leaves the token callbacks to the implementation
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        if step is not None and step.is_error:
            raise error_of(step, output, len(chunks))

    async def _astream(self, prompt: str, stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[GenerationChunk]:
        step, output = await self._astep(prompt, stop, run_manager, kwargs, streamed=True)
        chunks = text_chunks(output)
        for chunk in chunks:
            if run_manager:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        if step is not None and step.is_error:
            await wait_if_cancelled(output)
            raise error_of(step, output, len(chunks))


keep_signatures(ReplayLLM._generate, ReplayLLM._agenerate)
