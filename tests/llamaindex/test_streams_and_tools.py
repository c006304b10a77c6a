"""Streams (finished, abandoned, failing), parallel tool order and threaded sync tools."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Generator
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel

from agentreplay_core import Store
from agentreplay_llamaindex import RecordingTool, ReplayLLM, instrument, replay_tools
from agentreplay_llamaindex._compat import installed_version
from tests.llamaindex.models import SampledLLM, ToolCallingLLM, sample

HELLO = [ChatMessage(role=MessageRole.USER, content="hello there")]


class StreamError(RuntimeError):
    pass


class BreakingStreamLLM(ToolCallingLLM):
    """Streams `chunks` sampled chunks, then the connection breaks."""

    chunks: int = 2

    @llm_chat_callback()
    def stream_chat(self, messages: Any, **kwargs: Any) -> Any:
        def gen() -> Generator[ChatResponse, None, None]:
            text = ""
            for _ in range(self.chunks):
                delta = sample()
                text += delta
                yield ChatResponse(message=ChatMessage(role="assistant", content=text),
                                   delta=delta)
            raise StreamError("connection reset mid-stream")

        return gen()


def _chunks(stream: Any) -> list[tuple[str | None, str | None]]:
    return [(c.message.content, c.delta) for c in stream]


def test_stream_replays_every_chunk(li_store: Store) -> None:
    with li_store.record(name="stream") as rec, instrument(rec):
        live = _chunks(ToolCallingLLM().stream_chat(HELLO))
    with li_store.replay(rec.run_id) as player:
        assert _chunks(ReplayLLM(player).stream_chat(HELLO)) == live
    assert len(live) > 2


def test_abandoned_stream_is_recorded_up_to_where_the_host_stopped(li_store: Store) -> None:
    with li_store.record(name="abandoned") as rec, instrument(rec):
        stream = ToolCallingLLM().stream_chat(HELLO)
        live = [next(stream), next(stream)]
        stream.close()  # the host walks away; no end event ever fires
    [step] = li_store.load_steps(rec.run_id)
    with li_store.replay(rec.run_id) as player:  # stopping where the recording did
        stream = ReplayLLM(player).stream_chat(HELLO)
        replayed = [next(stream), next(stream)]
        stream.close()
    assert [(c.message.content, c.delta) for c in replayed] == \
        [(c.message.content, c.delta) for c in live]
    assert step.output["abandoned"] is True


@pytest.mark.parametrize("chunks", [2, 0])
def test_stream_that_fails_midway_replays_its_chunks_then_the_error(
        li_store: Store, chunks: int) -> None:
    seen: list[str | None] = []
    with li_store.record(name="breaks") as rec, instrument(rec):
        stream = BreakingStreamLLM(chunks=chunks).stream_chat(HELLO)  # opening it works
        with pytest.raises(StreamError):
            for chunk in stream:
                seen.append(chunk.delta)
    replayed: list[str | None] = []
    with li_store.replay(rec.run_id) as player:
        stream = ReplayLLM(player).stream_chat(HELLO)  # ... in replay too: it fails later
        with pytest.raises(StreamError, match="connection reset"):
            for chunk in stream:
                replayed.append(chunk.delta)
    assert replayed == seen and len(seen) == chunks


def test_async_stream_completion_is_one_step(li_store: Store) -> None:
    async def consume(llm: Any) -> list[str | None]:
        return [c.delta async for c in await llm.astream_complete("count to three")]

    with li_store.record(name="astream") as rec, instrument(rec):
        live = asyncio.run(consume(SampledLLM()))
    # CustomLLM.astream_complete re-yields stream_complete's chunks after its span closed
    assert [s.kind for s in li_store.load_steps(rec.run_id)] == ["llm"]
    with li_store.replay(rec.run_id) as player:
        assert asyncio.run(consume(ReplayLLM(player))) == live


def test_tool_results_reaching_the_llm_in_another_order_still_match(li_store: Store) -> None:
    calls = [{"id": f"call_{i}", "name": n, "arguments": "{}"} for i, n in enumerate("ab")]
    assistant = ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": calls})

    def results(order: str) -> list[ChatMessage]:
        return [ChatMessage(role="tool", content=f"result {n}",
                            additional_kwargs={"tool_call_id": f"call_{'ab'.index(n)}"})
                for n in order]

    with li_store.record(name="order") as rec, instrument(rec):
        live = ToolCallingLLM().chat([*HELLO, assistant, *results("ab")])
    with li_store.replay(rec.run_id) as player:
        again = ReplayLLM(player).chat([*HELLO, assistant, *results("ba")])
    assert again.message.content == live.message.content


def test_recording_tool_keeps_nested_calls_inside_the_tool(li_store: Store) -> None:
    """A sync tool run by `acall` in a thread pool: its LLM call must be recorded below it,
    so replaying the tool consumes it (else replay reports it as a missing call)."""
    llm = SampledLLM()

    def summarise(topic: str) -> str:
        """Summarise a topic with the LLM."""
        text: str = llm.complete(f"summarise {topic}").text
        return text

    tool = RecordingTool(FunctionTool.from_defaults(fn=summarise))
    with li_store.record(name="threaded") as rec, instrument(rec):
        live = asyncio.run(tool.acall(topic="replay"))
    steps = li_store.load_steps(rec.run_id)
    assert [s.kind for s in steps] == ["llm", "tool"]
    assert steps[0].path.startswith(steps[1].path + "/")
    with li_store.replay(rec.run_id) as player:  # leaving it checks nothing is unconsumed
        [replayed] = replay_tools(player, [tool])
        again = asyncio.run(replayed.acall(topic="replay"))
    assert again.content == live.content and live.content.startswith("answer ")


def test_a_sync_tool_without_the_wrapper_records_its_calls_only_if_the_context_follows(
        li_store: Store) -> None:
    """Without `RecordingTool` the tool's thread has the run's context only from 0.14.22."""
    llm = SampledLLM()

    def summarise(topic: str) -> str:
        """Summarise a topic with the LLM."""
        text: str = llm.complete(f"summarise {topic}").text
        return text

    with li_store.record(name="bare") as rec, instrument(rec):
        asyncio.run(FunctionTool.from_defaults(fn=summarise).acall(topic="replay"))
    steps = li_store.load_steps(rec.run_id)
    line = tuple(int(n) for n in re.findall(r"\d+", installed_version())[:3])
    if line >= (0, 14, 22):  # FunctionTool copies the context into its thread itself
        assert [s.kind for s in steps] == ["llm", "tool"]
        assert steps[0].path.startswith(steps[1].path + "/")
    else:  # the LLM call ran in no recorded context: recorded nowhere, not outside the tool
        assert [s.kind for s in steps] == ["tool"]


class Invoice(BaseModel):
    number: str
    total: int


class PieceByPieceLLM(ToolCallingLLM):
    """Streams a tool call's arguments a few characters at a time, as providers do; reading
    the tool calls of a chunk whose arguments are not whole JSON yet raises."""

    def _chunks(self, message: ChatMessage) -> Generator[ChatResponse, None, None]:
        calls = message.additional_kwargs.get("tool_calls")
        if not calls:
            yield from super()._chunks(message)
            return
        arguments = calls[0]["arguments"]
        for end in range(4, len(arguments) + 4, 4):
            yield ChatResponse(message=ChatMessage(
                role=MessageRole.ASSISTANT, content="",
                additional_kwargs={"tool_calls": [{**calls[0], "arguments": arguments[:end]}]}),
                delta="")


@pytest.mark.parametrize("streamed", ["stream_chat", "astream_chat"])
def test_a_structured_stream_skips_the_chunks_it_skipped_live(li_store: Store,
                                                              streamed: str) -> None:
    """A structured stream turns each chunk's tool call into a partial object and skips the
    chunks whose tool calls cannot be read (LlamaIndex warns): replay serves the same error
    for those chunks, not an empty list of tool calls (which made a partial object each)."""
    question = [ChatMessage(role=MessageRole.USER, content="Make an invoice for ACME.")]

    async def stream(llm: Any) -> list[str]:
        structured = llm.as_structured_llm(Invoice)
        if streamed == "stream_chat":
            return [repr(c.raw) for c in structured.stream_chat(question)]
        return [repr(c.raw) async for c in await structured.astream_chat(question)]

    with li_store.record(name="structured-stream") as rec, instrument(rec):
        live = asyncio.run(stream(PieceByPieceLLM()))
    assert len(live) == 1 and live[0].startswith("Invoice(number=")  # the whole chunk only
    with li_store.replay(rec.run_id) as player, instrument(player):
        again = asyncio.run(stream(ReplayLLM(player)))
    assert again == live
