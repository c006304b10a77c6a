"""Divergence: a replayed agent that no longer does what was recorded fails loudly, at the
right step, with the right classification and a message a person can act on, and never goes
live."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from uuid import UUID

import pytest
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, Tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agentreplay_core import NetworkAccessDuringReplay, ReplayDivergence, Store
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel, replay_tools
from tests.langchain.fakes import (
    Counter,
    Plan,
    ScriptedChatModel,
    make_tools,
    network_attempts,
    transcript,
)

PLAN: Plan = [[("weather", {"city": "Paris"}), ("search", {"query": "louvre hours"})],
        [("add", {"a": 2.5, "b": 0.1})]]
QUESTION = "plan my day"
Args = Callable[[str, dict[str, Any]], dict[str, Any]]


def agent(model: Any, tools: Sequence[BaseTool], question: str = QUESTION, *, turns: int = 5,
          args_of: Args = lambda name, args: args,
          config: RunnableConfig | None = None) -> list[BaseMessage]:
    """A hand-written tool loop; `turns` and `args_of` are the edits a later version makes."""
    by_name = {t.name: t for t in tools}
    bound = model.bind_tools(tools)
    messages: list[BaseMessage] = [HumanMessage(question)]
    for _ in range(turns):
        reply = bound.invoke(messages, config=config)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            call = {**call, "args": args_of(call["name"], call["args"])}
            messages.append(by_name[call["name"]].invoke(call, config=config))
    return messages


@pytest.fixture
def recorded(store: Store) -> UUID:
    with store.record(name="divergence") as rec:
        agent(ScriptedChatModel(plan=PLAN), make_tools(Counter()),
              config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0
    # the step numbers the tests below expect: models and tools in the order they returned
    steps = [(s.step, s.kind, s.name) for s in store.load_steps(rec.run_id)]
    assert steps == [(1, "llm", "chat_model"), (2, "tool", "weather"), (3, "tool", "search"),
                     (4, "llm", "chat_model"), (5, "tool", "add"), (6, "llm", "chat_model")]
    return rec.run_id


@pytest.fixture
def offline() -> Iterator[list[tuple[str, str]]]:
    """Fails the test if anything in it touched a socket from Python."""
    with network_attempts() as attempts:
        yield attempts
    assert attempts == []


def replay_agent(store: Store, run_id: UUID, tools: Sequence[BaseTool] | None = None,
                 **edits: Any) -> ReplayDivergence:
    counter = Counter()
    with pytest.raises(ReplayDivergence) as caught, store.replay(run_id) as player:
        try:
            agent(ReplayChatModel(player=player),
                  replay_tools(player, tools or make_tools(counter)), **edits)
        except ReplayDivergence:
            # still inside the replay: the guard is on, so nothing could have gone out
            with pytest.raises(NetworkAccessDuringReplay):
                socket.create_connection(("203.0.113.9", 443), timeout=1)
            raise
    assert counter.total == 0
    return caught.value


def test_changed_prompt(store: Store, recorded: UUID, offline: list[Any]) -> None:
    error = replay_agent(store, recorded, question="plan my night")
    assert (error.classification, error.run_id, error.step) == ("prompt_changed", recorded, 1)
    assert (error.kind, error.name) == ("llm", "chat_model")
    assert error.expected["messages"][0]["content"] == "plan my day"
    assert error.actual["messages"][0]["content"] == "plan my night"
    text = str(error)
    assert f"run {recorded}, step 1" in text
    assert "prompt_changed" in text
    assert "messages[0].content: 'plan my day' -> 'plan my night'" in text


def _weather(description: str, with_unit: bool) -> BaseTool:
    def weather(city: str) -> str:
        raise AssertionError("a replayed tool never runs")

    def weather_in(city: str, unit: str = "C") -> str:
        raise AssertionError("a replayed tool never runs")

    return StructuredTool.from_function(weather_in if with_unit else weather, name="weather",
                                        description=description)


@pytest.mark.parametrize(("tool", "where", "shown"), [
    (_weather("The weather in a city, in Kelvin.", with_unit=False), "tools[0].description",
     "'The weather in a city.' -> 'The weather in a city, in Kelvin.'"),
    (_weather("The weather in a city.", with_unit=True),
     "+ tools[0].parameters.properties.unit", "'default': 'C'"),
], ids=["description", "argument"])
def test_changed_tool_schema(store: Store, recorded: UUID, offline: list[Any], tool: BaseTool,
                             where: str, shown: str) -> None:
    tools = [tool, *make_tools(Counter())[1:]]
    error = replay_agent(store, recorded, tools)
    assert (error.classification, error.run_id, error.step) == ("params_changed", recorded, 1)
    text = str(error)
    assert "params_changed" in text and where in text and shown in text
    assert "messages" not in error.diff  # the prompt itself is the same


def test_changed_tool_arguments(store: Store, recorded: UUID, offline: list[Any]) -> None:
    def shout(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {k: v.upper() if isinstance(v, str) else v for k, v in args.items()}

    error = replay_agent(store, recorded, args_of=shout)
    assert (error.classification, error.run_id, error.step) == ("tool_args_changed", recorded, 2)
    assert (error.kind, error.name) == ("tool", "weather")
    text = str(error)
    assert "tool 'weather'" in text
    assert "input.city: 'Paris' -> 'PARIS'" in text


@pytest.mark.parametrize("extra", ["tool", "model"])
def test_extra_call(store: Store, recorded: UUID, offline: list[Any], extra: str) -> None:
    with pytest.raises(ReplayDivergence) as caught, store.replay(recorded) as player:
        model = ReplayChatModel(player=player)
        tools = replay_tools(player, make_tools(Counter()))
        messages = agent(model, tools)
        assert player.unconsumed() == []
        if extra == "tool":  # a later version also checks the weather at the end
            tools[0].invoke({"city": "Paris"})
        else:  # ... or asks the model once more
            model.invoke([*messages, HumanMessage("and tomorrow?")])
    error = caught.value
    assert (error.classification, error.run_id, error.step) == ("unexpected_call", recorded, None)
    kind, name, count = ("tool", "weather", 1) if extra == "tool" else ("llm", "chat_model", 3)
    assert (error.kind, error.name) == (kind, name)
    calls = "call was" if count == 1 else "calls were"
    assert f"all {count} recorded {kind} {name!r} {calls} already replayed" in str(error)


def test_missing_call_when_the_agent_stops_early(store: Store, recorded: UUID,
                                                 offline: list[Any]) -> None:
    with pytest.raises(ReplayDivergence) as caught, store.replay(recorded) as player:
        agent(ReplayChatModel(player=player), replay_tools(player, make_tools(Counter())),
              turns=1)
    error = caught.value
    assert (error.classification, error.run_id, error.step) == ("missing_call", recorded, 4)
    text = str(error)
    assert "3 recorded steps were never replayed" in text
    assert "4 (llm 'chat_model'), 5 (tool 'add'), 6 (llm 'chat_model')" in text
    assert "allow_unused=True" in text


def test_allow_unused_accepts_an_early_stop(store: Store, recorded: UUID) -> None:
    with store.replay(recorded, allow_unused=True) as player:
        agent(ReplayChatModel(player=player), replay_tools(player, make_tools(Counter())),
              turns=1)
    assert [s.step for s in player.unconsumed()] == [4, 5, 6]


def test_divergence_propagates_out_of_a_langgraph_graph(store: Store, offline: list[Any]
                                                        ) -> None:
    def build(model: Any, tools: Sequence[BaseTool]) -> Any:
        bound = model.bind_tools(tools)
        graph = StateGraph(MessagesState)
        graph.add_node("agent", lambda state: {"messages": [bound.invoke(state["messages"])]})
        graph.add_node("tools", ToolNode(tools))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        return graph.compile()

    with store.record(name="graph", entropy=True) as rec:
        build(ScriptedChatModel(plan=PLAN), make_tools(Counter())).invoke(
            {"messages": [HumanMessage(QUESTION)]},
            config={"callbacks": [RecordingCallbackHandler(rec)]})
    with pytest.raises(ReplayDivergence) as caught, store.replay(rec.run_id) as player:
        app = build(ReplayChatModel(player=player), replay_tools(player, make_tools(Counter())))
        app.invoke({"messages": [HumanMessage("plan my week")]})
    error = caught.value
    assert (error.classification, error.run_id) == ("prompt_changed", rec.run_id)
    first_model_step = next(s.step for s in store.load_steps(rec.run_id) if s.kind == "llm")
    assert error.step == first_model_step
    assert "messages[0].content: 'plan my day' -> 'plan my week'" in str(error)


def test_replay_model_holds_no_live_model(store: Store, recorded: UUID) -> None:
    # built without `live=` (which only `on_divergence="live"` uses), it has nothing to fall
    # back on: whatever the recording does not hold can only raise
    with store.replay(recorded, allow_unused=True) as player:
        model = ReplayChatModel(player=player)
        held = [getattr(model, name) for name in type(model).model_fields]
    assert not any(isinstance(value, (BaseLanguageModel, Runnable)) for value in held)


class Lookup(BaseTool):
    """A tool class whose schema LangChain infers from `_run`, without args_schema."""

    name: str = "lookup"
    description: str = "Look a word up."
    counter: Counter

    def _run(self, word: str, lang: str = "en") -> str:
        self.counter.hit("lookup")
        return f"{word} ({lang}): {os.urandom(3).hex()}"


def legacy_tools(counter: Counter) -> list[BaseTool]:
    def shout(text: str) -> str:
        counter.hit("shout")
        return text.upper() + os.urandom(2).hex()

    # the legacy single-input tool: models see one string argument, `__arg1`
    return [Tool(name="shout", func=shout, description="Shout a text."),
            Lookup(counter=counter)]


def test_tools_without_args_schema_replay_without_a_false_divergence(store: Store) -> None:
    plan: Plan = [[("shout", {"__arg1": "hello"}), ("lookup", {"word": "fjord"})]]
    with store.record(name="legacy-tools") as rec:
        live = agent(ScriptedChatModel(plan=plan), legacy_tools(Counter()),
                     config={"callbacks": [RecordingCallbackHandler(rec)]})
    counter = Counter()
    with store.replay(rec.run_id) as player:
        tools = replay_tools(player, legacy_tools(counter))
        assert [convert_to_openai_tool(t) for t in tools] == [
            convert_to_openai_tool(t) for t in legacy_tools(Counter())]
        replayed = agent(ReplayChatModel(player=player), tools)
    assert transcript(replayed) == transcript(live)
    assert counter.total == 0


def test_a_divergence_the_graph_handles_is_named_by_the_next_one(store: Store) -> None:
    # ToolNode(handle_tool_errors=True) turns any tool error, a divergence included, into a
    # ToolMessage; the model would then see a prompt that was never recorded
    def build(model: Any, tools: Sequence[BaseTool], args_of: Args) -> Any:
        bound = model.bind_tools(tools)

        def think(state: MessagesState) -> dict[str, Any]:
            reply = bound.invoke(state["messages"])
            for call in reply.tool_calls:  # what a later version of the agent changed
                call["args"] = args_of(call["name"], call["args"])
            return {"messages": [reply]}

        graph = StateGraph(MessagesState)
        graph.add_node("agent", think)
        graph.add_node("tools", ToolNode(tools, handle_tool_errors=True))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        return graph.compile()

    with store.record(name="handled-divergence", entropy=True) as rec:
        build(ScriptedChatModel(plan=PLAN), make_tools(Counter()), lambda n, a: a).invoke(
            {"messages": [HumanMessage(QUESTION)]},
            config={"callbacks": [RecordingCallbackHandler(rec)]})
    def moved(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {**args, "city": "Lyon"} if name == "weather" else args

    with pytest.raises(ReplayDivergence) as caught, store.replay(rec.run_id) as player:
        app = build(ReplayChatModel(player=player), replay_tools(player, make_tools(Counter())),
                    moved)
        app.invoke({"messages": [HumanMessage(QUESTION)]})
    error = caught.value
    # the model's next prompt holds the tool's error message instead of its result; the
    # report names the tool call that caused it
    assert (error.classification, error.kind) == ("prompt_changed", "llm")
    weather = next(s.step for s in store.load_steps(rec.run_id) if s.name == "weather")
    assert "an earlier divergence, caught by the replayed code" in str(error)
    assert f"step {weather}: tool 'weather'" in str(error)
    assert "city: 'Paris' -> 'Lyon'" in str(error)
    first = error.__cause__
    assert isinstance(first, ReplayDivergence)
    assert (first.classification, first.step) == ("tool_args_changed", weather)
