"""Custom events a tool dispatches (`dispatch_custom_event`) come back in replay: the stand-in
dispatches what the tool did, before its result or its error, where `astream_events` and the
handlers see them as they did live."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import ToolNode

from agentreplay_core import Store
from agentreplay_langchain import ReplayChatModel, instrument, replay_tools
from tests.langchain.fakes import Counter, Plan, ScriptedChatModel, nonce, transcript
from tests.langchain.test_langgraph import build_graph

PLAN: Plan = [[("survey", {"city": "Oslo"}), ("asurvey", {"city": "Rome"}),
               ("failing", {"city": "Atlantis"})]]


def surveying_tools(counter: Counter) -> list[BaseTool]:
    @tool
    def survey(city: str) -> str:
        """Survey a city, reporting progress."""
        counter.hit("survey")
        dispatch_custom_event("progress", {"city": city, "step": 1, "id": nonce()})
        # from a run inside the tool: still the tool's
        def second(step: int) -> None:
            dispatch_custom_event("progress", {"city": city, "step": step})

        RunnableLambda(second).invoke(2)
        return f"{city}: {nonce()}"

    @tool
    async def asurvey(city: str, config: RunnableConfig) -> str:
        """Survey a city asynchronously."""
        counter.hit("asurvey")
        await adispatch_custom_event("progress", {"zone": city, "id": nonce()}, config=config)
        return f"{city}: {nonce()}"

    @tool
    def failing(city: str) -> str:
        """Survey a city that is not there."""
        counter.hit("failing")
        dispatch_custom_event("warning", {"city": city, "id": nonce()})
        raise LookupError(f"no such city: {city}")

    return [survey, asurvey, failing]


def run(model: Any, tools: Sequence[BaseTool], question: str = "survey"
        ) -> tuple[list[Any], list[Any]]:
    """The agent's messages, and the custom events `astream_events` gave (sorted: the tools
    run in parallel)."""
    app = build_graph(model, ToolNode(list(tools), handle_tool_errors=True), tools)

    async def go() -> tuple[list[Any], list[Any]]:
        events, final = [], None
        async for event in app.astream_events({"messages": [HumanMessage(question)]},
                                              version="v2"):
            if event["event"] == "on_custom_event":
                events.append((event["name"], list(event["data"].items())))
            elif event["event"] == "on_chain_end" and event["name"] == "LangGraph":
                final = event["data"]["output"]
        assert final is not None
        return final["messages"], sorted(events, key=repr)
    return asyncio.run(go())


def test_a_tools_custom_events_are_dispatched_again_in_replay(store: Store) -> None:
    with store.record(name="custom-events", entropy=True) as rec, instrument(rec):
        live, live_events = run(ScriptedChatModel(plan=PLAN), surveying_tools(Counter()))
    assert rec.stats.internal_errors == 0
    assert len(live_events) == 4 and "no such city" in str(live)
    counter = Counter()
    with store.replay(rec.run_id) as player, instrument(player):
        again, events = run(ReplayChatModel(player=player),
                            replay_tools(player, surveying_tools(counter)))
    assert counter.total == 0
    # the same events with their data (keys in the dispatched order), the failing tool's too
    assert events == live_events
    assert transcript(again) == transcript(live)
