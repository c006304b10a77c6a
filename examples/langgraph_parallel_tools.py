"""A LangGraph graph whose model calls several tools in parallel, recorded and replayed.

The model asks for four tool calls at once; LangGraph's `ToolNode` runs them in parallel
threads, and they finish in a random order with random results. Two of the calls are even
identical (`roll_die(sides=6)` twice). In replay, `ToolNode(..., wrap_tool_call=
replay_tool_call(player))` serves every call its own recorded result, matched by its tool call,
whatever order the threads run in.

    python examples/langgraph_parallel_tools.py

Needs `pip install "agentreplay[embedded,langchain]" langgraph`; uses AGENTREPLAY_DSN if set,
else the embedded PostgreSQL.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agentreplay_core import open_store
from agentreplay_langchain import (
    RecordingCallbackHandler,
    ReplayChatModel,
    instrument,
    replay_tool_call,
)


@tool
def weather(city: str) -> str:
    """The weather in a city now (a slow, changing API in real life)."""
    time.sleep(random.uniform(0.01, 0.2))  # so the parallel calls finish in any order
    return f"{city}: {random.randint(5, 30)} C"


@tool
def roll_die(sides: int) -> int:
    """Roll a die."""
    time.sleep(random.uniform(0.01, 0.2))
    return random.randint(1, sides)


TOOLS: list[BaseTool] = [weather, roll_die]


class ScriptedModel(GenericFakeChatModel):
    """LangChain's scripted chat model plus `bind_tools`, so the graph can bind the tools."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def scripted_model() -> ScriptedModel:
    calls = [{"name": "weather", "args": {"city": "Paris"}, "id": "call_paris"},
             {"name": "weather", "args": {"city": "Rome"}, "id": "call_rome"},
             {"name": "roll_die", "args": {"sides": 6}, "id": "call_die_1"},
             {"name": "roll_die", "args": {"sides": 6}, "id": "call_die_2"}]
    return ScriptedModel(messages=iter([AIMessage("", tool_calls=calls),
                                        AIMessage("Paris or Rome: let the dice decide.")]))


def build_graph(model: BaseChatModel, tool_node: ToolNode) -> Any:
    """model -> tools -> model, until the model stops calling tools."""
    bound = model.bind_tools(TOOLS)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", tool_node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def tool_results(state: dict[str, Any]) -> dict[str, str]:
    """Each tool call's result, by tool call id."""
    return {m.tool_call_id: str(m.content) for m in state["messages"]
            if isinstance(m, ToolMessage)}


QUESTION = {"messages": [HumanMessage("Paris or Rome this weekend?")]}

with open_store() as store:
    # Record: the callback handler in the run's config records the model and every tool call.
    graph = build_graph(scripted_model(), ToolNode(TOOLS))
    with store.record(name="parallel-tools") as rec:
        live = graph.invoke(QUESTION, config={"callbacks": [RecordingCallbackHandler(rec)]})
    print(f"recorded run {rec.run_id}")
    for call_id, result in tool_results(live).items():
        print(f"  {call_id}: {result}")

    # Replay: the same graph with the replay model and the replay seam on the ToolNode.
    # instrument(player) tracks each parallel branch, so identical calls keep their results.
    with store.replay(rec.run_id) as player, instrument(player):
        node = ToolNode(TOOLS, wrap_tool_call=replay_tool_call(player))
        replayed = build_graph(ReplayChatModel(player=player), node).invoke(QUESTION)

    assert tool_results(replayed) == tool_results(live), "each call gets its recorded result"
    assert replayed["messages"][-1].content == live["messages"][-1].content
    print("replayed: every parallel call got its own recorded result")
