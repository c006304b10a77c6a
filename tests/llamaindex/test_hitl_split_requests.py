"""Human-in-the-loop across two requests, each recorded into its own run (what a server does,
see "Concurrent requests" in docs/llamaindex.md). Request 1 runs the agent until a tool asks a
person (`ctx.wait_for_event`: from llama-index-workflows 2.9 the workflow suspends the step),
stores the Context and returns; request 2 restores the Context and sends the answer. The run of
request 1 ends with the tool suspended: its replay must suspend there as live did, asking the
same question, and the replay of request 2 goes on from the restored Context."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.llms.llm import LLM
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool
from llama_index.core.workflow import (
    Context,
    Event,
    HumanResponseEvent,
    InputRequiredEvent,
    JsonPickleSerializer,
)

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from agentreplay_llamaindex._compat import _SUSPENSION_TYPE
from tests.llamaindex.models import ToolCallingLLM, sample

#: before llama-index-workflows 2.9 a step waits for the event in place: a request cannot end
#: with the step suspended, and store its Context for the next one, as here
pytestmark = pytest.mark.skipif(
    _SUSPENSION_TYPE is None,
    reason="llama-index-workflows < 2.9 does not suspend a step waiting for an event")

ran: list[str] = []


class Checking(Event):
    account: str


async def transfer(ctx: Context, account: str) -> str:
    """Transfer money once a person approves."""
    ran.append(account)
    ctx.write_event_to_stream(Checking(account=account))  # streamed again when run again
    async with ctx.store.edit_state() as state:
        state["state"]["asked"] = account
    question = InputRequiredEvent(**{"prefix": f"Transfer to {account}?"})  # dynamic fields
    answer = await ctx.wait_for_event(HumanResponseEvent, waiter_id=f"approve-{account}",
                                      waiter_event=question)
    return f"{account}: {answer.response}"


transfer.__annotations__ = {"ctx": Context, "account": str, "return": str}


def tools() -> list[BaseTool]:
    return [FunctionTool.from_defaults(fn=transfer)]


def workflow(llm: LLM, agent_tools: list[Any]) -> AgentWorkflow:
    agent = FunctionAgent(name="bank", description="Moves money.", tools=agent_tools, llm=llm,
                          system_prompt="Ask before moving money.")
    return AgentWorkflow(agents=[agent], initial_state={"asked": None})


async def request_1(llm: LLM, agent_tools: list[Any]) -> dict[str, Any]:
    """Start the run; when it asks a person, store the Context and answer with the question."""
    handler = workflow(llm, agent_tools).run(user_msg="pay the rent")
    streamed: list[str] = []
    async for event in handler.stream_events():
        if isinstance(event, Checking):
            streamed.append(f"checking {event.account}")
        elif isinstance(event, InputRequiredEvent):
            streamed.append(str(event.prefix))
            assert handler.ctx is not None
            saved = json.dumps(handler.ctx.to_dict(serializer=JsonPickleSerializer()))
            await handler.cancel_run()
            return {"streamed": streamed, "context": saved}
    raise AssertionError(f"the run ended without asking: {await handler}")


async def request_2(llm: LLM, agent_tools: list[Any], saved: str, answer: str) -> str:
    """Restore the stored Context and send the person's answer."""
    flow = workflow(llm, agent_tools)
    ctx = Context.from_dict(flow, json.loads(saved), serializer=JsonPickleSerializer())
    handler = flow.run(ctx=ctx)
    assert handler.ctx is not None
    handler.ctx.send_event(HumanResponseEvent(**{"response": answer}))
    output: Any = await handler
    return str(output.response.content)


@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "tracked"])
def test_a_run_that_ends_waiting_for_a_person_replays_up_to_the_question(
        li_store: Store, tracked: bool) -> None:
    with li_store.record(name="request-1") as rec, instrument(rec):
        live = asyncio.run(request_1(ToolCallingLLM(), tools()))
    [account] = ran
    assert live["streamed"] == [f"checking {account}", f"Transfer to {account}?"]
    [step] = [s for s in li_store.load_steps(rec.run_id) if s.kind == "tool"]
    assert not step.is_error and '"waiting_for"' in json.dumps(step.output)
    ran.clear()
    with li_store.replay(rec.run_id) as player, instrument(player if tracked else None):
        again = asyncio.run(request_1(ReplayLLM(player), replay_tools(player, tools())))
    assert ran == [] and again["streamed"] == live["streamed"]
    state = json.loads(again["context"])["state"]["state_data"]["_data"]["state"]
    assert json.loads(state) == {"asked": account}  # what the tool wrote before it waited


@pytest.mark.parametrize("stored_by", ["live", "replay"])
def test_the_request_that_answers_replays_from_the_restored_context(
        li_store: Store, stored_by: str) -> None:
    ran.clear()
    with li_store.record(name="request-1") as first, instrument(first):
        asked = asyncio.run(request_1(ToolCallingLLM(), tools()))
    answer = f"yes {sample()}"
    with li_store.record(name="request-2") as second, instrument(second):
        text = asyncio.run(request_2(ToolCallingLLM(), tools(), asked["context"], answer))
    [account, again] = ran
    assert again == account and f"{account}: {answer}" in text
    ran.clear()
    with li_store.replay(first.run_id) as player, instrument(player):
        replayed = asyncio.run(request_1(ReplayLLM(player), replay_tools(player, tools())))
    saved = asked["context"] if stored_by == "live" else replayed["context"]
    with li_store.replay(second.run_id) as player, instrument(player):
        replayed_text = asyncio.run(
            request_2(ReplayLLM(player), replay_tools(player, tools()), saved, answer))
    assert ran == [] and replayed_text == text
