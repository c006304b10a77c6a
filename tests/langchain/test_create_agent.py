"""`create_agent` (langchain 1.x): record the agent, switch it to replay with one middleware."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agentreplay_core import Store
from agentreplay_langchain import RecordingCallbackHandler, instrument
from tests.langchain.fakes import (
    Counter,
    Plan,
    ScriptedChatModel,
    assert_offline,
    make_tools,
    transcript,
)

agents = pytest.importorskip("langchain.agents", reason="create_agent is langchain 1.x")
from agentreplay_langchain import ReplayMiddleware  # noqa: E402  (needs langchain 1.x)

PLAN: Plan = [[("weather", {"city": "Oslo"}), ("add", {"a": 0.1, "b": 0.2})],
        [("search", {"query": "fjords"})]]


def question() -> dict[str, Any]:
    # a fresh message each run: LangGraph writes the id it draws into the message object
    return {"messages": [HumanMessage("a weekend in Oslo")]}


def record(store: Store) -> tuple[Any, list[Any]]:
    agent = agents.create_agent(ScriptedChatModel(plan=PLAN), make_tools(Counter()))
    with store.record(name="create-agent", entropy=True) as rec:
        state = agent.invoke(question(), config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0
    return rec.run_id, state["messages"]


def test_middleware_replays_the_whole_agent(store: Store) -> None:
    run_id, live = record(store)
    model = ScriptedChatModel(plan=PLAN)
    counter = Counter()
    # instrument(player): the tracker gives each parallel tool task its recorded path
    with store.replay(run_id) as player, instrument(player):
        assert_offline()
        agent = agents.create_agent(model, make_tools(counter),
                                    middleware=[ReplayMiddleware(player)])
        replayed = agent.invoke(question())["messages"]
    # create_agent runs each tool call as its own task (a Send): the ids LangGraph draws for
    # the tool messages in those threads replay too, whichever thread runs first
    assert transcript(replayed) == transcript(live)
    assert model.calls == 0 and counter.total == 0  # the originals never ran


def test_middleware_replays_the_agent_asynchronously(store: Store) -> None:
    run_id, live = record(store)
    with store.replay(run_id) as player, instrument(player):
        agent = agents.create_agent(ScriptedChatModel(plan=PLAN), make_tools(Counter()),
                                    middleware=[ReplayMiddleware(player)])
        replayed = asyncio.run(agent.ainvoke(question()))["messages"]
    assert transcript(replayed) == transcript(live)
