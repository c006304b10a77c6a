"""Two real retrievers over `ReplayEmbedding` that share one query: LlamaIndex embeds it once,
and the second retriever reads the vector from the query, so nothing is recorded inside it.
Its replay asked for everything there was and must not end with `missing_call`."""

from __future__ import annotations

import random
from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.retrievers.fusion_retriever import FUSION_MODES

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayEmbedding, instrument

DOCS = [Document(text=f"doc {i}", id_=f"d{i}") for i in range(6)]


class RandomEmbedding(BaseEmbedding):
    """A remote model's vectors, as far as a replay can tell: another on every call."""

    def _vector(self) -> list[float]:
        return [random.gauss(0, 1) for _ in range(8)]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector()


def _fused(embedding: Any) -> list[tuple[str, float | None]]:
    first = VectorStoreIndex.from_documents(DOCS[:3], embed_model=embedding)
    second = VectorStoreIndex.from_documents(DOCS[3:], embed_model=embedding)
    fused = QueryFusionRetriever(
        [first.as_retriever(similarity_top_k=2), second.as_retriever(similarity_top_k=2)],
        num_queries=1, use_async=False, mode=FUSION_MODES.SIMPLE, llm=MockLLM())
    return [(n.node.get_content(), n.score) for n in fused.retrieve("find docs")]


def test_a_retriever_that_reads_its_query_embedding_from_the_query_is_not_missing(
        li_store: Store) -> None:
    with li_store.record(name="fusion") as rec, instrument(rec):
        live = _fused(RandomEmbedding())
    retrievers = [s for s in li_store.load_steps(rec.run_id) if s.kind == "retriever"]
    inner = [s for s in li_store.load_steps(rec.run_id) if s.kind == "embedding"
             and any(s.path.startswith(r.path + "/") for r in retrievers)]
    assert len(retrievers) == 3 and len(inner) == 1  # the query embedded once, for both
    with li_store.replay(rec.run_id) as player, instrument(player):
        assert _fused(ReplayEmbedding(player)) == live
