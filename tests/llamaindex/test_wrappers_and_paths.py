"""A structured LLM replays through the model it wraps; a tracked replay gives concurrent
equal calls the results recorded at their own positions in the run tree."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, CompletionResponse, MessageRole
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.llm import LLM
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step
from pydantic import Field

from agentreplay_core import Store, decode
from agentreplay_llamaindex import ReplayLLM, instrument
from agentreplay_llamaindex._responses import response_from_json
from tests.llamaindex import scenarios
from tests.llamaindex.models import SampledLLM, ToolCallingLLM, sample

MESSAGES = [ChatMessage(role=MessageRole.USER, content="Make an invoice for ACME.")]


async def structured_calls(llm: LLM) -> list[Any]:
    """Every entry point of `llm.as_structured_llm(Invoice)`: the invoices it returns."""
    wrapper = llm.as_structured_llm(scenarios.Invoice)
    out: list[Any] = [wrapper.chat(MESSAGES).raw]
    out.append([c.raw for c in wrapper.stream_chat(MESSAGES)][-1])
    out.append((await wrapper.achat(MESSAGES)).raw)
    out.append([c.raw async for c in await wrapper.astream_chat(MESSAGES)][-1])
    out.append(wrapper.complete("Make an invoice for ACME.").raw)
    return [i.model_dump() if i is not None else None for i in out]


def test_structured_llm_replays_through_the_inner_model(li_store: Store) -> None:
    with li_store.record(name="structured") as rec, instrument(rec):
        recorded = asyncio.run(structured_calls(ToolCallingLLM()))
    assert all(isinstance(i, dict) and i["total"] >= 0 for i in recorded)
    steps = li_store.load_steps(rec.run_id)
    # one step per model call: the inner model's, which offered the Invoice tool; the
    # wrapper's own calls (no tools) only formatted its answer
    assert [(s.kind, s.input["tools"]) for s in steps] == [("llm", ["Invoice"])] * 5
    with li_store.replay(rec.run_id) as player:  # no allow_unused: every step is consumed
        again = asyncio.run(structured_calls(ReplayLLM(player)))
    assert again == recorded


class SlowFirstLLM(SampledLLM):
    """Answers its first call last, so recorded order differs from the order of asking."""

    calls: int = Field(default=0)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponse:
        self.calls += 1
        if self.calls == 1:
            await asyncio.sleep(0.1)
        return CompletionResponse(text=f"answer {sample()}")


class Ask(Event):
    branch: str


class Answer(Event):
    branch: str
    text: str


class FanOut(Workflow):
    """Two branches ask the model the very same thing at the same time."""

    def __init__(self, llm: LLM, **kwargs: Any) -> None:
        super().__init__(timeout=30, **kwargs)
        self.llm = llm

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Ask | None:
        ctx.send_event(Ask(branch="a"))
        ctx.send_event(Ask(branch="b"))
        return None

    @step(num_workers=2)
    async def ask(self, ev: Ask) -> Answer:
        response = await self.llm.acomplete("The same question?")
        return Answer(branch=ev.branch, text=response.text)

    @step
    async def gather(self, ctx: Context, ev: Answer) -> StopEvent | None:
        answers = ctx.collect_events(ev, [Answer, Answer])
        if answers is None:
            return None
        return StopEvent(result={a.branch: a.text for a in answers})


async def fan_out(llm: LLM) -> dict[str, str]:
    result: dict[str, str] = await FanOut(llm).run()
    return result


@pytest.mark.parametrize("tracked", [True, False])
def test_concurrent_equal_calls_get_their_own_answers_when_tracked(li_store: Store,
                                                                   tracked: bool) -> None:
    with li_store.record(name="fan-out") as rec, instrument(rec):
        recorded = asyncio.run(fan_out(SlowFirstLLM()))
    # branch a asked first and was answered last: the recording holds b's answer first
    steps = li_store.load_steps(rec.run_id)
    answers = [response_from_json(decode(s.output)["response"]).text for s in steps]
    assert answers == [recorded["b"], recorded["a"]]
    with li_store.replay(rec.run_id) as player:
        if tracked:
            with instrument(player):
                again = asyncio.run(fan_out(ReplayLLM(player)))
        else:
            again = asyncio.run(fan_out(ReplayLLM(player)))
    # without tracking too: equal calls are served in the order they started (a first),
    # not the order they ended in (before, the answers were swapped)
    assert again == recorded
