"""A retrieval-augmented LangChain chain, with its embeddings recorded exactly.

The chain indexes a few documents in an `InMemoryVectorStore`, finds the two nearest to the
question, and asks a chat model with them as context. Embedding models have no LangChain
callback, so the embeddings are wrapped in `RecordingEmbeddings`, which records every vector as
exact float64 values. In replay, `ReplayEmbeddings` serves those vectors bit for bit: the
vector store runs for real on them, finds the same documents with the same scores to the last
digit, and builds the same prompt, which the replayed model call checks.

    python examples/langchain_rag.py

Needs `pip install "agentreplay[embedded,langchain]"`; uses AGENTREPLAY_DSN if set, else the
embedded PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.language_models import BaseChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from agentreplay_core import decode, open_store
from agentreplay_langchain import (
    RecordingEmbeddings,
    ReplayChatModel,
    ReplayEmbeddings,
    instrument,
)

DOCS = [Document(id="hours", page_content="The Lyon office opens at 8:30 and closes at 17:00."),
        Document(id="parking", page_content="Visitors park on level -2, badge at reception."),
        Document(id="wifi", page_content="The guest Wi-Fi is 'lyon-guest', password on request."),
        Document(id="lunch", page_content="The canteen serves lunch from 11:45 to 14:00.")]
PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer from these notes only:\n{context}"), ("human", "{question}")])
QUESTION = "When can I have lunch at the Lyon office?"


def rag_answer(embeddings: Embeddings, model: BaseChatModel) -> tuple[str, list[Any]]:
    """The application: index, retrieve, answer. Returns the answer and the hits."""
    vectors = InMemoryVectorStore(embedding=embeddings)
    vectors.add_documents(DOCS)  # embeds the documents
    hits: list[Any] = []

    def retrieve(question: str) -> str:
        hits.extend(vectors.similarity_search_with_score(question, k=2))  # embeds the question
        # the scores go into the prompt with all their digits: the replayed model call compares
        # the prompt with the recorded one, so a single different bit would be caught
        return "\n".join(f"[{doc.id}] ({float(score)!r}) {doc.page_content}"
                         for doc, score in hits)

    chain = ({"context": RunnableLambda(retrieve), "question": RunnablePassthrough()}
             | PROMPT | model | StrOutputParser())
    return chain.invoke(QUESTION), hits


with open_store() as store:
    # LangChain's fakes stand in for the embedding API and the LLM (deterministic, not
    # semantic: which notes come out first is arbitrary, but always the same)
    live_embeddings = DeterministicFakeEmbedding(size=16)
    live_model = GenericFakeChatModel(messages=iter([AIMessage("Lunch is from 11:45 to 14:00.")]))

    # instrument(rec) records the model call; RecordingEmbeddings records the vectors
    with store.record(name="rag") as rec, instrument(rec):
        answer, hits = rag_answer(RecordingEmbeddings(live_embeddings, rec), live_model)
    print(f"recorded run {rec.run_id}")
    print(f"  retrieved: {[(doc.id, float(score)) for doc, score in hits]}")
    print(f"  answer: {answer}")

    # Replay: no embedding model and no LLM; the vector store computes on recorded vectors.
    with store.replay(rec.run_id) as player:
        replayed, replayed_hits = rag_answer(ReplayEmbeddings(player),
                                             ReplayChatModel(player=player))

    assert replayed == answer
    assert [(d.id, s) for d, s in replayed_hits] == [(d.id, s) for d, s in hits]  # exact floats
    # the stored vectors are the live ones, bit for bit
    stored = [decode(s.output) for s in store.load_steps(rec.run_id) if s.kind == "embedding"]
    assert stored[0] == [[float(x) for x in v] for v in live_embeddings.embed_documents(
        [d.page_content for d in DOCS])]
    assert stored[1] == [float(x) for x in live_embeddings.embed_query(QUESTION)]
    print("replayed: same documents, same scores to the last bit, same answer")
