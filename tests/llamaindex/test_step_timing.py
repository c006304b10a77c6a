"""Every recorded step carries when its call started and how long it took: tools, embeddings,
retrievers and rerankers as well as LLM calls."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from llama_index.core.postprocessor.structured_llm_rerank import StructuredLLMRerank
from llama_index.core.tools import FunctionTool

from agentreplay_core import Store
from agentreplay_llamaindex import instrument
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding
from tests.llamaindex.test_more_steps import NODES, RankingLLM

PAUSE_S = 0.02


class SlowEmbedding(HashEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        time.sleep(PAUSE_S)
        return super()._get_query_embedding(query)


def slow_add(a: int, b: int) -> int:
    """Add two integers, slowly."""
    time.sleep(PAUSE_S)
    return a + b


def test_tool_embedding_retriever_and_rerank_steps_are_timed(li_store: Store) -> None:
    index = scenarios.build_index(SlowEmbedding())  # built outside the recording
    retriever = index.as_retriever(similarity_top_k=2)
    before = datetime.now(timezone.utc)
    with li_store.record(name="timed") as rec, instrument(rec):
        FunctionTool.from_defaults(fn=slow_add).call(a=1, b=2)
        retriever.retrieve(scenarios.QUESTION)  # embeds the query, slowly, inside
        StructuredLLMRerank(llm=RankingLLM(), top_n=2).postprocess_nodes(
            list(NODES), query_str="first")
    steps = {s.kind: s for s in li_store.load_steps(rec.run_id)}
    assert {"tool", "embedding", "retriever", "rerank"} <= set(steps)
    for kind in ("tool", "embedding", "retriever"):  # each waited PAUSE_S inside its call
        assert steps[kind].duration_ms >= PAUSE_S * 1000, kind
    assert steps["rerank"].duration_ms > 0
    for step in steps.values():
        assert before <= step.started_at <= datetime.now(timezone.utc)
