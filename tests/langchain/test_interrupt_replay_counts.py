"""A served tool call takes its place among its LangGraph task's `interrupt` calls.

LangGraph numbers the `interrupt` calls of a task and hands the answers out by number. The
replay of a tool that asked a person never runs the tool, so its stand-in makes the calls the
tool made: a tool asking two questions pauses at both, parallel calls of one `ToolNode` task
each get their own answer, and a node that asks its own question after a tool asked one
pauses for it in replay as live. The pause shows the recorded value, in the tool's key order,
with its `response_schema`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from agentreplay_core import Store
from agentreplay_langchain import (
    ReplayChatModel,
    instrument,
    replay_tool_call,
    replay_tools,
)
from tests.langchain.fakes import Plan, ScriptedChatModel
from tests.langchain.test_langgraph import build_graph

ran: list[str] = []


@tool
def book(city: str) -> str:
    """Book a hotel once a person approved it and gave a budget."""
    ran.append(city)
    approved = interrupt({"approve": city})
    budget = interrupt({"budget": city})
    return f"{city}: {approved}/{budget} #{os.urandom(4).hex()}"


@tool
def reserve(city: str) -> str:
    """Reserve a table once a person approved it."""
    ran.append(city)
    return f"{city}: {interrupt({'approve': city})} #{os.urandom(4).hex()}"


def transcript(messages: list[BaseMessage]) -> list[tuple[str, Any, Any]]:
    return [(m.type, m.content, m.id) for m in messages]


def answered(app: Any, first: Any, answer: Any) -> tuple[list[list[Any]], list[Any]]:
    """Invoke, then resume while the graph pauses, with `answer(pending interrupts)`."""
    config: Any = {"configurable": {"thread_id": "t1"}}
    state = app.invoke(first, config)
    asked: list[list[Any]] = []
    while state.get("__interrupt__") and len(asked) < 5:
        pending = state["__interrupt__"]
        asked.append(sorted((p.value for p in pending), key=repr))
        state = app.invoke(Command(resume=answer(pending)), config)
    return asked, transcript(state["messages"])


def tool_node(player: Any, seam: str, tools: list[BaseTool]) -> ToolNode:
    return ToolNode(replay_tools(player, tools)) if seam == "replay_tools" \
        else ToolNode(tools, wrap_tool_call=replay_tool_call(player))


WRAPS = "wrap_tool_call" in inspect.signature(ToolNode).parameters  # a later langgraph 1.x
SEAMS = pytest.mark.parametrize("seam", ["replay_tools", pytest.param(
    "replay_tool_call", marks=pytest.mark.skipif(
        not WRAPS, reason="ToolNode(wrap_tool_call=) arrived in langgraph 1.x"))])


@SEAMS
def test_a_tool_asking_two_questions_pauses_at_both(store: Store, seam: str) -> None:
    plan: Plan = [[("book", {"city": "Paris"})]]
    answers = iter(["yes", "500", "never asked"])

    def session(model: Any, node: ToolNode) -> Any:
        app = build_graph(model, node, [book], checkpointer=InMemorySaver())
        return answered(app, {"messages": [HumanMessage("book Paris", id="h")]},
                        lambda pending: next(answers))

    with store.record(name="two-questions", entropy=True) as rec, instrument(rec):
        live = session(ScriptedChatModel(plan=plan), ToolNode([book]))
    assert live[0] == [[{"approve": "Paris"}], [{"budget": "Paris"}]]
    assert "Paris: yes/500 #" in str(live[1])
    ran.clear()
    answers = iter(["yes", "500", "never asked"])
    with store.replay(rec.run_id) as player, instrument(player):
        again = session(ReplayChatModel(player=player), tool_node(player, seam, [book]))
    assert again == live and ran == []


def test_parallel_calls_in_one_task_each_get_their_answer(store: Store) -> None:
    """Two calls of one `ToolNode` task ask a question each: they share the task's
    numbering, and the program answers them by interrupt id."""
    plan: Plan = [[("reserve", {"city": "Paris"}), ("reserve", {"city": "Rome"})]]

    def session(model: Any, node: ToolNode) -> Any:
        app = build_graph(model, node, [reserve], checkpointer=InMemorySaver())
        return answered(app, {"messages": [HumanMessage("dinner", id="h")]},
                        lambda pending: {p.id: f"yes-{p.value['approve']}" for p in pending})

    with store.record(name="parallel-questions", entropy=True) as rec, instrument(rec):
        live = session(ScriptedChatModel(plan=plan), ToolNode([reserve]))
    # (which call takes the first answer is up to the threads: the replay does as live did)
    results = [content for kind, content, _ in live[1] if kind == "tool"]
    assert len(live[0]) == 2 and [r.split(": yes-")[0] for r in results] == ["Paris", "Rome"]
    ran.clear()
    with store.replay(rec.run_id) as player, instrument(player):
        again = session(ReplayChatModel(player=player),
                        tool_node(player, "replay_tool_call" if WRAPS else "replay_tools",
                                  [reserve]))
    assert again == live and ran == []


def test_a_node_asking_after_a_served_tool_asked_pauses_again(store: Store) -> None:
    """The node's own question comes after the tool's in its task: served, the tool still
    takes the first answer, and the node pauses for the second, as live."""
    def graph(charge: BaseTool) -> Any:
        def pay(state: MessagesState) -> dict[str, Any]:
            receipt = charge.invoke({"city": "Paris"})
            email = interrupt({"send_receipt_to": "?"})
            return {"messages": [AIMessage(f"{receipt}; receipt to {email}", id="done")]}
        builder = StateGraph(MessagesState)
        builder.add_node("pay", pay)
        builder.add_edge(START, "pay")
        builder.add_edge("pay", END)
        return builder.compile(checkpointer=InMemorySaver())

    def session(charge: BaseTool) -> Any:
        answers = iter(["yes", "me@example.org", "never asked"])
        return answered(graph(charge), {"messages": [HumanMessage("pay", id="h")]},
                        lambda pending: next(answers))

    with store.record(name="node-after-tool", entropy=True) as rec, instrument(rec):
        live = session(reserve)
    assert live[0] == [[{"approve": "Paris"}], [{"send_receipt_to": "?"}]]
    ran.clear()
    with store.replay(rec.run_id) as player, instrument(player):
        again = session(replay_tools(player, [reserve])[0])
    assert again == live and ran == []


agents = pytest.importorskip("langchain.agents", reason="create_agent is langchain 1.x")
from agentreplay_langchain import ReplayMiddleware  # noqa: E402  (needs langchain 1.x)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_agent_tool_asking_two_questions_replays(store: Store, asynchronous: bool) -> None:
    plan: Plan = [[("book", {"city": "Paris"})]]

    async def session(*middleware: Any) -> Any:
        agent = agents.create_agent(ScriptedChatModel(plan=plan), [book],
                                    middleware=list(middleware), checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t1"}}

        async def call(given: Any) -> Any:
            return await agent.ainvoke(given, config) if asynchronous else \
                agent.invoke(given, config)
        state = await call({"messages": [HumanMessage("book", id="h")]})
        asked: list[list[Any]] = []
        while state.get("__interrupt__") and len(asked) < 5:
            pending = state["__interrupt__"]
            asked.append([p.value for p in pending])
            state = await call(Command(resume={p.id: repr(p.value) for p in pending}))
        return asked, transcript(state["messages"])

    with store.record(name="agent-two-questions", entropy=True) as rec, instrument(rec):
        live = asyncio.run(session())
    assert live[0] == [[{"approve": "Paris"}], [{"budget": "Paris"}]]
    ran.clear()
    with store.replay(rec.run_id) as player, instrument(player):
        again = asyncio.run(session(ReplayMiddleware(player)))
    assert again == live and ran == []


SCHEMA = {"type": "object", "required": ["approved"],
          "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}}}
takes_schema = "response_schema" in inspect.signature(interrupt).parameters


@tool
def approve(city: str) -> str:
    """Ask a person to approve a booking, with a form and a question in the tool's order."""
    question = {"question": f"Book {city}?", "options": ["yes", "no"], "city": city,
                "action": {"type": "book", "amount": 120}}
    answer = interrupt(question, response_schema=SCHEMA) if takes_schema \
        else interrupt(question)
    return f"{city}: {answer} #{os.urandom(4).hex()}"


