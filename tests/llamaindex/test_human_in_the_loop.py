"""A tool that asks a person and waits for the answer (`ctx.wait_for_event`), LlamaIndex's
human-in-the-loop pattern. From llama-index-workflows 2.9 the waiting step is suspended (the
tool's first call raises `WaitingForEvent`) and run again when the answer arrives: only the
call that returned is the tool's result, and the replay serves it at once, without asking."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.llms.llm import LLM
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool
from llama_index.core.workflow import Context, HumanResponseEvent, InputRequiredEvent

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from tests.llamaindex.models import ToolCallingLLM, sample

ran: list[str] = []


async def transfer(ctx: Context, account: str) -> str:
    """Transfer money once a person approves."""
    ran.append(account)
    question = InputRequiredEvent(**{"prefix": f"Transfer to {account}?"})  # dynamic fields
    answer = await ctx.wait_for_event(HumanResponseEvent, waiter_id=f"approve-{account}",
                                      waiter_event=question)
    return f"{account}: {answer.response}"


transfer.__annotations__ = {"ctx": Context, "account": str, "return": str}


def tools() -> list[BaseTool]:
    return [FunctionTool.from_defaults(fn=transfer)]


async def approved_run(llm: LLM, agent_tools: list[Any]) -> dict[str, Any]:
    """The agent's run, with a person answering every question it asks (a sampled answer:
    a replay that asked again would get another one)."""
    agent = FunctionAgent(name="bank", description="Moves money.", tools=agent_tools, llm=llm,
                          system_prompt="Ask before moving money.")
    handler = AgentWorkflow(agents=[agent]).run(user_msg="pay the rent")
    asked = []
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent):
            asked.append(event.prefix)
            handler.ctx.send_event(HumanResponseEvent(**{"response": f"yes {sample()}"}))
    output: Any = await handler
    return {"asked": asked, "text": str(output.response.content)}


@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "tracked"])
def test_a_tool_that_waits_for_a_person_replays_the_answer_without_asking(
        li_store: Store, tracked: bool) -> None:
    with li_store.record(name="approval") as rec, instrument(rec):
        live = asyncio.run(approved_run(ToolCallingLLM(), tools()))
    [question] = live["asked"]
    [tool_step] = [s for s in li_store.load_steps(rec.run_id) if s.kind == "tool"]
    assert not tool_step.is_error  # the suspended call is no result
    ran.clear()
    with li_store.replay(rec.run_id) as player, instrument(player if tracked else None):
        again = asyncio.run(approved_run(ReplayLLM(player), replay_tools(player, tools())))
    assert ran == [] and again == {"asked": [], "text": live["text"]}
    assert question.startswith("Transfer to ") and question.split()[-1].rstrip("?") in live["text"]
