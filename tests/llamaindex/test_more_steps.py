"""Reranking, embedding errors, agent tools taking the workflow Context, changed tool sets,
secrets and the network guard."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, CompletionResponse, MessageRole
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.postprocessor.structured_llm_rerank import StructuredLLMRerank
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from pydantic import Field

from agentreplay_core import NetworkAccessDuringReplay, Store
from agentreplay_llamaindex import (
    ReplayEmbedding,
    ReplayLLM,
    ReplayReranker,
    instrument,
    replay_tools,
)
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding, SampledLLM, ToolCallingLLM, sample

NODES = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=0.1 * i)
         for i, t in enumerate(scenarios.TEXTS)]


class RankingLLM(ToolCallingLLM):
    """Answers the rerank program's tool with a sampled relevance for every document."""

    def _reply(self, messages: Sequence[ChatMessage], tools: list[Any]) -> ChatMessage:
        docs = [{"document_number": i + 1, "relevance": 1 + os.urandom(1)[0] % 10}
                for i in range(len(NODES))]
        call = {"id": f"call_{sample()}", "name": tools[0]["function"]["name"],
                "arguments": json.dumps({"documents": docs})}
        return ChatMessage(role=MessageRole.ASSISTANT, content="",
                           additional_kwargs={"tool_calls": [call]})


class FailingEmbedding(HashEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        raise ConnectionError(f"embedding service down for {query!r}")


class KeyedLLM(SampledLLM):
    """A live LLM holding an API key, as provider integrations do."""

    api_key: str = Field(default="sk-live-0123456789abcdef")


class SocketLLM(SampledLLM):
    """A live model that really tries to reach its provider."""

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        socket.create_connection(("192.0.2.1", 443), timeout=1).close()
        return CompletionResponse(text="unreachable")


def _scores(nodes: list[NodeWithScore]) -> list[tuple[str, float | None]]:
    return [(n.node.node_id, n.score) for n in nodes]


def test_rerank_replays_with_the_llm_call_inside_it(li_store: Store) -> None:
    with li_store.record(name="rerank") as rec, instrument(rec):
        reranker = StructuredLLMRerank(llm=RankingLLM(), top_n=2)
        live = reranker.postprocess_nodes(list(NODES), query_str=scenarios.QUESTION)
    assert [s.kind for s in li_store.load_steps(rec.run_id)] == ["llm", "rerank"]
    with li_store.replay(rec.run_id) as player:
        again = ReplayReranker(player, top_n=2).postprocess_nodes(
            list(NODES), query_str=scenarios.QUESTION)
    assert _scores(again) == _scores(live) and len(live) == 2


def test_embedding_error_is_recorded_and_replayed(li_store: Store) -> None:
    with pytest.raises(ConnectionError) as live, li_store.record(name="e") as rec, \
            instrument(rec):
        FailingEmbedding().get_query_embedding("what is down?")
    with li_store.replay(rec.run_id) as player, pytest.raises(ConnectionError) as replayed:
        ReplayEmbedding(player).get_query_embedding("what is down?")
    assert str(replayed.value) == str(live.value)


async def note(ctx: Context, text: str) -> str:
    """Remember a note in the workflow state."""
    state: Any = ctx.store if hasattr(ctx, "store") else ctx  # `ctx.set` before workflows 1.0
    await state.set("note", text)
    return f"noted {text}"


# FunctionTool builds its schema from real annotations; `from __future__ import annotations`
# leaves strings that pydantic cannot resolve for the Context type
note.__annotations__ = {"ctx": Context, "text": str, "return": str}


def test_tool_taking_the_workflow_context_replays_without_it(li_store: Store) -> None:
    tools = [FunctionTool.from_defaults(fn=note)]
    with li_store.record(name="ctx") as rec, instrument(rec):
        live = asyncio.run(scenarios.agent(ToolCallingLLM(), tools, workflow=False))
    [tool_step] = [s for s in li_store.load_steps(rec.run_id) if s.kind == "tool"]
    assert list(tool_step.input["kwargs"]) == ["text"]  # the Context is run state, not input
    with li_store.replay(rec.run_id) as player:
        again = asyncio.run(scenarios.agent(ReplayLLM(player), replay_tools(player, tools),
                                            workflow=False))
    assert again == live


def test_changed_tool_set_is_params_changed(li_store: Store) -> None:
    with li_store.record(name="tools") as rec, instrument(rec):
        asyncio.run(scenarios.agent(ToolCallingLLM(), scenarios.agent_tools(), workflow=True))
    fewer = scenarios.agent_tools()[:1]
    with pytest.raises(Exception) as caught, \
            li_store.replay(rec.run_id, allow_unused=True) as player:
        asyncio.run(scenarios.agent(ReplayLLM(player), replay_tools(player, fewer),
                                    workflow=True))
    divergence = scenarios.divergence_in(caught.value)
    assert divergence.classification == "params_changed"
    assert "multiply" in divergence.diff
    assert "tool_choice" not in divergence.diff  # integration kwargs are not diff noise


def test_no_api_key_or_model_dict_is_stored(li_store: Store) -> None:
    with li_store.record(name="keys") as rec, instrument(rec):
        KeyedLLM().complete("hello")
        KeyedLLM().chat([ChatMessage(role="user", content="hello")])
    steps = li_store.load_steps(rec.run_id)
    stored = json.dumps([[s.input, s.output] for s in steps])
    assert len(steps) == 2 and "sk-live" not in stored
    # the metadata goes with the output: the request is what the call is matched on
    assert steps[0].output["metadata"]["model_name"] == "sampled-llm"
    assert "metadata" not in steps[0].input


def test_a_live_call_during_replay_is_stopped_by_the_network_guard(li_store: Store) -> None:
    with li_store.record(name="guard") as rec, instrument(rec):
        SampledLLM().complete("hello")
    with pytest.raises(NetworkAccessDuringReplay), \
            li_store.replay(rec.run_id, allow_unused=True):
        SocketLLM().complete("hello")  # someone forgot to swap in ReplayLLM
