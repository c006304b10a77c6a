"""What a tool writes to LangGraph's custom stream (`get_stream_writer()`,
`runtime.stream_writer`) comes back in replay: the stand-in writes what the tool wrote, before
its result or its error, so a graph streamed with `stream_mode="custom"` yields it again."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import ToolNode

from agentreplay_core import Store
from agentreplay_langchain import ReplayChatModel, instrument, replay_tools
from tests.langchain.fakes import Counter, Plan, ScriptedChatModel, nonce, transcript
from tests.langchain.test_custom_events import PLAN as EVENTS_PLAN
from tests.langchain.test_custom_events import run as run_reporting
from tests.langchain.test_custom_events import surveying_tools
from tests.langchain.test_langgraph import build_graph

tool_node = pytest.importorskip("langgraph.prebuilt.tool_node")
if not hasattr(tool_node, "ToolRuntime"):
    pytest.skip("ToolRuntime is langgraph 1.x's", allow_module_level=True)
from langgraph.config import get_stream_writer  # noqa: E402
from langgraph.prebuilt.tool_node import ToolRuntime  # noqa: E402

PLAN: Plan = [[("survey", {"city": "Oslo"}), ("census", {"city": "Rome"}),
               ("failing", {"city": "Atlantis"})]]


def writing_tools(counter: Counter) -> list[BaseTool]:
    @tool
    def survey(city: str) -> str:
        """Survey a city, streaming progress."""
        counter.hit("survey")
        write = get_stream_writer()
        write({"city": city, "done": 0.5, "id": nonce()})
        write(f"{city} surveyed")
        return f"{city}: {nonce()}"

    @tool
    def census(city: str, runtime: ToolRuntime) -> str:
        """Count a city, streaming through the tool's runtime."""
        counter.hit("census")
        runtime.stream_writer({"zone": city, "id": nonce()})
        return f"{city}: {nonce()}"

    @tool
    def failing(city: str) -> str:
        """Survey a city that is not there."""
        counter.hit("failing")
        get_stream_writer()({"city": city, "warning": nonce()})
        raise LookupError(f"no such city: {city}")

    return [survey, census, failing]


def run(model: Any, tools: Sequence[BaseTool], question: str = "survey", *,
        use_async: bool = False) -> tuple[list[Any], list[Any]]:
    """The agent's messages and its custom stream (sorted: the tools run in parallel)."""
    app = build_graph(model, ToolNode(list(tools), handle_tool_errors=True), tools)
    state = {"messages": [HumanMessage(question)]}
    modes = ["custom", "values"]

    async def astream() -> list[Any]:
        return [part async for part in app.astream(state, stream_mode=modes)]

    parts = asyncio.run(astream()) if use_async else list(app.stream(state, stream_mode=modes))
    custom = [chunk for mode, chunk in parts if mode == "custom"]
    final = [chunk for mode, chunk in parts if mode == "values"][-1]
    return final["messages"], sorted(custom, key=repr)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_tools_stream_writes_are_written_again_in_replay(store: Store,
                                                           use_async: bool) -> None:
    with store.record(name="stream-writes", entropy=True) as rec, instrument(rec):
        live, written = run(ScriptedChatModel(plan=PLAN), writing_tools(Counter()),
                            use_async=use_async)
    assert rec.stats.internal_errors == 0
    assert len(written) == 4 and "no such city" in str(live)
    counter = Counter()
    with store.replay(rec.run_id) as player, instrument(player):
        again, rewritten = run(ReplayChatModel(player=player),
                               replay_tools(player, writing_tools(counter)),
                               use_async=use_async)
    assert counter.total == 0
    assert rewritten == written  # the failing tool's write too
    assert transcript(again) == transcript(live)


def test_writes_are_recorded_when_the_graph_is_not_streamed(store: Store) -> None:
    """Recorded from an `invoke` (no custom stream: LangGraph drops the writes), a replay
    streamed with `stream_mode="custom"` yields what the tools wrote."""
    with store.record(name="stream-writes", entropy=True) as rec, instrument(rec):
        app = build_graph(ScriptedChatModel(plan=PLAN),
                          ToolNode(writing_tools(Counter()), handle_tool_errors=True),
                          writing_tools(Counter()))
        app.invoke({"messages": [HumanMessage("survey")]})
    with store.replay(rec.run_id) as player, instrument(player):
        _, rewritten = run(ReplayChatModel(player=player),
                           replay_tools(player, writing_tools(Counter())))
    assert len(rewritten) == 4 and "Oslo surveyed" in rewritten


