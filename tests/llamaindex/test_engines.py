"""LlamaIndex's higher-level engines over one scripted model: chat engines holding a
conversation, a router and a sub-question engine choosing by the model's JSON, and a ReAct
agent parsing the model's text, each recorded live and replayed offline."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentStream, ReActAgent, ToolCallResult
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.llms import LLM, LLMMetadata
from llama_index.core.query_engine import RouterQueryEngine, SubQuestionQueryEngine
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.selectors import LLMSingleSelector
from llama_index.core.tools import BaseTool, QueryEngineTool, ToolMetadata

from agentreplay_core import ReplayDivergence, Store
from agentreplay_llamaindex import ReplayEmbedding, ReplayLLM, instrument, replay_tools
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding, SampledLLM, sample


class ScriptLLM(SampledLLM):
    """A completion model that answers each engine's prompt in the format it parses (a
    selector's choice, sub-questions, ReAct steps), with sampled content."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="script", context_window=8000, num_output=256)

    def _text(self, prompt: str) -> str:
        if "Action Input" in prompt:  # a ReAct agent: one tool call, then the answer
            if "Observation:" not in prompt.rsplit("Current Conversation", 1)[-1]:
                a = int.from_bytes(os.urandom(1), "big")
                return (f"Thought: I need the sum {sample(2)}.\nAction: add\n"
                        f'Action Input: {{"a": {a}, "b": 3}}')
            return f"Thought: I can answer without using any more tools.\nAnswer: {sample()}"
        if "choice" in prompt and "JSON" in prompt:  # LLMSingleSelector
            return json.dumps([{"choice": 1 + os.urandom(1)[0] % 2, "reason": sample()}])
        if "sub_question" in prompt:  # LLMQuestionGenerator
            items = [{"sub_question": f"what about {sample(2)}", "tool_name": name}
                     for name in ("docs", "notes")]
            return "```json\n" + json.dumps({"items": items}) + "\n```"
        return f"reply {sample()} to {len(prompt)} chars"


async def conversations(llm: LLM, embed_model: Any) -> list[str]:
    """Four turns with each chat engine: chat, achat, stream_chat, astream_chat."""
    retriever = scenarios.build_index(embed_model).as_retriever(similarity_top_k=2)
    engines = [SimpleChatEngine.from_defaults(llm=llm),
               ContextChatEngine.from_defaults(retriever=retriever, llm=llm),
               CondensePlusContextChatEngine.from_defaults(retriever=retriever, llm=llm)]
    said = []
    for engine in engines:
        said.append(str(engine.chat("What is recorded?")))
        said.append(str(await engine.achat("And what is replayed?")))
        said.append("".join(engine.stream_chat("Where is it stored?").response_gen))
        streamed = await engine.astream_chat("How is it checked?")
        said.append("".join([token async for token in streamed.async_response_gen()]))
    return said


def test_chat_engines_replay_a_conversation(li_store: Store) -> None:
    with li_store.record(name="chats") as rec, instrument(rec):
        live = asyncio.run(conversations(ScriptLLM(), HashEmbedding()))
    assert len(set(live)) == len(live) == 12
    with li_store.replay(rec.run_id) as player, instrument(player):
        again = asyncio.run(conversations(ReplayLLM(player), ReplayEmbedding(player)))
    assert again == live


def engine_tools(llm: LLM, embed_model: Any) -> list[QueryEngineTool]:
    index = scenarios.build_index(embed_model)
    return [QueryEngineTool(query_engine=index.as_query_engine(llm=llm),
                            metadata=ToolMetadata(name="docs", description="The docs.")),
            QueryEngineTool(query_engine=index.as_query_engine(
                                llm=llm, response_mode="tree_summarize"),
                            metadata=ToolMetadata(name="notes", description="The notes."))]


async def routed(llm: LLM, embed_model: Any, question: str) -> list[Any]:
    tools = engine_tools(llm, embed_model)
    router = RouterQueryEngine(selector=LLMSingleSelector.from_defaults(llm=llm),
                               query_engine_tools=tools, llm=llm)
    answers: list[Any] = [str(router.query(question)), str(await router.aquery(question))]
    # sub-questions answered concurrently (use_async), each by the tool the model chose
    split = SubQuestionQueryEngine.from_defaults(
        query_engine_tools=tools, llm=llm, use_async=True, verbose=False,
        question_gen=LLMQuestionGenerator.from_defaults(llm=llm))
    response = split.query(question)
    answers.append(str(response))
    answers.append(sorted(n.node.get_content() for n in response.source_nodes))
    return answers


def test_router_and_sub_question_engines_replay_their_choices(li_store: Store) -> None:
    with li_store.record(name="routes") as rec, instrument(rec):
        live = asyncio.run(routed(ScriptLLM(), HashEmbedding(), "Compare the two."))
    with li_store.replay(rec.run_id) as player, instrument(player):
        again = asyncio.run(routed(ReplayLLM(player), ReplayEmbedding(player),
                                   "Compare the two."))
    assert again == live
    with pytest.raises(ReplayDivergence) as caught, li_store.replay(rec.run_id) as player, \
            instrument(player):
        asyncio.run(routed(ReplayLLM(player), ReplayEmbedding(player), "Compare them."))
    assert caught.value.classification == "prompt_changed"
    assert "'Compare [-the two-]{+them+}.'" in str(caught.value)


async def react(llm: LLM, tools: Sequence[BaseTool], streaming: bool) -> dict[str, Any]:
    handler = ReActAgent(tools=list(tools), llm=llm, streaming=streaming).run(
        user_msg="Add it up.")
    seen: list[tuple[str, ...]] = []
    async for event in handler.stream_events():
        if isinstance(event, ToolCallResult):
            seen.append(("tool", event.tool_name, str(event.tool_kwargs),
                         str(event.tool_output)))
        elif isinstance(event, AgentStream):
            seen.append(("delta", event.delta))
    return {"answer": str(await handler), "events": seen}


@pytest.mark.parametrize("streaming", [True, False])
def test_react_agent_replays_its_reasoning_and_tool_calls(li_store: Store,
                                                          streaming: bool) -> None:
    tools = scenarios.agent_tools()
    with li_store.record(name="react") as rec, instrument(rec):
        live = asyncio.run(react(ScriptLLM(), tools, streaming))
    assert [e[1] for e in live["events"] if e[0] == "tool"] == ["add"]
    with li_store.replay(rec.run_id) as player, instrument(player):
        again = asyncio.run(react(ReplayLLM(player), replay_tools(player, tools), streaming))
    assert again == live
