"""A RAG chain over InMemoryVectorStore with float64 embeddings: record, replay, compare."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from agentreplay_core import Store, StoreError
from agentreplay_langchain import (
    RecordingCallbackHandler,
    RecordingEmbeddings,
    ReplayChatModel,
    ReplayEmbeddings,
    ReplayRetriever,
)
from tests.langchain.fakes import HashEmbeddings, ScriptedChatModel, assert_offline

DOCS = [Document(id=f"doc-{i}", page_content=text, metadata={"source": f"s{i}", "score": s})
        for i, (text, s) in enumerate([("Paris is the capital of France", 0.1 + 0.2),
                                       ("Rome has the Colosseum", 1 / 3),
                                       ("Berlin has a wall", 2.0 ** -40)])]
PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer from the context:\n{context}"), ("human", "{question}")])


def rag_chain(retriever: Any, model: Any) -> Runnable[Any, Any]:
    def context(docs: list[Document]) -> str:
        return "\n".join(f"[{d.id}] {d.page_content}" for d in docs)

    chain: Runnable[Any, Any] = (
        {"context": retriever | context, "question": RunnablePassthrough()} | PROMPT | model)
    return chain


def vector_store(embeddings: HashEmbeddings) -> InMemoryVectorStore:
    store = InMemoryVectorStore(embedding=embeddings)
    store.add_documents(DOCS)
    return store


def record(store: Store, question: str = "What is the capital of France?"
           ) -> tuple[Any, Any, list[Document], HashEmbeddings]:
    embeddings = HashEmbeddings()
    vectors = vector_store(embeddings)  # indexing happens before the recorded run
    with store.record(name="rag") as rec:
        vectors.embedding = RecordingEmbeddings(embeddings, rec)
        retriever = vectors.as_retriever(search_kwargs={"k": 2})
        handler = RecordingCallbackHandler(rec)
        docs = retriever.invoke(question, config={"callbacks": [handler]})
        answer = rag_chain(retriever, ScriptedChatModel()).invoke(
            question, config={"callbacks": [handler]})
    return rec.run_id, answer, docs, embeddings


def test_rag_replays_documents_and_answer_without_embedding_again(store: Store) -> None:
    run_id, answer, docs, embeddings = record(store)
    steps = store.load_steps(run_id)
    assert [s.kind for s in steps] == ["embedding", "retriever", "embedding", "retriever", "llm"]
    # the query embeddings were made inside the retrievers: replaying those covers them
    assert steps[0].path.startswith(steps[1].path + "/")
    calls_before = embeddings.calls
    with store.replay(run_id) as player:
        assert_offline()
        retriever = ReplayRetriever(player=player)
        replayed_docs = retriever.invoke("What is the capital of France?")
        replayed = rag_chain(retriever, ReplayChatModel(player=player)).invoke(
            "What is the capital of France?")
    assert embeddings.calls == calls_before
    assert [(d.id, d.page_content, d.metadata) for d in replayed_docs] == \
        [(d.id, d.page_content, d.metadata) for d in docs]
    assert replayed_docs[0].metadata["score"] == docs[0].metadata["score"]
    assert replayed.content == answer.content and replayed.id == answer.id
    assert replayed.usage_metadata == answer.usage_metadata


def test_async_rag_replay(store: Store) -> None:
    run_id, answer, docs, _ = record(store)

    async def replay() -> tuple[list[Document], Any]:
        with store.replay(run_id) as player:
            retriever = ReplayRetriever(player=player)
            found = await retriever.ainvoke("What is the capital of France?")
            reply = await rag_chain(retriever, ReplayChatModel(player=player)).ainvoke(
                "What is the capital of France?")
        return found, reply

    found, reply = asyncio.run(replay())
    assert [d.id for d in found] == [d.id for d in docs]
    assert reply.content == answer.content


def test_replay_embeddings_return_the_recorded_vectors_bit_for_bit(store: Store) -> None:
    run_id, answer, docs, embeddings = record(store)
    live_vector = embeddings._vector("What is the capital of France?")
    with store.replay(run_id, allow_unused=True) as player:
        replay_embeddings = ReplayEmbeddings(player=player)
        vectors = vector_store(HashEmbeddings())
        vectors.embedding = replay_embeddings
        retriever = vectors.as_retriever(search_kwargs={"k": 2})
        found = retriever.invoke("What is the capital of France?")
        replayed = rag_chain(retriever, ReplayChatModel(player=player)).invoke(
            "What is the capital of France?")
        unused = player.unconsumed()
    assert [d.id for d in found] == [d.id for d in docs]
    assert replayed.content == answer.content
    # the real retriever ran, so only the recorded retriever steps were left unasked
    assert [s.kind for s in unused] == ["retriever", "retriever"]
    recorded = [s for s in store.load_steps(run_id) if s.kind == "embedding"]
    if not getattr(store.backend, "has_pgvector", False):  # e.g. Debian's PostgreSQL 15
        with pytest.raises(StoreError, match="pgvector"):
            store.search_embeddings(live_vector, limit=1)
        return
    hits = store.search_embeddings(live_vector, limit=1)  # the pgvector copies
    assert hits and hits[0].step in {s.step for s in recorded} and hits[0].distance < 1e-6


def test_recorded_vectors_are_exact_float64(store: Store) -> None:
    run_id, _, _, embeddings = record(store)
    with store.replay(run_id, allow_unused=True) as player:
        vector = ReplayEmbeddings(player=player).embed_query("What is the capital of France?")
    expected = embeddings._vector("What is the capital of France?")
    assert [v.hex() for v in vector] == [v.hex() for v in expected]


def test_documents_keep_their_metadata_key_order(store: Store) -> None:
    """A prompt that renders a document's metadata whole shows its keys in their order (a
    loader's `source`, `page`, `author`, ...), which the run log's JSON does not keep."""
    docs = [Document(page_content=f"page {i}",
                     metadata={"title": f"T{i}", "source": "a.pdf", "page": i, "a": {"z": 1,
                                                                                   "b": 2}})
            for i in range(2)]
    listing = ChatPromptTemplate.from_messages([("human", "{context}")])
    seen: list[list[str]] = []

    def chain(retriever: Any, model: Any) -> Runnable[Any, Any]:
        def context(found: list[Document]) -> str:
            seen.extend(list(d.metadata) for d in found)
            return "\n".join(f"{d.metadata}: {d.page_content}" for d in found)

        built: Runnable[Any, Any] = retriever | context | listing | model
        return built

    vectors = InMemoryVectorStore(embedding=HashEmbeddings())
    vectors.add_documents(docs)
    with store.record(name="metadata") as rec:
        live = chain(vectors.as_retriever(search_kwargs={"k": 2}), ScriptedChatModel()).invoke(
            "pages", config={"callbacks": [RecordingCallbackHandler(rec)]})
    seen.clear()
    with store.replay(rec.run_id) as player:
        again = chain(ReplayRetriever(player=player), ReplayChatModel(player=player)
                      ).invoke("pages")
    assert again.content == live.content
    assert seen == [["title", "source", "page", "a"]] * 2


class ClientEmbeddings(HashEmbeddings):
    """An embeddings client that draws a request id per call, as HTTP clients do."""

    def embed_query(self, text: str) -> list[float]:
        uuid.uuid4()
        return super().embed_query(text)

    async def aembed_query(self, text: str) -> list[float]:
        uuid.uuid4()
        return super().embed_query(text)


def test_ids_an_embeddings_call_draws_replay_with_it(store: Store) -> None:
    """With `entropy=True` what a call draws is recorded inside it: `ReplayEmbeddings`,
    which does not call the client, must not leave those draws unused."""
    with store.record(name="embedding-ids", entropy=True) as rec:
        embeddings = RecordingEmbeddings(ClientEmbeddings(), rec)
        live = [embeddings.embed_query("tea"), asyncio.run(embeddings.aembed_query("rain"))]
    draws = [s.path for s in store.load_steps(rec.run_id) if s.kind == "uuid"]
    assert draws == ["embedding:embeddings/uuid:uuid.uuid4"] * 2
    with store.replay(rec.run_id) as player:  # would end with missing_call otherwise
        replayed = ReplayEmbeddings(player=player)
        again = [replayed.embed_query("tea"), asyncio.run(replayed.aembed_query("rain"))]
    assert again == live
