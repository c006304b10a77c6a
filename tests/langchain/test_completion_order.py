"""Model calls made at once and gathered as they answer replay their answers in the order they
came while recording (the first answer back from a remote model first)."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from agentreplay_core import Store
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel
from tests.langchain.fakes import ScriptedChatModel, nonce

#: how long each question takes to answer while recording: the last asked answers first
DELAYS = {"part 0": 0.08, "part 1": 0.06, "part 2": 0.04, "part 3": 0.02}


class SlowChatModel(ScriptedChatModel):
    """Answers each question after a delay of its own, with random wording."""

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        await asyncio.sleep(DELAYS.get(str(messages[-1].content), 0.0))
        return ChatResult(generations=[ChatGeneration(
            message=AIMessage(content=f"{nonce()} on {messages[-1].content}"))])


async def _gather_then_summarise(model: Any, config: dict[str, Any]) -> list[str]:
    came: list[str] = []

    async def ask(question: str) -> None:
        came.append(str((await model.ainvoke(question, config=config)).content))

    await asyncio.gather(*(ask(q) for q in DELAYS))
    summary = await model.ainvoke("summarise: " + " | ".join(came), config=config)
    return [*came, str(summary.content)]


def test_gathered_answers_replay_in_the_order_they_came(store: Store) -> None:
    with store.record(name="fan-out") as rec:
        live = asyncio.run(_gather_then_summarise(
            SlowChatModel(), {"callbacks": [RecordingCallbackHandler(rec)]}))
    assert [a.split(" on ")[1] for a in live[:4]] == [f"part {i}" for i in (3, 2, 1, 0)]
    with store.replay(rec.run_id) as player:
        replayed = asyncio.run(_gather_then_summarise(ReplayChatModel(player=player), {}))
    assert replayed == live
