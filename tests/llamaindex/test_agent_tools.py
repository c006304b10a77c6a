"""Agent tools: a query engine tool whose inner calls replay with it, a tool that fails, and
replay tools that look like the originals."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.agent.workflow import FunctionAgent, ToolCall, ToolCallResult
from llama_index.core.objects import ObjectIndex, ObjectRetriever, SimpleToolNodeMapping
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.tools import FunctionTool, QueryEngineTool

from agentreplay_core import ReplayDivergence, Store
from agentreplay_llamaindex import (
    ReplayLLM,
    ReplayRetriever,
    instrument,
    replay_tools,
)
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding, SampledLLM, ToolCallingLLM


def lookup(code: int) -> str:
    """Look up an order code."""
    raise KeyError(f"no order {code}")


def test_query_engine_tool_replays_without_its_inner_calls(li_store: Store) -> None:
    index = scenarios.build_index(HashEmbedding())  # built outside the recording
    engine = index.as_query_engine(llm=SampledLLM(), similarity_top_k=2)
    tools = [QueryEngineTool.from_defaults(engine, name="docs", description="The docs.")]
    with li_store.record(name="qe-tool") as rec, instrument(rec):
        live = asyncio.run(scenarios.agent(ToolCallingLLM(), tools, workflow=False))
    kinds = [s.kind for s in li_store.load_steps(rec.run_id)]
    assert kinds == ["llm", "embedding", "retriever", "llm", "tool", "llm"]
    # the tool is replayed whole: the embedding, retrieval and LLM inside it are consumed
    with li_store.replay(rec.run_id) as player:
        # two models were recorded (the agent's and the engine's): say which one this is
        agent_llm = ReplayLLM(player, name="tool-caller")
        again = asyncio.run(scenarios.agent(agent_llm, replay_tools(player, tools),
                                            workflow=False))
    assert again == live and live["text"].startswith("done ")


def test_failing_tool_replays_its_error_to_the_agent(li_store: Store) -> None:
    tools = [FunctionTool.from_defaults(fn=lookup)]
    with li_store.record(name="bad-tool") as rec, instrument(rec):
        live = asyncio.run(scenarios.agent(ToolCallingLLM(), tools, workflow=True))
    [step] = [s for s in li_store.load_steps(rec.run_id) if s.kind == "tool"]
    assert step.is_error and step.output["type"] == "KeyError"
    assert "no order" in live["text"]  # the agent saw the error and went on
    with li_store.replay(rec.run_id) as player:
        again = asyncio.run(scenarios.agent(ReplayLLM(player), replay_tools(player, tools),
                                            workflow=True))
    assert again == live


def test_replay_tools_carry_the_originals_metadata(li_store: Store) -> None:
    originals = scenarios.agent_tools()
    with li_store.record(name="meta") as rec:
        pass
    with li_store.replay(rec.run_id) as player:
        replayed = replay_tools(player, originals)
    assert [t.metadata.to_openai_tool() for t in replayed] == \
        [t.metadata.to_openai_tool() for t in originals]


def test_a_real_tool_replays_through_the_stand_ins_inside_it(li_store: Store) -> None:
    index = scenarios.build_index(HashEmbedding())
    engine = index.as_query_engine(llm=SampledLLM(), similarity_top_k=2)
    tools = [QueryEngineTool.from_defaults(engine, name="docs", description="The docs.")]
    with li_store.record(name="qe-tool-real") as rec, instrument(rec):
        live = asyncio.run(scenarios.agent(ToolCallingLLM(), tools, workflow=False))
    with li_store.replay(rec.run_id) as player:
        # the query engine runs for real, on the recorded retrieval and answer: its own step
        # is not asked for, and the replay still ends clean (nothing inside it is missing)
        replayed_engine = RetrieverQueryEngine.from_args(
            retriever=ReplayRetriever(player), llm=ReplayLLM(player, name="sampled-llm"))
        real_tools = [QueryEngineTool.from_defaults(replayed_engine, name="docs",
                                                    description="The docs.")]
        again = asyncio.run(scenarios.agent(ReplayLLM(player, name="tool-caller"), real_tools,
                                            workflow=False))
    assert again == live


def test_parts_left_real_in_a_tracked_replay_are_named_at_the_end(li_store: Store) -> None:
    tools = scenarios.agent_tools()  # add and multiply: local and deterministic
    index = scenarios.build_index(HashEmbedding())
    with li_store.record(name="real-parts") as rec, instrument(rec):
        live = asyncio.run(scenarios.agent(ToolCallingLLM(), tools, workflow=True))
        live_rag = asyncio.run(scenarios.rag(SampledLLM(), index.as_retriever(), "sync"))
    real = [(s.step, s.kind) for s in li_store.load_steps(rec.run_id) if s.kind != "llm"]
    assert sorted(kind for _, kind in real) == ["embedding", "retriever", "tool", "tool"]
    # the tools, the retriever and its embedding model are not swapped: they run for real
    # (on the replayed tool calls and question)
    with pytest.raises(ReplayDivergence) as caught, \
            li_store.replay(rec.run_id) as player, instrument(player):
        again = asyncio.run(scenarios.agent(ReplayLLM(player, name="tool-caller"), tools,
                                            workflow=True))
        again_rag = asyncio.run(scenarios.rag(ReplayLLM(player, name="sampled-llm"),
                                              index.as_retriever(), "sync"))
    assert again == live and again_rag == live_rag
    error = caught.value
    assert error.classification == "missing_call"
    assert error.step == real[0][0]
    assert "4 recorded steps were never replayed" in str(error)
    assert "; they ran for real in this replay, at the recorded paths," in str(error)


def scale(value: int, by: int) -> int:
    """Scale a value."""
    return value * by


async def tool_call_keys(llm: Any, tools: list[Any]) -> list[list[str]]:
    """The argument names of each tool call the agent makes, in the order it sees them."""
    agent = FunctionAgent(tools=tools, llm=llm, system_prompt="Use the tools.")
    handler = agent.run(user_msg="Scale 3 by 4.")
    seen = [list(event.tool_kwargs) async for event in handler.stream_events()
            if isinstance(event, ToolCall) and not isinstance(event, ToolCallResult)]
    await handler
    return seen


def test_tool_call_arguments_replay_in_the_models_key_order(li_store: Store) -> None:
    tools = [FunctionTool.from_defaults(fn=scale)]  # parameters in an unsorted order
    with li_store.record(name="key-order") as rec, instrument(rec):
        live = asyncio.run(tool_call_keys(ToolCallingLLM(), tools))
    assert live == [["value", "by"]]
    with li_store.replay(rec.run_id) as player:  # from PostgreSQL, which reorders JSONB keys
        again = asyncio.run(tool_call_keys(ReplayLLM(player), replay_tools(player, tools)))
    assert again == live


def forecast(city: str) -> dict[str, Any]:
    """A structured forecast, its keys in the order a service sends them (not sorted)."""
    return {"temperature": 21.5, "city": city, "details": {"wind": "W", "humidity": 40}}


async def printed_results(llm: Any, tools: list[Any]) -> list[str]:
    """What a program streaming the agent's events prints of each tool's raw output."""
    agent = FunctionAgent(tools=tools, llm=llm, system_prompt="Use the tools.")
    handler = agent.run(user_msg="Weather?")
    seen = [str(event.tool_output.raw_output) async for event in handler.stream_events()
            if isinstance(event, ToolCallResult)]
    await handler
    return seen


def test_a_dict_a_tool_returns_replays_in_its_key_order(li_store: Store) -> None:
    tools = [FunctionTool.from_defaults(fn=forecast)]
    with li_store.record(name="dict-result") as rec, instrument(rec):
        live = asyncio.run(printed_results(ToolCallingLLM(), tools))
    assert len(live) == 1 and live[0].startswith("{'temperature': 21.5, 'city': ")
    with li_store.replay(rec.run_id) as player:  # from PostgreSQL, which reorders JSONB keys
        again = asyncio.run(printed_results(ReplayLLM(player), replay_tools(player, tools)))
    assert again == live


ran: list[str] = []


def quote(ticker: str) -> str:
    """Get a live stock quote for a ticker."""
    ran.append(ticker)
    return f"{ticker}: {int.from_bytes(os.urandom(2), 'big')}"  # live data: differs per run


def test_tools_an_agent_retrieves_replay_through_their_stand_ins(li_store: Store) -> None:
    """An agent given a `tool_retriever` (an ObjectIndex of its tools) gets its tools from
    the retrieval: the replay retrieves them with `ReplayRetriever` and maps the retrieved
    nodes to the stand-ins (docs/llamaindex.md), so the tools do not run."""
    tools = [FunctionTool.from_defaults(fn=quote), FunctionTool.from_defaults(fn=scale)]
    index = ObjectIndex.from_objects(tools, index_cls=VectorStoreIndex,
                                     embed_model=HashEmbedding())

    async def ask(llm: Any, tool_retriever: Any) -> str:
        agent = FunctionAgent(llm=llm, tool_retriever=tool_retriever,
                              system_prompt="Use the tools.")
        result: Any = await agent.run(user_msg="What is the price of ACME?")
        return str(result.response.content)

    with li_store.record(name="tool-retriever") as rec, instrument(rec):
        live = asyncio.run(ask(ToolCallingLLM(), index.as_retriever(similarity_top_k=2)))
    assert len(ran) == 1
    ran.clear()
    with li_store.replay(rec.run_id) as player, instrument(player):
        stand_ins = SimpleToolNodeMapping.from_objects(replay_tools(player, tools))
        again = asyncio.run(ask(ReplayLLM(player),
                                ObjectRetriever(ReplayRetriever(player), stand_ins)))
    assert again == live and ran == []
