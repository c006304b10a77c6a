"""A workflow that fans out model calls and gathers the answers as they come replays them in
the order they came while recording (the first answer back from a remote model first)."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.workflow import Context, Event, StartEvent, StopEvent, Workflow, step

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, instrument

#: how long each part's call takes while recording: the last asked answers first
DELAYS = {"part 0": 0.08, "part 1": 0.06, "part 2": 0.04, "part 3": 0.02}


class SlowLLM(CustomLLM):
    """Answers after a delay of each prompt's own, like a remote model under load."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="slow")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise NotImplementedError

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False,
                        **kwargs: Any) -> CompletionResponse:
        await asyncio.sleep(DELAYS.get(prompt, 0.0))
        return CompletionResponse(text=f"on {prompt}")


class Question(Event):
    question: str


class Answer(Event):
    answer: str


class Progress(Event):
    message: str


class FanOut(Workflow):
    def __init__(self, llm: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.llm = llm

    @step
    async def start(self, ctx: Context, ev: StartEvent) -> Question | None:
        for part in DELAYS:
            ctx.send_event(Question(question=part))
        return None

    @step(num_workers=4)
    async def ask(self, ctx: Context, ev: Question) -> Answer:
        answer = (await self.llm.acomplete(ev.question)).text
        ctx.write_event_to_stream(Progress(message=answer))
        return Answer(answer=answer)

    @step
    async def gather(self, ctx: Context, ev: Answer) -> StopEvent | None:
        answers = ctx.collect_events(ev, [Answer] * len(DELAYS))
        if answers is None:
            return None
        summary = await self.llm.acomplete("summarise: " + " | ".join(a.answer for a in answers))
        return StopEvent(result=summary.text)


async def _run(llm: Any) -> tuple[str, list[str]]:
    handler = FanOut(llm, timeout=30).run()
    progress = [ev.message async for ev in handler.stream_events() if isinstance(ev, Progress)]
    return str(await handler), progress


def test_collected_answers_replay_in_the_order_they_came(li_store: Store) -> None:
    with li_store.record(name="fan-out") as rec, instrument(rec):
        live = asyncio.run(_run(SlowLLM()))
    assert live[1] == [f"on part {i}" for i in (3, 2, 1, 0)]  # they came in that order
    with li_store.replay(rec.run_id) as player, instrument(player):
        assert asyncio.run(_run(ReplayLLM(player))) == live