def shown_pause(store: Store) -> tuple[Any, Any]:
    """How the pause of `approve` shows, live and in replay: its value as JSON (in its key
    order), its `response_schema` (langgraph 1.2), and the conversation after it."""
    plan: Plan = [[("approve", {"city": "Paris"})]]

    def session(*middleware: Any) -> Any:
        agent = agents.create_agent(ScriptedChatModel(plan=plan), [approve],
                                    middleware=list(middleware), checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t1"}}
        [pause] = agent.invoke({"messages": [HumanMessage("book", id="h")]},
                               config)["__interrupt__"]
        shown = (json.dumps(pause.value), getattr(pause, "response_schema", None))
        done = agent.invoke(Command(resume={"approved": True}), config)
        return shown, transcript(done["messages"])

    with store.record(name="pause-shown", entropy=True) as rec, instrument(rec):
        live = session()
    with store.replay(rec.run_id) as player, instrument(player):
        again = session(ReplayMiddleware(player))
    return live, again


def test_a_replayed_pause_keeps_the_key_order_of_its_value(store: Store) -> None:
    """A UI shows the fields of the question in the order the tool gave them."""
    live, again = shown_pause(store)
    assert live[0][0].startswith('{"question": "Book Paris?", "options"')
    assert again[0][0] == live[0][0] and again[1] == live[1]


@pytest.mark.skipif(not takes_schema, reason="interrupt(response_schema=) is langgraph 1.2")
def test_a_replayed_pause_has_the_response_schema_it_was_asked_with(store: Store) -> None:
    """The form the person fills in, its fields in order too."""
    live, again = shown_pause(store)
    assert live[0][1] == SCHEMA
    assert json.dumps(again[0][1]) == json.dumps(SCHEMA) and again == live