@pytest.mark.parametrize("reports", [
    pytest.param("custom events", marks=pytest.mark.skipif(sys.version_info < (3, 11), reason=(
        "Python 3.10's asyncio gives a task no context of its own: a tool run live inside "
        "the stand-in's async run sees no run to dispatch from unless it passes its config"))),
    "stream writes"])
def test_a_live_tool_in_a_fork_reports_and_is_recorded(store: Store, reports: str) -> None:
    """From a divergence on, the original tools run live (with no callbacks of the graph's):
    what they report reaches the caller once, and is recorded into the fork, which replays
    it."""
    plan, tools, reported = (EVENTS_PLAN, surveying_tools, run_reporting) \
        if reports == "custom events" else (PLAN, writing_tools, run)
    with store.record(name=reports, entropy=True) as rec, instrument(rec):
        reported(ScriptedChatModel(plan=plan), tools(Counter()))
    counter = Counter()
    with store.replay(rec.run_id, on_divergence="live") as player, instrument(player):
        forked, live = reported(ReplayChatModel(player=player,
                                                live=ScriptedChatModel(plan=plan)),
                                replay_tools(player, tools(counter)), "survey again")
        fork = player.fork
    assert fork is not None and counter.total == 3 and len(live) == 4
    with store.replay(fork.run_id) as player, instrument(player):
        again, replayed = reported(ReplayChatModel(player=player),
                                   replay_tools(player, tools(Counter())), "survey again")
    assert replayed == live
    assert transcript(again) == transcript(forked)


def test_noting_writers_leave_langgraphs_own_streaming_as_it_was(store: Store) -> None:
    """Once a recording handler exists, every `Runtime` hands out noting writers: a graph
    and its subgraph still stream into the custom stream as before, and what nodes write
    outside tool calls is not recorded (they run again in replay)."""
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        n: int

    def inner_node(state: State) -> State:
        get_stream_writer()({"inner": state["n"]})
        return {"n": state["n"] + 1}

    inner = StateGraph(State)
    inner.add_node("inner_node", inner_node)
    inner.add_edge(START, "inner_node")

    def outer_node(state: State) -> State:
        get_stream_writer()({"outer": state["n"]})
        return state

    outer = StateGraph(State)
    outer.add_node("outer_node", outer_node)
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "outer_node")
    outer.add_edge("outer_node", "sub")
    app = outer.compile()

    before = [chunk for _, chunk in app.stream({"n": 1}, stream_mode="custom", subgraphs=True)]
    with store.record(name="graph") as rec, instrument(rec):
        during = [chunk for _, chunk in app.stream({"n": 1}, stream_mode="custom",
                                                   subgraphs=True)]
    assert during == before == [{"outer": 1}, {"inner": 1}]
    assert store.load_steps(rec.run_id) == []


def test_what_the_store_cannot_hold_never_costs_the_tools_result(store: Store) -> None:
    """An event or a chunk holding a live object (a lock) is stored as its repr: the tool's
    result is recorded and replayed all the same."""
    import threading

    from langchain_core.callbacks import dispatch_custom_event

    @tool
    def survey(city: str) -> str:
        """Survey a city, reporting with a handle."""
        handle = threading.Lock()
        dispatch_custom_event("progress", {"city": city, "handle": handle})
        get_stream_writer()({"city": city, "handle": handle})
        return f"{city}: {nonce()}"

    plan: Plan = [[("survey", {"city": "Oslo"})]]
    with store.record(name="unstorable", entropy=True) as rec, instrument(rec):
        live, _ = run(ScriptedChatModel(plan=plan), [survey])
    assert rec.stats.unencodable == 0 and rec.stats.internal_errors == 0
    with store.replay(rec.run_id) as player, instrument(player):
        again, written = run(ReplayChatModel(player=player), replay_tools(player, [survey]))
    assert transcript(again) == transcript(live)
    assert [type(chunk) for chunk in written] == [str]  # the chunk's repr
