"""LangGraph flows beyond one invoke: a human-in-the-loop interrupt resumed by a second
invocation of the same thread (from a node, and from inside a tool), a compiled graph used as
a node of another, and a tool that writes the graph's state by returning a `Command`."""

from __future__ import annotations

import asyncio
import inspect
import logging
import operator
import os
from typing import Annotated, Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedStore, ToolNode
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, interrupt

from agentreplay_core import ReplayDivergence, Store
from agentreplay_langchain import (
    RecordingCallbackHandler,
    ReplayChatModel,
    instrument,
    replay_tool_call,
    replay_tools,
)
from tests.langchain.fakes import Counter, HashEmbeddings, ScriptedChatModel, make_tools
from tests.langchain.test_langgraph import build_graph


def approval_graph(model: Any, weather: BaseTool) -> Any:
    """Draft an answer, wait for a person's approval (an interrupt), then act on it."""
    def draft(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def approve(state: MessagesState) -> dict[str, Any]:
        verdict = interrupt({"draft": state["messages"][-1].content})
        return {"messages": [HumanMessage(f"approved: {verdict}")]}

    def act(state: MessagesState) -> dict[str, Any]:
        report = weather.invoke({"city": "Paris"})
        return {"messages": [model.invoke([*state["messages"], HumanMessage(str(report))])]}

    graph = StateGraph(MessagesState)
    for name, node in (("draft", draft), ("approve", approve), ("act", act)):
        graph.add_node(name, node)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "approve")
    graph.add_edge("approve", "act")
    graph.add_edge("act", END)
    return graph.compile(checkpointer=InMemorySaver())


def approve_session(model: Any, weather: BaseTool, answer: str = "yes") -> dict[str, Any]:
    app = approval_graph(model, weather)
    config: Any = {"configurable": {"thread_id": "ticket-1"}}
    paused = app.invoke({"messages": [HumanMessage("plan my trip")]}, config)
    [pending] = paused["__interrupt__"]
    done = app.invoke(Command(resume=answer), config)
    return {"asked": pending.value,
            "messages": [(m.type, m.content, m.id) for m in done["messages"]]}


def test_an_interrupted_thread_resumed_replays_both_invocations(store: Store) -> None:
    counter = Counter()
    [weather, *_] = make_tools(counter)
    # entropy: the ids LangGraph draws for the messages its nodes return replay too
    with store.record(name="approval", entropy=True) as rec, instrument(rec):
        live = approve_session(ScriptedChatModel(), weather)
    assert counter.counts == {"weather": 1}
    assert live["messages"][2][1] == "approved: yes"
    with store.replay(rec.run_id) as player, instrument(player):
        again = approve_session(ReplayChatModel(player=player),
                                replay_tools(player, [weather])[0])
    assert again == live
    assert counter.counts == {"weather": 1}

    # the person answers otherwise: the model is asked something the recording lacks
    with pytest.raises(ReplayDivergence) as caught, store.replay(rec.run_id) as player, \
            instrument(player):
        approve_session(ReplayChatModel(player=player), replay_tools(player, [weather])[0],
                        answer="no")
    assert caught.value.kind == "llm" and "approved: no" in str(caught.value)


