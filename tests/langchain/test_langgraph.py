"""A LangGraph agent with a ToolNode making parallel tool calls: record, replay, compare."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agentreplay_core import Store
from agentreplay_langchain import (
    RecordingCallbackHandler,
    ReplayChatModel,
    instrument,
    replay_tool_call,
    replay_tools,
)
from tests.langchain.fakes import (
    Counter,
    Plan,
    ScriptedChatModel,
    assert_offline,
    make_tools,
    transcript,
)

PLAN: Plan = [[("weather", {"city": "Paris"}), ("weather", {"city": "Rome"}),
         ("search", {"query": "museums"}), ("add", {"a": 1.0, "b": 2.0})]]
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def build_graph(model: Any, tool_node: ToolNode, tools: Sequence[BaseTool], *,
                state: Any = MessagesState, checkpointer: Any = None, store: Any = None,
                system: Callable[[], str] | None = None) -> Any:
    """The agent loop: the model, then its tool calls on `tool_node`, until it answers;
    `system()` makes a system message put first in each prompt."""
    bound = model.bind_tools(tools)

    # the node passes its config on: Python 3.10's executors do not carry the context
    def agent(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        first = [SystemMessage(system())] if system is not None else []
        return {"messages": [bound.invoke([*first, *state["messages"]], config)]}

    graph = StateGraph(state)
    graph.add_node("agent", agent)
    graph.add_node("tools", tool_node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer, store=store)


def record(store: Store, counter: Counter) -> tuple[Any, list[Any]]:
    tools = make_tools(counter)
    app = build_graph(ScriptedChatModel(plan=PLAN), ToolNode(tools), tools)
    # entropy=True: LangGraph gives human and tool messages uuid4 ids; they replay too
    with store.record(name="langgraph", entropy=True) as rec:
        state = app.invoke({"messages": [HumanMessage("a day in Europe")]},
                           config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0
    return rec.run_id, state["messages"]


def test_toolnode_with_parallel_calls_replays_from_replay_tools(store: Store) -> None:
    counter = Counter()
    run_id, live = record(store, counter)
    assert counter.total == 4
    replay_counter = Counter()
    with store.replay(run_id) as player:
        assert_offline()
        tools = replay_tools(player, make_tools(replay_counter))
        app = build_graph(ReplayChatModel(player=player), ToolNode(tools), tools)
        replayed = app.invoke({"messages": [HumanMessage("a day in Europe")]})["messages"]
    assert transcript(replayed) == transcript(live)
    assert replay_counter.total == 0


@pytest.mark.skipif("wrap_tool_call" not in inspect.signature(ToolNode).parameters,
                    reason="ToolNode(wrap_tool_call=) arrived in a later langgraph 1.x")
def test_toolnode_wrap_tool_call_switches_every_tool_to_replay(store: Store) -> None:
    run_id, live = record(store, Counter())
    replay_counter = Counter()
    with store.replay(run_id) as player:
        tools = make_tools(replay_counter)
        node = ToolNode(tools, wrap_tool_call=replay_tool_call(player))
        app = build_graph(ReplayChatModel(player=player), node, tools)
        replayed = app.invoke({"messages": [HumanMessage("a day in Europe")]})["messages"]
    assert transcript(replayed) == transcript(live)
    assert replay_counter.total == 0


def test_async_graph_replays_a_sync_recording(store: Store) -> None:
    run_id, live = record(store, Counter())
    with store.replay(run_id) as player, instrument(player):
        tools = replay_tools(player, make_tools(Counter()))
        app = build_graph(ReplayChatModel(player=player), ToolNode(tools), tools)
        replayed = asyncio.run(app.ainvoke({"messages": [HumanMessage("a day in Europe")]}))
    assert transcript(replayed["messages"]) == transcript(live)


def test_paths_are_structural_and_stable_across_runs(store: Store) -> None:
    first, _ = record(store, Counter())
    second, _ = record(store, Counter())

    def paths(run_id: Any) -> list[str]:
        # tool call ids come from the (random) model and are replayed with it; mask them here
        return sorted(re.sub(r"call:call_[0-9a-f]+", "call:*", s.path)
                      for s in store.load_steps(run_id))

    assert paths(first) == paths(second)
    assert not any(UUID_RE.search(p) for p in paths(first))
    assert any("graph:step:" in p and p.endswith("]") for p in paths(first))


def test_streamed_messages_keep_their_recorded_ids_with_entropy(store: Store) -> None:
    # stream_mode="messages" gives the tool messages their ids as it emits them; with
    # entropy=True those ids are the run's, like every other id in the graph's state
    def streamed(app: Any, config: Any = None) -> dict[str, tuple[str, str]]:
        out = {}
        for message, _ in app.stream({"messages": [HumanMessage("a day in Europe")]},
                                     config=config, stream_mode="messages"):
            if message.type == "tool":  # (their order follows the tool threads' finishing)
                out[message.id] = (message.name, str(message.content))
        return out

    tools = make_tools(Counter())
    with store.record(name="messages-mode", entropy=True) as rec:
        live = streamed(build_graph(ScriptedChatModel(plan=PLAN), ToolNode(tools), tools),
                        {"callbacks": [RecordingCallbackHandler(rec)]})
    assert len(live) == 4
    with store.replay(rec.run_id) as player:
        replayed = replay_tools(player, make_tools(Counter()))
        again = streamed(build_graph(ReplayChatModel(player=player), ToolNode(replayed),
                                     replayed))
    assert again == live


class UnstreamedModel(ScriptedChatModel):
    """A model without `_stream` (many custom and fake models)."""

    _stream = BaseChatModel._stream


def test_messages_mode_streams_a_model_as_it_streamed_while_recording(store: Store) -> None:
    # without `_stream`, LangGraph emits each answer as one AIMessage when the call ends;
    # ReplayChatModel, which can stream, must do the same
    def emitted(app: Any, config: Any = None) -> list[tuple[str, str]]:
        return [(type(message).__name__, str(message.content)) for message, _ in app.stream(
            {"messages": [HumanMessage("a day in Europe")]}, config=config,
            stream_mode="messages") if message.type == "ai"]

    tools = make_tools(Counter())
    with store.record(name="not-streamed") as rec:
        live = emitted(build_graph(UnstreamedModel(plan=PLAN), ToolNode(tools), tools),
                       {"callbacks": [RecordingCallbackHandler(rec)]})
    assert {kind for kind, _ in live} == {"AIMessage"}
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = replay_tools(player, make_tools(Counter()))
        again = emitted(build_graph(ReplayChatModel(player=player), ToolNode(replayed),
                                    replayed))
    assert again == live
