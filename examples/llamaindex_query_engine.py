"""A LlamaIndex query engine over a VectorStoreIndex, recorded and replayed.

`agentreplay_llamaindex.instrument(recorder)` records what the program asks of LlamaIndex:
the embedding of every document and of the question (exact float64 vectors), the retriever's
nodes with their scores, and the LLM call. The replay runs the same program with stand-ins:
`ReplayEmbedding` rebuilds the index from the recorded vectors (no embedding model is called),
`ReplayRetriever` serves the recorded nodes and `ReplayLLM` the recorded answer.

    python examples/llamaindex_query_engine.py

Needs `pip install "agentreplay[embedded,llamaindex]"`; uses AGENTREPLAY_DSN if set, else the
embedded PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable

from llama_index.core import Document, MockEmbedding, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.response.schema import Response
from llama_index.core.llms import LLM, MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine

from agentreplay_core import open_store
from agentreplay_llamaindex import ReplayEmbedding, ReplayLLM, ReplayRetriever, instrument

DOCS = [Document(text=text, id_=f"doc-{i}") for i, text in enumerate([
    "The run log keeps every model answer, tool result and embedding of a run.",
    "A replay serves the recorded results instead of calling the model again.",
    "Each step is hash-chained, so a changed byte is detected.",
])]
QUESTION = "What does a replay serve?"


def ask(embed_model: BaseEmbedding, llm: LLM,
        retriever_for: Callable[[VectorStoreIndex], BaseRetriever]) -> Response:
    """The program: index the documents, then answer the question from the two nearest."""
    index = VectorStoreIndex.from_documents(DOCS, embed_model=embed_model)
    engine = RetrieverQueryEngine.from_args(retriever=retriever_for(index), llm=llm)
    response = engine.query(QUESTION)
    assert isinstance(response, Response)
    return response


def summary(response: Response) -> tuple[str, list[tuple[str, str, float | None]]]:
    """The answer, and each source node's id, text and score."""
    return str(response), [(n.node.node_id, n.node.get_content(), n.score)
                           for n in response.source_nodes]


with open_store() as store:
    # LlamaIndex's own fakes stand in for the embedding API and the LLM (MockLLM answers
    # "text" max_tokens times; MockEmbedding gives every text the same vector)
    with store.record(name="query-engine") as rec, instrument(rec):
        live = ask(MockEmbedding(embed_dim=8), MockLLM(max_tokens=6),
                   lambda index: index.as_retriever(similarity_top_k=2))
    steps = store.load_steps(rec.run_id)
    print(f"recorded run {rec.run_id}: {', '.join(s.kind for s in steps)}")
    print(f"  answer: {live!s}")
    for node_id, text, score in summary(live)[1]:
        print(f"  source {node_id} ({score}): {text}")

    # Replay: the index is rebuilt from the recorded vectors, and the retrieval and the answer
    # are served from the run. (A real retriever over ReplayEmbedding would find the same
    # nodes, but would leave the recorded retriever step unused: allow_unused=True.)
    with store.replay(rec.run_id) as player:
        replayed = ask(ReplayEmbedding(player), ReplayLLM(player),
                       lambda index: ReplayRetriever(player))

    assert summary(replayed) == summary(live)
    print("replayed: same answer, same nodes and scores, no model called")
