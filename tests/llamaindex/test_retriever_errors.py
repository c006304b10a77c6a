"""A retriever that fails (a vector store timing out) is recorded as its error step, and the
replay raises the recorded error where the program met it, so code that falls back on an
empty context does so again, offline."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, ReplayRetriever, instrument
from tests.llamaindex.models import SampledLLM, sample


class FlakyVectorStore(BaseRetriever):
    """Times out for questions about outages; otherwise finds one sampled node."""

    calls: int = 0

    def _found(self, query: str) -> list[NodeWithScore]:
        self.calls += 1
        if "outage" in query:
            raise TimeoutError(f"vector store timed out for {query!r}")
        return [NodeWithScore(node=TextNode(text=f"{query}: {sample()}", id_=sample()),
                              score=0.5)]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._found(query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._found(query_bundle.query_str)


QUESTIONS = ["what is the outage plan", "what is the backup plan"]


def answer(retriever: BaseRetriever, llm: Any, question: str, use_async: bool) -> str:
    """The program: retrieve, fall back on no context when the store fails, then ask."""
    try:
        nodes = asyncio.run(retriever.aretrieve(question)) if use_async \
            else retriever.retrieve(question)
        context = " ".join(n.get_content() for n in nodes)
    except TimeoutError as exc:
        context = f"(no context: {exc})"
    return str(llm.complete(f"{context}\n{question}").text)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_failed_retrieval_replays_as_the_same_error(li_store: Store, use_async: bool) -> None:
    store = FlakyVectorStore()
    with li_store.record(name="flaky-retriever") as rec, instrument(rec):
        live = [answer(store, SampledLLM(), q, use_async) for q in QUESTIONS]
    assert rec.stats.internal_errors == 0
    assert store.calls == 2
    steps = li_store.load_steps(rec.run_id)
    assert [(s.kind, s.is_error) for s in steps] == [
        ("retriever", True), ("llm", False), ("retriever", False), ("llm", False)]
    assert steps[0].input == {"query": QUESTIONS[0]}
    # the program fell back on no context, and asked the model so
    assert "(no context: vector store timed out" in str(steps[1].input)
    with li_store.replay(rec.run_id) as player, instrument(player):
        retriever, llm = ReplayRetriever(player), ReplayLLM(player)
        again = [answer(retriever, llm, q, use_async) for q in QUESTIONS]
    assert again == live
    assert store.calls == 2
