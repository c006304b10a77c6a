"""Concurrent branches replay their own results whatever the scheduling order in replay."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda, RunnableParallel
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from agentreplay_core import Store
from agentreplay_langchain import (
    RecordingCallbackHandler,
    ReplayChatModel,
    instrument,
    replay_tool_call,
    replay_tools,
)
from agentreplay_langchain._compat import LANGCHAIN_CORE_VERSION
from tests.langchain.fakes import Counter, ScriptedChatModel, make_tools, transcript

PROMPTS = [f"question number {i}" for i in range(8)]


def test_batch_of_eight_prompts_replays_each_answer_in_any_order(store: Store) -> None:
    with store.record(name="batch") as rec:
        live = ScriptedChatModel().batch(
            list[Any](PROMPTS), config={"callbacks": [RecordingCallbackHandler(rec)],
                             "max_concurrency": 8})
    with store.replay(rec.run_id) as player:
        model = ReplayChatModel(player=player)
        replayed = model.batch(list(reversed(PROMPTS)), config={"max_concurrency": 8})
    assert [m.content for m in reversed(replayed)] == [m.content for m in live]
    assert [m.id for m in reversed(replayed)] == [m.id for m in live]


class Jitter(BaseCallbackHandler):
    """A user's handler that takes a random while at each model and tool start, so the
    threads of a batch or of parallel tool calls reach their runs in a different order on
    every run."""

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(int.from_bytes(os.urandom(1), "big") / 25_500)  # up to 10 ms

    def on_tool_start(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(int.from_bytes(os.urandom(1), "big") / 25_500)


def _contents(replies: Sequence[Any]) -> list[str]:
    return [str(m.content) for m in replies]


@pytest.mark.parametrize("attach", ["handler", "instrument"])
@pytest.mark.parametrize("api", ["batch", "abatch"])
def test_a_batch_of_equal_prompts_replays_each_answer_at_its_index(
        store: Store, attach: str, api: str) -> None:
    # sampling several answers to one prompt: the answers differ, the requests do not
    def run(model: Any, recorder: Any = None) -> list[str]:
        handlers: list[Any] = [Jitter()]
        if attach == "handler" and recorder is not None:
            handlers.insert(0, RecordingCallbackHandler(recorder))
        config: Any = {"callbacks": handlers, "max_concurrency": 4}
        with instrument(recorder) if attach == "instrument" else contextlib.nullcontext():
            if api == "abatch":
                return _contents(asyncio.run(model.abatch(["the same"] * 4, config=config)))
            return _contents(model.batch(["the same"] * 4, config=config))

    for _ in range(3):  # each run a new thread order
        with store.record(name="samples") as rec:
            live = run(ScriptedChatModel(), rec)
        assert len(set(live)) == 4
        with store.replay(rec.run_id) as player:
            replayed = run(ReplayChatModel(player=player),
                           player if attach == "instrument" else None)
        assert replayed == live


def test_batches_agentreplay_does_not_track_keep_their_tags(store: Store) -> None:
    seen: list[list[str]] = []

    class Tags(BaseCallbackHandler):
        def on_chat_model_start(self, *args: Any, tags: Any = None, **kwargs: Any) -> None:
            seen.append(sorted(tags or []))

    ScriptedChatModel().batch(["a", "b"], config={"callbacks": [Tags()], "tags": ["mine"]})
    assert seen == [["mine"], ["mine"]]
    seen.clear()
    with store.record(name="tagged") as rec:
        ScriptedChatModel().batch(["a", "b"], config={
            "callbacks": [Tags(), RecordingCallbackHandler(rec)], "tags": ["mine"]})
    assert sorted(seen) == [["batch:index:0", "mine"], ["batch:index:1", "mine"]]


def _delayed(branch: str, slow: str) -> RunnableLambda[Any, Any]:
    def wait(value: Any) -> Any:
        if branch == slow:
            time.sleep(0.3)
        return value
    return RunnableLambda(wait, name=f"wait_{branch}")


def parallel(model: Any, slow: str) -> RunnableParallel[Any]:
    """Two branches asking the same model the same question: only their position differs."""
    return RunnableParallel(a=_delayed("a", slow) | model, b=_delayed("b", slow) | model)


def test_identical_calls_in_parallel_branches_get_their_own_answers(store: Store) -> None:
    with store.record(name="parallel") as rec:
        live = parallel(ScriptedChatModel(), slow="a").invoke(
            "same question", config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert live["a"].content != live["b"].content
    # in replay the other branch is the slow one: its model call now comes first
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = parallel(ReplayChatModel(player=player), slow="b").invoke("same question")
    assert replayed["a"].content == live["a"].content
    assert replayed["b"].content == live["b"].content


def tool_graph(tools: Sequence[BaseTool], wrap: Any = None) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode(tools, wrap_tool_call=wrap) if wrap else ToolNode(tools))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2])


@pytest.mark.skipif(_version(LANGCHAIN_CORE_VERSION) < (1, 2),
                    reason="on_tool_start gets the tool_call_id from langchain-core 1.2 on")
def test_parallel_identical_tool_calls_get_their_own_results(store: Store) -> None:
    tools = make_tools(Counter())
    calls = [{"name": "weather", "args": {"city": "Paris"}, "id": f"call_{i}", "type": "tool_call"}
             for i in range(4)]

    def state() -> MessagesState:  # fresh messages each run: LangGraph writes ids into them
        return {"messages": [HumanMessage("hi"), AIMessage("", tool_calls=calls)]}

    with store.record(name="toolnode", entropy=True) as rec:
        live = tool_graph(tools).invoke(state(),
                                        config={"callbacks": [RecordingCallbackHandler(rec)]})
    results = [m.content for m in live["messages"] if m.type == "tool"]
    assert len(set(results)) == 4  # four different random results for the same call
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = tool_graph(replay_tools(player, make_tools(Counter()))).invoke(state())
    assert transcript(replayed["messages"]) == transcript(live["messages"])


@pytest.mark.skipif(_version(LANGCHAIN_CORE_VERSION) < (1, 2),
                    reason="on_tool_start gets the tool_call_id from langchain-core 1.2 on")
@pytest.mark.parametrize("backend", ["replay_tools", "wrap_tool_call"])
def test_identical_tool_calls_keep_their_results_untracked(store: Store, backend: str) -> None:
    """Without `instrument(player)` the replayed model still gives each call the id it had,
    and the replay tools find each call's recorded result by it, whatever thread comes
    first."""
    calls = [{"name": "weather", "args": {"city": "Paris"}, "id": f"call_{i}", "type": "tool_call"}
             for i in range(4)]

    def results(graph: Any, config: Any = None) -> dict[str, str]:
        state = {"messages": [HumanMessage("hi"), AIMessage("", tool_calls=calls)]}
        out = graph.invoke(state, config=config)
        return {m.tool_call_id: str(m.content) for m in out["messages"] if m.type == "tool"}

    with store.record(name="toolnode-untracked") as rec:
        live = results(tool_graph(make_tools(Counter())),
                       {"callbacks": [RecordingCallbackHandler(rec)]})
    assert len(set(live.values())) == 4
    for _ in range(5):  # each replay a new thread order
        with store.replay(rec.run_id) as player:
            if backend == "replay_tools":
                graph = tool_graph(replay_tools(player, make_tools(Counter())))
            else:
                graph = tool_graph(make_tools(Counter()), replay_tool_call(player))
            assert results(graph, {"callbacks": [Jitter()], "max_concurrency": 4}) == live