def nested_graph(model: Any) -> Any:
    # the nodes pass their config on: Python 3.10's executors do not carry the context that
    # would give the model the graph's callbacks (astream_events' among them)
    def ask(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [model.invoke([*state["messages"], HumanMessage("go deeper")],
                                          config)]}

    inner = StateGraph(MessagesState)
    inner.add_node("ask", ask)
    inner.add_edge(START, "ask")
    inner.add_edge("ask", END)

    def plan(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"], config)]}

    outer = StateGraph(MessagesState)
    outer.add_node("plan", plan)
    outer.add_node("research", inner.compile())
    outer.add_edge(START, "plan")
    outer.add_edge("plan", "research")
    outer.add_edge("research", END)
    return outer.compile()


def streamed_updates(model: Any) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """What `stream(subgraphs=True)` shows: the namespace's node, the node, its messages."""
    shown = []
    for namespace, update in nested_graph(model).stream(
            {"messages": [HumanMessage("research replay tools")]}, subgraphs=True,
            stream_mode="updates"):
        for node, change in update.items():
            where = namespace[0].split(":")[0] if namespace else ""
            shown.append((where, node, [(m.content, m.id) for m in change["messages"]]))
    return shown


def test_a_subgraph_node_replays_its_own_calls(store: Store) -> None:
    with store.record(name="nested", entropy=True) as rec, instrument(rec):
        live = streamed_updates(ScriptedChatModel())
    # the inner graph's update, then the outer graph's for the node that ran it
    assert [(where, node) for where, node, _ in live] == [
        ("", "plan"), ("research", "ask"), ("", "research")]
    paths = [s.path for s in store.load_steps(rec.run_id) if s.kind == "llm"]
    assert len(paths) == 2 and "chain:research" in paths[1]
    with store.replay(rec.run_id) as player, instrument(player):
        again = streamed_updates(ReplayChatModel(player=player))
    assert again == live


async def graph_events(model: Any) -> list[tuple[str, str, Any]]:
    shown = []
    async for event in nested_graph(model).astream_events(
            {"messages": [HumanMessage("research replay tools")]}, version="v2"):
        chunk = event["data"].get("chunk")
        shown.append((event["event"], event["name"], getattr(chunk, "content", None)))
    return shown


def test_graph_events_replay_one_for_one_under_the_live_model_name(store: Store) -> None:
    with store.record(name="events", entropy=True) as rec, instrument(rec):
        live = asyncio.run(graph_events(ScriptedChatModel()))
    # both models' events (with their tokens where langchain-core streams an invoke that
    # astream_events watches: from 1.0)
    assert [name for event, name, _ in live if event == "on_chat_model_end"] == \
        ["ScriptedChatModel"] * 2
    with store.replay(rec.run_id) as player, instrument(player):
        # named as the live model: events filtered by name see it as they did live
        again = asyncio.run(graph_events(ReplayChatModel(player=player,
                                                         name="ScriptedChatModel")))
    assert again == live


class NotesState(MessagesState):
    """The agent's messages and the notes its tool writes (by returning a `Command`)."""

    notes: Annotated[list[str], operator.add]


@tool
def remember(topic: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
    """Keep a note on the topic in the graph's state."""
    note = f"{topic}:{os.urandom(4).hex()}"  # the tool's own, unrepeatable result
    return Command(update={"notes": [note], "messages": [
        ToolMessage(f"noted {topic}", tool_call_id=tool_call_id)]})


def test_a_tool_that_updates_the_graph_state_by_command_replays_it(store: Store) -> None:
    model = ScriptedChatModel(plan=[[("remember", {"topic": "cats"}),
                                     ("remember", {"topic": "dogs"})]])
    ask = {"messages": [HumanMessage("take notes")], "notes": []}
    with store.record(name="command") as rec:
        live = build_graph(model, ToolNode([remember]), [remember], state=NotesState).invoke(
            ask, {"callbacks": [RecordingCallbackHandler(rec)]})
    assert sorted(n.split(":")[0] for n in live["notes"]) == ["cats", "dogs"]
    with store.replay(rec.run_id) as player, instrument(player):
        again = build_graph(ReplayChatModel(player=player),
                            ToolNode(replay_tools(player, [remember])), [remember],
                            state=NotesState).invoke(ask)
    assert again["notes"] == live["notes"]  # the recorded notes, not new ones
    assert [m.content for m in again["messages"]] == [m.content for m in live["messages"]]


asked_for: list[str] = []


@tool
def transfer(account: str) -> str:
    """Transfer money once a person approves."""
    asked_for.append(account)
    answer = interrupt({"question": f"Transfer to {account}?"})  # pauses the graph
    return f"{account}: {answer} ({os.urandom(4).hex()})"


def approved_transfer(model: Any, node: ToolNode, answer: str = "yes") -> dict[str, Any]:
    """A tool asks a person (`interrupt` inside the tool); the program resumes the thread
    with the answer, and the tool runs again to use it."""
    app = build_graph(model, node, [transfer], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "payment-1"}}
    paused = app.invoke({"messages": [HumanMessage("pay the rent")]}, config)
    # (not the interrupts' ids: LangGraph derives them from its checkpoint ids, drawn from the
    # clock; a program resuming by id reads them from the result, in replay as live)
    asked = [i.value for i in paused.get("__interrupt__", [])]
    done = app.invoke(Command(resume=answer), config)
    return {"asked": asked, "messages": [(m.type, m.content) for m in done["messages"]]}


WRAPS = "wrap_tool_call" in inspect.signature(ToolNode).parameters  # a later langgraph 1.x


SEAMS = pytest.mark.parametrize("seam", ["replay_tools", pytest.param(
    "replay_tool_call", marks=(pytest.mark.skipif(
        not WRAPS, reason="ToolNode(wrap_tool_call=) arrived in langgraph 1.x")))])


def replay_node(player: Any, seam: str) -> ToolNode:
    """The tool node of a replay, with the stand-ins put in by `seam`."""
    return ToolNode(replay_tools(player, [transfer])) if seam == "replay_tools" \
        else ToolNode([transfer], wrap_tool_call=replay_tool_call(player))


@SEAMS
def test_a_tool_that_interrupts_pauses_the_replay_where_it_paused(store: Store,
                                                                  seam: str) -> None:
    model = ScriptedChatModel(plan=[[("transfer", {"account": "ACME"})]])
    with store.record(name="tool-interrupt") as rec, instrument(rec):
        live = approved_transfer(model, ToolNode([transfer]))
    assert live["asked"] == [{"question": "Transfer to ACME?"}]
    assert asked_for == ["ACME", "ACME"]  # paused, then run again on resume
    asked_for.clear()
    with store.replay(rec.run_id) as player, instrument(player):
        again = approved_transfer(ReplayChatModel(player=player), replay_node(player, seam))
    # the same pause, then the recorded answer, with the tool run neither time
    assert again == live and asked_for == []


@SEAMS
def test_a_replay_resumed_with_another_answer_diverges_at_the_tool(store: Store,
                                                                  seam: str) -> None:
    """The resumed call is served, not run, so the answer the program resumes with must be
    the recorded one: another answer is a divergence at the tool (and, with the replay going
    live, the tool runs and reads the new answer)."""
    model = ScriptedChatModel(plan=[[("transfer", {"account": "ACME"})]])
    with store.record(name="tool-interrupt-answer") as rec, instrument(rec):
        live = approved_transfer(model, ToolNode([transfer]))
    asked_for.clear()
    with pytest.raises(ReplayDivergence) as caught, store.replay(rec.run_id) as player, \
            instrument(player):
        approved_transfer(ReplayChatModel(player=player), replay_node(player, seam),
                          answer="no")
    # the first divergence (langgraph 0.6's ToolNode turns it into an error message by
    # default: the model's next call diverges then, and names this one as its cause)
    error = player.diverged
    assert error is not None and error in (caught.value, caught.value.__cause__)
    assert (error.classification, error.kind, error.name) == ("tool_args_changed", "tool",
                                                              "transfer")
    assert (error.expected["resume"], error.actual["resume"]) == (["yes"], ["no"])
    assert "resume" in error.diff and asked_for == []
    with store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player, \
            instrument(player):
        forked = approved_transfer(ReplayChatModel(player=player, live=ScriptedChatModel()),
                                   replay_node(player, seam), answer="no")
    assert forked["asked"] == live["asked"] and asked_for == ["ACME"]  # resumed: ran, live
    [result] = [content for kind, content in forked["messages"] if kind == "tool"]
    assert str(result).startswith("ACME: no (")


saved: list[str] = []


@tool
def save_memory(fact: str, memory: Annotated[Any, InjectedStore()]) -> str:
    """Save a fact about the user to long-term memory."""
    saved.append(fact)
    memory.put(("memories", "u1"), f"fact-{os.urandom(3).hex()}", {"fact": fact})
    memory.delete(("memories", "u1"), "outdated")
    return "saved"


def remembering_graph(model: Any, node: ToolNode, memory: InMemoryStore) -> Any:
    """The agent's prompt lists what the store remembers (a long-term memory)."""
    def listed() -> str:
        return f"memories: {sorted(i.value['fact'] for i in memory.search(('memories', 'u1')))}"
    return build_graph(model, node, [save_memory], store=memory, system=listed)


def remembered(model: Any, node: ToolNode, *, asynchronous: bool = False,
               likes: str = "tea", index: Any = None) -> dict[str, Any]:
    memory = InMemoryStore(index=index)
    memory.put(("memories", "u1"), "outdated", {"fact": "likes coffee"})
    app = remembering_graph(model, node, memory)
    question = {"messages": [HumanMessage(f"remember that I like {likes}")]}
    done = asyncio.run(app.ainvoke(question)) if asynchronous else app.invoke(question)
    return {"messages": [(m.type, m.content) for m in done["messages"]],
            "memory": sorted((i.key.startswith("fact-"), i.value["fact"])
                             for i in memory.search(("memories", "u1")))}


@SEAMS
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_what_a_tool_writes_to_the_store_is_written_again_in_replay(
        store: Store, seam: str, asynchronous: bool) -> None:
    """A tool that saves to the graph's store (InjectedStore) is served in replay, not run:
    its writes, recorded with it, are written again, so the next prompt that lists the
    memories replays, and the store ends as it did live."""
    model = ScriptedChatModel(plan=[[("save_memory", {"fact": "likes tea"})]])
    with store.record(name="memory-writes") as rec, instrument(rec):
        live = remembered(model, ToolNode([save_memory]), asynchronous=asynchronous)
    assert live["memory"] == [(True, "likes tea")] and saved == ["likes tea"]
    saved.clear()
    with store.replay(rec.run_id) as player, instrument(player):
        node = ToolNode(replay_tools(player, [save_memory])) if seam == "replay_tools" \
            else ToolNode([save_memory], wrap_tool_call=replay_tool_call(player))
        again = remembered(ReplayChatModel(player=player), node, asynchronous=asynchronous)
    assert again == live and saved == []


def test_a_tool_gone_live_records_its_store_writes_into_the_fork(store: Store) -> None:
    with store.record(name="memory-writes-fork") as rec, instrument(rec):
        remembered(ScriptedChatModel(plan=[[("save_memory", {"fact": "likes tea"})]]),
                   ToolNode([save_memory]))
    saved.clear()
    live_model = ScriptedChatModel(plan=[[("save_memory", {"fact": "likes rain"})]])
    with store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player, \
            instrument(player):
        forked = remembered(ReplayChatModel(player=player, live=live_model),
                            ToolNode(replay_tools(player, [save_memory])), likes="rain")
        fork = player.fork
    assert fork is not None and saved == ["likes rain"]  # ran live, once
    assert forked["memory"] == [(True, "likes rain")]
    [step] = [s for s in store.load_steps(fork.run_id) if s.kind == "tool"]
    assert [(w[0], w[2]) for w in step.output["store_writes"]] == [
        (["memories", "u1"], {"fact": "likes rain"}), (["memories", "u1"], None)]


def test_writes_to_a_store_that_embeds_them_are_not_written_again(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """A store with an embedding index embeds what is written: writing again in replay would
    call the embedding model, so the replay says it does not, and the memories differ."""
    index = {"dims": 8, "embed": HashEmbeddings(size=8)}
    model = ScriptedChatModel(plan=[[("save_memory", {"fact": "likes tea"})]])
    with store.record(name="indexed-memory") as rec, instrument(rec):
        remembered(model, ToolNode([save_memory]), index=index)
    with pytest.raises(ReplayDivergence) as caught, store.replay(rec.run_id) as player, \
            instrument(player), caplog.at_level(logging.WARNING, "agentreplay.langchain"):
        remembered(ReplayChatModel(player=player),
                   ToolNode(replay_tools(player, [save_memory])), index=index)
    assert "store embeds what is written" in caplog.text
    assert caught.value.classification == "prompt_changed" and "likes tea" in caught.value.diff
