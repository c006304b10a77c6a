"""`AgentWorkflow` handoffs: the framework's own `handoff` tool is no recorded input (it only
moves the workflow's state to the next agent), so it runs again in replay and the run replays
to the end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.llms.llm import LLM

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from tests.llamaindex import scenarios
from tests.llamaindex.models import ToolCallingLLM, sample


def _handed_over(message: ChatMessage) -> bool:
    calls = message.additional_kwargs.get("tool_calls") or []
    return any(c["name"] == "handoff" for c in calls)


class HandingOffLLM(ToolCallingLLM):
    """Hands a new user turn over to agent `to`; without `to`, uses the tools as usual, as
    if the handoff exchange were not in the history."""

    to: str | None = None

    def _reply(self, messages: Sequence[ChatMessage], tools: list[Any]) -> ChatMessage:
        if self.to is None or messages[-1].role != MessageRole.USER:
            handoffs = [i for i, m in enumerate(messages) if _handed_over(m)]
            if handoffs and all(m.role == MessageRole.TOOL for m in messages[handoffs[-1] + 1:]):
                messages = messages[:handoffs[-1]]
            return super()._reply(messages, [t for t in tools
                                             if t["function"]["name"] != "handoff"])
        call = {"id": f"call_{sample()}", "name": "handoff",
                "arguments": json.dumps({"to_agent": self.to, "reason": sample()})}
        return ChatMessage(role=MessageRole.ASSISTANT, content="",
                           additional_kwargs={"tool_calls": [call]})


async def _handoff_run(front: LLM, back: LLM, tools: Any) -> dict[str, Any]:
    workflow = AgentWorkflow(agents=[
        FunctionAgent(name="front", description="Talks to the user.", llm=front,
                      system_prompt="Hand arithmetic over.", can_handoff_to=["calculator"],
                      streaming=False),
        FunctionAgent(name="calculator", description="Does arithmetic.", llm=back,
                      tools=tools, system_prompt="Use the tools.", streaming=False),
    ], root_agent="front")
    output: Any = await workflow.run(user_msg=scenarios.AGENT_QUESTION)
    return {"agent": output.current_agent_name, "text": str(output.response.content)}


def test_a_handoff_between_agents_replays_to_the_end(li_store: Store) -> None:
    tools = scenarios.agent_tools()
    with li_store.record(name="handoff") as rec, instrument(rec):
        live = asyncio.run(_handoff_run(HandingOffLLM(to="calculator"), HandingOffLLM(),
                                        tools))
    assert live["agent"] == "calculator" and live["text"].startswith("done ")
    steps = li_store.load_steps(rec.run_id)
    assert sorted(s.name for s in steps if s.kind == "tool") == ["add", "multiply"]
    with li_store.replay(rec.run_id) as player, instrument(player):
        # both models are named alike: one stand-in serves both agents, by their messages
        again = asyncio.run(_handoff_run(ReplayLLM(player), ReplayLLM(player),
                                         replay_tools(player, tools)))
    assert again == live
