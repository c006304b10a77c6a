"""`entropy=True` with LlamaIndex agents: the agent's own clock and ids replay, while what
LlamaIndex, its workflows and its instrumentation draw for their bookkeeping (span and event
ids, timestamps, run ids) and what a model or an embedding client draws inside its call are not
asked for again."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

from agentreplay_core import Store
from agentreplay_core._keys import is_inside
from agentreplay_llamaindex import ReplayEmbedding, ReplayLLM, instrument, replay_tools
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding, ToolCallingLLM


async def _ticketed_agent(llm: Any, tools: Any, workflow: bool) -> dict[str, Any]:
    """The agent between two ids of the host's own, made through the uuid module."""
    before = str(uuid.uuid4())
    out = await scenarios.agent(llm, tools, workflow=workflow)
    return {**out, "ids": [before, str(uuid.uuid4())]}


@pytest.mark.parametrize("workflow", [False, True], ids=["agent", "workflow"])
def test_an_agent_recorded_with_entropy_replays_twice_in_one_process(
        li_store: Store, workflow: bool) -> None:
    tools = scenarios.agent_tools()
    with li_store.record(name="li-entropy", entropy=True) as rec, instrument(rec):
        live = asyncio.run(_ticketed_agent(ToolCallingLLM(), tools, workflow))
    steps = li_store.load_steps(rec.run_id)
    llm_paths = [s.path for s in steps if s.kind == "llm"]
    drawn = [s for s in steps if s.kind in ("random", "uuid", "time")
             and s.name != "random.seed"]
    # the host's two ids, and the model's own draws (its sampled ids) inside its calls
    assert [s.name for s in drawn if not any(is_inside(s.path, p) for p in llm_paths)] \
        == ["uuid.uuid4", "uuid.uuid4"]
    assert len(drawn) > 2
    for _ in range(2):  # a second replay must not collide with the first one's workflow ids
        with li_store.replay(rec.run_id) as player:
            again = asyncio.run(_ticketed_agent(ReplayLLM(player),
                                                replay_tools(player, tools), workflow))
        assert again == live


class IdDrawingEmbedding(HashEmbedding):
    """Draws a request id in each call to its provider, as API clients do; "boom" fails."""

    def _get_query_embedding(self, query: str) -> list[float]:
        uuid.uuid4()
        return self.vector(query, "query")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        uuid.uuid4()
        return self.vector(query, "query")

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        uuid.uuid4()
        if "boom" in texts:
            raise ConnectionError("connection reset by peer")
        return [self.vector(text, "text") for text in texts]

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        uuid.uuid4()
        await asyncio.sleep(0)  # the batches run at once: their draws interleave
        return [self.vector(text, "text") for text in texts]


def _embed_everything(model: BaseEmbedding) -> list[Any]:
    texts = [f"passage {i}" for i in range(5)]  # three batches of at most two

    async def concurrently() -> list[Any]:
        return [await model.aget_text_embedding_batch(texts),
                await model.aget_query_embedding("where")]

    out = [model.get_text_embedding_batch(texts), model.get_query_embedding("what"),
           asyncio.run(concurrently())]
    try:
        model.get_text_embedding_batch(["fine", "boom"])
    except ConnectionError as exc:
        out.append(str(exc))
    return out


@pytest.mark.parametrize("tracked", [True, False], ids=["tracked", "untracked"])
def test_what_an_embedding_client_draws_is_replayed_with_its_vectors(
        li_store: Store, tracked: bool) -> None:
    with li_store.record(name="li-embedding-entropy", entropy=True) as rec, instrument(rec):
        live = _embed_everything(IdDrawingEmbedding(embed_batch_size=2))
    steps = li_store.load_steps(rec.run_id)
    vectors = [s.path for s in steps if s.kind == "embedding"]
    drawn = [s.path for s in steps if s.kind == "uuid"]
    assert len(drawn) == 3 + 1 + 3 + 1 + 1 and live[-1] == "connection reset by peer"
    # each inside the step of the first text of the batch it was drawn for
    assert all(any(is_inside(path, v) for v in vectors) for path in drawn)

    with li_store.replay(rec.run_id) as player, \
            instrument(player) if tracked else contextlib.nullcontext():
        assert _embed_everything(ReplayEmbedding(player, embed_batch_size=2)) == live
