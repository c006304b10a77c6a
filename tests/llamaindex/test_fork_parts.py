"""Fork and continue for embeddings, retrievers, rerankers and tools: the recorded prefix,
then the live parts."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.postprocessor.structured_llm_rerank import StructuredLLMRerank
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.tools import FunctionTool
from pydantic import Field

from agentreplay_core import Store
from agentreplay_llamaindex import (
    ReplayEmbedding,
    ReplayLLM,
    ReplayReranker,
    ReplayRetriever,
    instrument,
    replay_tools,
)
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding, SampledLLM
from tests.llamaindex.test_more_steps import NODES, RankingLLM, _scores

CHANGED_QUESTION = "Which store holds the run log?"


class CountingEmbedding(HashEmbedding):
    """The hash embedding, noting every batch of texts it is asked to embed."""

    batches: list[list[str]] = Field(default_factory=list)

    def _get_query_embedding(self, query: str) -> list[float]:
        self.batches.append([query])
        return super()._get_query_embedding(query)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(list(texts))
        return [self.vector(t, "text") for t in texts]

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._get_text_embeddings(texts)


def _embed(model: BaseEmbedding, batch: list[str], *, use_async: bool) -> list[Any]:
    if use_async:
        async def both() -> list[Any]:
            return [await model.aget_query_embedding("q"),
                    await model.aget_text_embedding_batch(batch)]
        return asyncio.run(both())
    return [model.get_query_embedding("q"), model.get_text_embedding_batch(batch)]


def test_embedding_batch_goes_live_from_the_diverging_text(li_store: Store) -> None:
    for use_async in (False, True):
        with li_store.record(name="embed") as rec, instrument(rec):
            _embed(HashEmbedding(), ["x", "y", "z"], use_async=use_async)
        live = CountingEmbedding()
        with li_store.replay(rec.run_id, on_divergence="live") as player, instrument(player):
            got = _embed(ReplayEmbedding(player, live=live), ["x", "changed", "z"],
                         use_async=use_async)
            fork = player.fork
        assert fork is not None
        # "q" and "x" from the recording; the rest of the batch in one live call
        assert live.batches == [["changed", "z"]]
        expected = [HashEmbedding.vector("q", "query"),
                    [HashEmbedding.vector(t, "text") for t in ("x", "changed", "z")]]
        assert got == expected
        forked = li_store.load_steps(fork.run_id)
        assert [s.input for s in forked] == [{"mode": "query", "text": "q"}] + [
            {"mode": "text", "text": t} for t in ("x", "changed", "z")]
        # the live texts sit where a recording puts them: below the batch span, numbered on
        recorded_paths = [s.path for s in li_store.load_steps(rec.run_id)]
        assert [s.path for s in forked] == recorded_paths
        with li_store.replay(fork.run_id) as player:
            assert _embed(ReplayEmbedding(player), ["x", "changed", "z"],
                          use_async=use_async) == expected


async def _two_queries(llm: Any, retriever: BaseRetriever, questions: list[str]
                       ) -> list[dict[str, Any]]:
    engine = RetrieverQueryEngine.from_args(retriever=retriever, llm=llm)
    out = []
    for i, question in enumerate(questions):
        response: Any = engine.query(question) if i == 0 else await engine.aquery(question)
        out.append({"text": str(response.response),
                    "nodes": [(n.node.node_id, n.score) for n in response.source_nodes]})
    return out


def test_retriever_and_llm_continue_live_after_a_changed_query(li_store: Store) -> None:
    index = scenarios.build_index(HashEmbedding())  # built outside the recording
    with li_store.record(name="rag") as rec, instrument(rec):
        recorded = asyncio.run(_two_queries(SampledLLM(), index.as_retriever(similarity_top_k=2),
                                            [scenarios.QUESTION, scenarios.QUESTION]))
    assert [s.kind for s in li_store.load_steps(rec.run_id)] == \
        ["embedding", "retriever", "llm"] * 2
    real = index.as_retriever(similarity_top_k=2)
    with li_store.replay(rec.run_id, on_divergence="live") as player:
        continued = asyncio.run(_two_queries(
            ReplayLLM(player, live=SampledLLM()), ReplayRetriever(player, live=real),
            [scenarios.QUESTION, CHANGED_QUESTION]))
        fork = player.fork
    assert fork is not None
    assert continued[0] == recorded[0]
    # the changed query was answered by the real retriever and a live model
    expected_nodes = [(n.node.node_id, n.score) for n in real.retrieve(CHANGED_QUESTION)]
    assert continued[1]["nodes"] == expected_nodes != recorded[1]["nodes"]
    assert continued[1]["text"] != recorded[1]["text"]
    assert li_store.get_run(fork.run_id).fork_step == 5  # the second query's retrieval
    with li_store.replay(fork.run_id) as player:
        again = asyncio.run(_two_queries(ReplayLLM(player), ReplayRetriever(player),
                                         [scenarios.QUESTION, CHANGED_QUESTION]))
    assert again == continued


def test_reranker_and_sync_tool_continue_live(li_store: Store) -> None:
    tool = FunctionTool.from_defaults(fn=scenarios.add)
    with li_store.record(name="parts") as rec, instrument(rec):
        reranker = StructuredLLMRerank(llm=RankingLLM(), top_n=2)
        recorded = [_scores(reranker.postprocess_nodes(list(NODES), query_str=q))
                    for q in ("first", "second")]
        sums = [tool.call(a=1, b=2).content, tool.call(a=3, b=4).content]
    live = StructuredLLMRerank(llm=RankingLLM(), top_n=2)
    with li_store.replay(rec.run_id, on_divergence="live") as player:
        replayed = ReplayReranker(player, top_n=2, live=live)
        again = [_scores(replayed.postprocess_nodes(list(NODES), query_str=q))
                 for q in ("first", "changed")]
        [replay_add] = replay_tools(player, [tool])
        new_sums = [replay_add.call(a=1, b=2).content, replay_add.call(a=5, b=6).content]
        fork = player.fork
    assert fork is not None and again[0] == recorded[0]
    assert new_sums == [sums[0], "11"]  # the changed call ran the real tool
    forked = li_store.load_steps(fork.run_id)
    assert [(s.kind, s.input.get("query")) for s in forked] == [
        ("rerank", "first"), ("rerank", "changed"), ("tool", None), ("tool", None)]
    with li_store.replay(fork.run_id) as player:
        assert [_scores(ReplayReranker(player, top_n=2).postprocess_nodes(
            list(NODES), query_str=q)) for q in ("first", "changed")] == again
        [replay_add] = replay_tools(player, [tool])
        assert [replay_add.call(a=1, b=2).content, replay_add.call(a=5, b=6).content] \
            == new_sums


@pytest.mark.parametrize("tracked", [True, False], ids=["tracked", "untracked"])
def test_a_fork_of_embeddings_recorded_with_entropy_replays(li_store: Store, tracked: bool
                                                            ) -> None:
    """What a live embedding client draws in a fork (its request ids) is recorded inside the
    step of the first text of its batch, as a recording puts it, so the fork replays; before,
    it was recorded beside the steps and the fork's replay ended in `missing_call`. The fork
    and its replay run with the span tracking or without it."""
    from tests.llamaindex.test_entropy import IdDrawingEmbedding

    def tracking(target: Any) -> Any:
        return instrument(target) if tracked else contextlib.nullcontext()

    for use_async in (False, True):
        with li_store.record(name="embed-entropy", entropy=True) as rec, instrument(rec):
            _embed(IdDrawingEmbedding(), ["x", "y", "z"], use_async=use_async)
        with li_store.replay(rec.run_id, on_divergence="live") as player, tracking(player):
            got = _embed(ReplayEmbedding(player, live=IdDrawingEmbedding()),
                         ["x", "changed", "z"], use_async=use_async)
            fork = player.fork
        assert fork is not None
        steps = li_store.load_steps(fork.run_id)
        assert [s.kind for s in steps].count("uuid") == 1  # the one live batch's request id
        with li_store.replay(fork.run_id) as player, tracking(player):
            assert _embed(ReplayEmbedding(player), ["x", "changed", "z"],
                          use_async=use_async) == got
