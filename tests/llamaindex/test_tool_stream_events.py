"""Events an agent tool writes to the workflow's stream (`ctx.write_event_to_stream`): part of
its recorded result, so a replay that serves the tool shows the program the same events, in
the same place among the agent's own."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ToolCallResult
from llama_index.core.llms.llm import LLM
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool
from llama_index.core.workflow import Context, Event
from pydantic import Field

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from agentreplay_llamaindex._stream_events import write_again
from tests.llamaindex.models import ToolCallingLLM, sample

ran: list[str] = []


class Progress(Event):
    message: str
    detail: dict[str, Any] = Field(default_factory=dict)


async def lookup(ctx: Context, code: str) -> str:
    """Look up an order, telling the user how it goes."""
    ran.append(code)
    ctx.write_event_to_stream(Progress(message=f"looking up {code}",
                                       detail={"zone": "eu", "attempt": 1}))
    found = sample()  # unrepeatable: the event says what the lookup found
    ctx.write_event_to_stream(Progress(message=f"found {found}"))
    return f"order {code}: {found}"


async def lookup_then_fail(ctx: Context, code: str) -> str:
    """Look up an order; the carrier's service fails after the progress was shown."""
    await lookup(ctx, code)
    raise TimeoutError("the carrier did not answer")


lookup.__annotations__ = {"ctx": Context, "code": str, "return": str}
lookup_then_fail.__annotations__ = {"ctx": Context, "code": str, "return": str}


def tools() -> list[BaseTool]:
    return [FunctionTool.from_defaults(fn=lookup)]


async def watched(llm: LLM, agent_tools: Sequence[BaseTool]) -> dict[str, Any]:
    """What a program streaming the run shows: the events, in order, and the answer."""
    agent = FunctionAgent(name="orders", description="Finds orders.", tools=list(agent_tools),
                          llm=llm, system_prompt="Use the tools.")
    handler = AgentWorkflow(agents=[agent]).run(user_msg="Where is my order?")
    shown = []
    async for event in handler.stream_events():
        if isinstance(event, Progress):
            shown.append(("progress", event.message, json.dumps(event.detail)))
        elif isinstance(event, ToolCallResult):
            shown.append(("result", event.tool_output.content, ""))
    output: Any = await handler
    return {"shown": shown, "answer": str(output.response.content)}


def test_a_tools_stream_events_replay_where_they_were_written(li_store: Store) -> None:
    with li_store.record(name="tool-events") as rec, instrument(rec):
        live = asyncio.run(watched(ToolCallingLLM(), tools()))
    [code] = ran
    kinds = [kind for kind, _, _ in live["shown"]]
    assert kinds == ["progress", "progress", "result"]
    assert live["shown"][0][1:] == (f"looking up {code}", '{"zone": "eu", "attempt": 1}')
    [tool_step] = [s for s in li_store.load_steps(rec.run_id) if s.kind == "tool"]
    assert [json.loads(e)["value"]["message"] for e in tool_step.output["stream_events"]] == \
        [message for _, message, _ in live["shown"][:2]]
    ran.clear()
    with li_store.replay(rec.run_id) as player, instrument(player):
        again = asyncio.run(watched(ReplayLLM(player), replay_tools(player, tools())))
    assert again == live and ran == []  # same events, key order too; the tool never ran


def test_events_a_tool_wrote_before_raising_replay_with_its_error(li_store: Store) -> None:
    failing = [FunctionTool.from_defaults(fn=lookup_then_fail)]
    with li_store.record(name="tool-events-error") as rec, instrument(rec):
        live = asyncio.run(watched(ToolCallingLLM(), failing))
    assert [kind for kind, _, _ in live["shown"]] == ["progress", "progress", "result"]
    assert "the carrier did not answer" in live["shown"][2][1]
    ran.clear()
    with li_store.replay(rec.run_id) as player, instrument(player):
        again = asyncio.run(watched(ReplayLLM(player), replay_tools(player, failing)))
    assert again == live and ran == []


def test_a_tool_gone_live_records_its_events_into_the_fork(li_store: Store) -> None:
    with li_store.record(name="tool-events-fork") as rec, instrument(rec):
        asyncio.run(watched(ToolCallingLLM(), []))  # recorded without the tool
    ran.clear()
    with li_store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player, \
            instrument(player):
        forked = asyncio.run(watched(ReplayLLM(player, live=ToolCallingLLM()),
                                     replay_tools(player, tools())))
        fork = player.fork
    assert fork is not None and len(ran) == 1
    assert [kind for kind, _, _ in forked["shown"]] == ["progress", "progress", "result"]
    [tool_step] = [s for s in li_store.load_steps(fork.run_id) if s.kind == "tool"]
    assert len(tool_step.output["stream_events"]) == 2


def test_an_event_whose_class_the_program_lacks_is_not_written(
        caplog: pytest.LogCaptureFixture) -> None:
    written: list[Any] = []

    class Sink:
        def write_event_to_stream(self, event: Any) -> None:
            written.append(event)

    unknown = json.dumps({"__is_pydantic": True, "value": {"message": "x"},
                          "qualified_name": "not_imported_module.Progress"})
    not_an_event = json.dumps({"__is_pydantic": True, "value": {},
                               "qualified_name": "json.JSONDecoder"})
    known = Progress(message="kept").model_dump_json()
    with caplog.at_level(logging.WARNING, logger="agentreplay.llamaindex"):
        write_again(Sink(), [unknown, not_an_event, json.dumps(
            {"__is_pydantic": True, "value": json.loads(known),
             "qualified_name": f"{__name__}.Progress"})], "lookup")
    assert [type(e) for e in written] == [Progress] and written[0].message == "kept"
    assert sum("has not imported" in r.getMessage() for r in caplog.records) == 2
