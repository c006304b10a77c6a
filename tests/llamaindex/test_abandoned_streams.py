"""A stream the recording stopped reading replays up to there; asking for more fails loudly
instead of ending the stream early, as no live model would have."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from agentreplay_core import AgentReplayError, Store
from agentreplay_llamaindex import AbandonedStreamReplayed, ReplayLLM, instrument
from tests.llamaindex.models import SampledLLM, ToolCallingLLM

HELLO = [ChatMessage(role=MessageRole.USER, content="hello there")]


def _deltas(chunks: Any) -> list[str | None]:
    return [c.delta for c in chunks]


def _record_two_chunks_of_a_chat(store: Store) -> tuple[Any, list[str | None]]:
    with store.record(name="abandoned") as rec, instrument(rec):
        stream = ToolCallingLLM().stream_chat(HELLO)
        live = _deltas([next(stream), next(stream)])
        stream.close()  # the program stopped reading here
    [step] = store.load_steps(rec.run_id)
    assert step.output["abandoned"] is True and len(step.output["chunks"]) == 2
    return rec.run_id, live


def test_reading_further_than_the_recording_did_raises(li_store: Store) -> None:
    run_id, live = _record_two_chunks_of_a_chat(li_store)
    replayed: list[str | None] = []
    with li_store.replay(run_id) as player, instrument(player), \
            pytest.raises(AbandonedStreamReplayed) as caught:
        for chunk in ReplayLLM(player).stream_chat(HELLO):  # a changed program reads on
            replayed.append(chunk.delta)
    assert replayed == live  # the recorded chunks first, then the error
    message = str(caught.value)
    assert f"run {run_id}, step 1 (llm 'tool-caller')" in message
    assert "abandoned by its consumer after 2 chunks" in message
    assert "Stop reading the stream where the recorded run did" in message
    assert isinstance(caught.value, AgentReplayError)


def test_a_non_streaming_call_of_an_abandoned_stream_raises(li_store: Store) -> None:
    """The whole response was never received: the last recorded chunk is not it."""
    run_id, _ = _record_two_chunks_of_a_chat(li_store)
    with li_store.replay(run_id) as player, \
            pytest.raises(AbandonedStreamReplayed, match="abandoned by its consumer;"):
        ReplayLLM(player).chat(HELLO)


def test_an_async_stream_replays_up_to_where_it_was_abandoned_and_no_further(
        li_store: Store) -> None:
    async def first_words(llm: Any, count: int | None) -> list[str | None]:
        stream = await llm.astream_complete("tell me a story")
        words: list[str | None] = []
        try:
            async for chunk in stream:
                words.append(chunk.delta)
                if len(words) == count:
                    break
        finally:
            await stream.aclose()
        return words

    with li_store.record(name="async-abandoned") as rec, instrument(rec):
        live = asyncio.run(first_words(SampledLLM(), 2))
    with li_store.replay(rec.run_id) as player, instrument(player):
        assert asyncio.run(first_words(ReplayLLM(player), 2)) == live  # stops there: passes
    with li_store.replay(rec.run_id) as player, instrument(player), \
            pytest.raises(AbandonedStreamReplayed, match="after 2 chunks"):
        asyncio.run(first_words(ReplayLLM(player), None))
