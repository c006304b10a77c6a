"""Replay fails loudly and precisely; recording never breaks the host or hides its errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import ChatMessage, CompletionResponse, LLMMetadata
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.llm import LLM
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from agentreplay_core import ReplayDivergence, Store
from agentreplay_llamaindex import ReplayLLM, ReplayRetriever, instrument, replay_tools
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding, SampledLLM, ToolCallingLLM


class QuotaError(RuntimeError):
    """A provider error, importable, so replay can raise the same type."""


class FailingLLM(CustomLLM):
    """An LLM whose provider refuses every call."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="failing")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        raise QuotaError(f"quota exceeded for prompt of {len(prompt)} chars")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise QuotaError("no streaming either")


class PoisonedNode(TextNode):
    """A node that cannot be serialised: recording it fails inside the handler."""

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("this node refuses to serialise")


class PoisonedRetriever(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=PoisonedNode(text="fine for the host"), score=0.5)]


def _record_agent(store: Store) -> str:
    with store.record(name="agent") as rec, instrument(rec):
        asyncio.run(scenarios.agent(ToolCallingLLM(), scenarios.agent_tools(), workflow=False))
    return str(rec.run_id)


def test_changed_prompt_is_prompt_changed_with_a_diff(li_store: Store) -> None:
    with li_store.record(name="chat") as rec, instrument(rec):
        ToolCallingLLM().chat([ChatMessage(role="user", content="What is 2 + 2?")])
    with pytest.raises(ReplayDivergence) as caught, li_store.replay(rec.run_id,
                                                                    allow_unused=True) as p:
        ReplayLLM(p).chat([ChatMessage(role="user", content="What is 2 + 3?")])
    err = caught.value
    assert err.classification == "prompt_changed"
    assert err.step == 1 and err.kind == "llm" and err.name == "tool-caller"
    assert "2 + 2" in str(err.diff) and "2 + 3" in str(err.diff)


def test_changed_tool_arguments_are_tool_args_changed(li_store: Store) -> None:
    run_id = _record_agent(li_store)
    with li_store.replay(run_id, allow_unused=True) as player:
        add = replay_tools(player, scenarios.agent_tools())[0]
        with pytest.raises(ReplayDivergence) as caught:
            add.call(a=-1, b=-1)
    assert caught.value.classification == "tool_args_changed"
    assert caught.value.name == "add"


def test_extra_call_is_unexpected_and_skipped_call_is_missing(li_store: Store) -> None:
    with li_store.record(name="one") as rec, instrument(rec):
        live = SampledLLM().complete("hello").text
    with pytest.raises(ReplayDivergence) as extra, li_store.replay(rec.run_id) as player:
        llm = ReplayLLM(player)
        assert llm.complete("hello").text == live
        llm.complete("hello")
    assert extra.value.classification == "unexpected_call"
    with pytest.raises(ReplayDivergence) as missing, li_store.replay(rec.run_id):
        pass
    assert missing.value.classification == "missing_call"


def test_recorded_llm_error_propagates_unchanged_and_replays_as_the_same_error(
        li_store: Store) -> None:
    with pytest.raises(QuotaError, match="quota exceeded") as live, \
            li_store.record(name="fails") as rec, instrument(rec):
        FailingLLM().complete("hi")
    assert type(live.value) is QuotaError  # the host's own exception, not a wrapper
    assert li_store.get_run(rec.run_id).status == "failed"
    with li_store.replay(rec.run_id) as player, pytest.raises(QuotaError) as replayed:
        ReplayLLM(player).complete("hi")
    assert str(replayed.value) == str(live.value)


def test_a_failing_handler_is_counted_and_never_reaches_the_host(li_store: Store) -> None:
    with li_store.record(name="broken") as rec, instrument(rec):
        nodes = PoisonedRetriever().retrieve("anything")
    assert nodes[0].node.get_content() == "fine for the host"
    assert rec.stats.internal_errors == 1  # LlamaIndex would have swallowed it silently
    assert li_store.load_steps(rec.run_id) == []


def test_retriever_replay_serves_recorded_nodes_and_consumes_inner_embeddings(
        li_store: Store) -> None:
    index = scenarios.build_index(HashEmbedding())  # outside the recording
    with li_store.record(name="retrieve") as rec, instrument(rec):
        live = index.as_retriever(similarity_top_k=3).retrieve(scenarios.QUESTION)
    kinds = [s.kind for s in li_store.load_steps(rec.run_id)]
    assert kinds == ["embedding", "retriever"]
    with li_store.replay(rec.run_id) as player:  # leaving it checks nothing is unconsumed
        nodes = ReplayRetriever(player).retrieve(scenarios.QUESTION)
    assert [(n.node.node_id, n.node.get_content(), n.node.metadata, n.score) for n in nodes] \
        == [(n.node.node_id, n.node.get_content(), n.node.metadata, n.score) for n in live]


def test_replay_llm_reports_the_recorded_metadata(li_store: Store) -> None:
    live: LLM = ToolCallingLLM()
    with li_store.record(name="meta") as rec, instrument(rec):
        live.complete("x")
    with li_store.replay(rec.run_id) as player:
        replay = ReplayLLM(player)
        replay.complete("x")
    assert replay.metadata.model_dump() == live.metadata.model_dump()


def test_calls_in_another_order_are_order_changed_in_sequential_mode(li_store: Store) -> None:
    with li_store.record(name="order") as rec, instrument(rec):
        llm = SampledLLM()
        llm.complete("first")
        llm.complete("second")
    with pytest.raises(ReplayDivergence) as caught, \
            li_store.replay(rec.run_id, match="sequential", allow_unused=True) as player:
        ReplayLLM(player).complete("second")
    assert caught.value.classification == "order_changed"
    assert caught.value.step == 1
