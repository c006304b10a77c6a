"""ReplayLLM: a text-completion LLM that answers from a recorded run."""

from __future__ import annotations

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
    step_output,
    text_chunks,
    text_generations,
    wait_if_cancelled,
)
from agentreplay_langchain._tree import tracked_path


class ReplayLLM(BaseLLM):
    """The text-completion counterpart of `ReplayChatModel` (for `on_llm_start` recordings).

    invoke, batch, stream and their async forms answer from the recording; recorded stream
    chunks come back with the same token callbacks, also when a call that streamed while
    recording is invoked.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    player: Player = Field(exclude=True)
    cache: bool | None = False

    @property
    def _llm_type(self) -> str:
        return "agentreplay-replay-llm"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"replayed_run_id": str(self.player.run_id)}

    def _step(self, prompt: str, stop: list[str] | None, run_manager: Any) -> tuple[Step, Any]:
        path = tracked_path(run_manager.handlers, run_manager.run_id) if run_manager else None
        step = self.player.next_step("llm", TEXT_LLM, llm_request(prompt, stop), path=path)
        return step, step_output(step)

    def _generate(self, prompts: list[str], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> LLMResult:
        generations: list[list[Generation]] = []
        for prompt in prompts:
            step, output = self._step(prompt, stop, run_manager)
            if run_manager is not None and "chunks" in output:
                for chunk in text_chunks(output):
                    run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            if step.is_error:
                raise error_of(step, output)
            generations.append(text_generations(output))
        return LLMResult(generations=generations)

    async def _agenerate(self, prompts: list[str], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> LLMResult:
        generations: list[list[Generation]] = []
        for prompt in prompts:
            step, output = self._step(prompt, stop, run_manager)
            if run_manager is not None and "chunks" in output:
                for chunk in text_chunks(output):
                    await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            if step.is_error:
                await wait_if_cancelled(output)
                raise error_of(step, output)
            generations.append(text_generations(output))
        return LLMResult(generations=generations)

    def _stream(self, prompt: str, stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[GenerationChunk]:
        step, output = self._step(prompt, stop, run_manager)
        chunks = text_chunks(output)
        for chunk in chunks:
            if run_manager:  # BaseLLM leaves the token callbacks to the implementation
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        if step.is_error:
            raise error_of(step, output, len(chunks))

    async def _astream(self, prompt: str, stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[GenerationChunk]:
        step, output = self._step(prompt, stop, run_manager)
        chunks = text_chunks(output)
        for chunk in chunks:
            if run_manager:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        if step.is_error:
            await wait_if_cancelled(output)
            raise error_of(step, output, len(chunks))


keep_signatures(ReplayLLM._generate, ReplayLLM._agenerate)
