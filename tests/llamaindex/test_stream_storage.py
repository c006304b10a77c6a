"""A stream whose every chunk carries the whole message so far is stored in size linear in
its text, not quadratic, and replays chunk for chunk as it was streamed."""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core.base.llms import types
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    ImageBlock,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback

from agentreplay_core import Store
from agentreplay_core._codec import canonical_bytes
from agentreplay_llamaindex import ReplayLLM, instrument
from agentreplay_llamaindex._chunk_growth import GROWN, compacted_growth, expanded_growth
from agentreplay_llamaindex._chunk_texts import compacted, expanded, texts_of
from tests.llamaindex.models import aiterate, sample
from tests.llamaindex.test_streamed_tool_secrets import BLOCKS, ConfidingCaller, streamed
from tests.support.secret_leaks import fake_secrets, leaks, partial_leaks

HELLO = [ChatMessage(role=MessageRole.USER, content="tell me everything")]
PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJ"
         "RU5ErkJggg==")


FAKES = fake_secrets()


class LongWinded(CustomLLM):
    """Streams an answer of `words` sampled words, a few characters a chunk, each chunk with
    the whole message so far (as LlamaIndex's integrations do); `deltas_only`: each chunk
    with its delta alone, as some providers' do; `with_image`: a message that also holds an
    image block before its text."""

    words: int = 50
    deltas_only: bool = False
    with_image: bool = False
    #: said in the middle of the answer (credentials the model read in a tool result)
    confided: str = ""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="long-winded", is_chat_model=True)

    def _pieces(self) -> list[str]:
        words = [sample() for _ in range(self.words)]
        text = " ".join([*words[:3], self.confided, *words[3:]] if self.confided else words)
        return [text[i:i + 4] for i in range(0, len(text), 4)]

    def _chat_chunks(self) -> Generator[ChatResponse, None, None]:
        so_far = ""
        for piece in self._pieces():
            so_far = piece if self.deltas_only else so_far + piece
            blocks: list[Any] = [TextBlock(text=so_far)]
            if self.with_image:
                blocks.insert(0, ImageBlock(image=PIXEL.encode(), image_mimetype="image/png"))
            yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks),
                               delta=piece, raw={"piece": piece})

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        return self._chat_chunks()

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        return aiterate(list(self._chat_chunks()))

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        return CompletionResponse(text="".join(self._pieces()))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        def gen() -> Generator[CompletionResponse, None, None]:
            so_far = ""
            for piece in self._pieces():
                so_far += piece
                yield CompletionResponse(text=so_far, delta=piece)
        return gen()


def chat_chunks(stream: Any) -> list[tuple[Any, ...]]:
    return [(c.message.role, [b.model_dump() for b in c.message.blocks], c.delta, c.raw)
            for c in stream]


def record_chat(store: Store, llm: LongWinded) -> tuple[Any, list[tuple[Any, ...]]]:
    with store.record(name="long-stream") as rec, instrument(rec):
        live = chat_chunks(llm.stream_chat(HELLO))
    return rec.run_id, live


def stored_bytes(store: Store, run_id: Any) -> int:
    [step] = store.load_steps(run_id)
    return len(canonical_bytes(step.output))


def test_stored_size_grows_with_the_text_not_its_square(li_store: Store) -> None:
    short_run, short = record_chat(li_store, LongWinded(words=100))
    long_run, long = record_chat(li_store, LongWinded(words=800))
    text_ratio = len(long[-1][1][0]["text"]) / len(short[-1][1][0]["text"])
    size_ratio = stored_bytes(li_store, long_run) / stored_bytes(li_store, short_run)
    # 8x the text in 8x the chunks: about 8x the bytes (stored whole, it was about 64x)
    assert 6 < text_ratio < 10
    assert size_ratio < 1.5 * text_ratio
    for run_id, live in ((short_run, short), (long_run, long)):
        with li_store.replay(run_id) as player:
            assert chat_chunks(ReplayLLM(player).stream_chat(HELLO)) == live


def test_async_and_completion_streams_replay_chunk_for_chunk(li_store: Store) -> None:
    llm = LongWinded(words=200)

    async def achat(model: Any) -> list[tuple[Any, ...]]:
        return chat_chunks([c async for c in await model.astream_chat(HELLO)])

    def completions(model: Any) -> list[tuple[str, str | None]]:
        return [(c.text, c.delta) for c in model.stream_complete("go on")]

    with li_store.record(name="streams") as rec, instrument(rec):
        live_chat = asyncio.run(achat(llm))
        live_text = completions(llm)
    steps = li_store.load_steps(rec.run_id)
    whole = sum(len(text) for text, _ in live_text)
    assert len(canonical_bytes(steps[1].output)) < whole / 4  # the texts were not all kept
    with li_store.replay(rec.run_id) as player:
        replay = ReplayLLM(player)
        assert asyncio.run(achat(replay)) == live_chat
        assert completions(replay) == live_text


def test_deltas_and_other_blocks_are_kept_as_they_came(li_store: Store) -> None:
    for llm in (LongWinded(words=30, deltas_only=True), LongWinded(words=30, with_image=True)):
        run_id, live = record_chat(li_store, llm)
        with li_store.replay(run_id) as player:
            assert chat_chunks(ReplayLLM(player).stream_chat(HELLO)) == live


def test_a_secret_streamed_across_chunks_is_never_stored(
        li_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chunk adds a few characters of the secret: what the chunks add is cut from the
    redacted texts, so no stored text, nor any rebuilt from them, holds a secret."""
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "stream-test-key")
    said = " and ".join(f.in_text for f in FAKES)
    run_id, live = record_chat(li_store, LongWinded(words=40, confided=said))
    [step] = li_store.load_steps(run_id)
    assert leaks(canonical_bytes(step.output), FAKES) == []
    rebuilt: list[str] = []
    previous: list[str | None] = []
    for chunk in step.output["chunks"]:
        whole = expanded(chunk["response"], previous)
        previous = texts_of(whole)
        rebuilt.append(" ".join(t for t in previous if t))
    assert "<secret:" in rebuilt[-1]
    # no part of a secret either: a chunk's text that holds the start of a secret ending in a
    # later chunk, too short for its rule to recognise, has that start taken out
    assert partial_leaks("\n".join(rebuilt).encode(), FAKES) == []
    assert partial_leaks(canonical_bytes(step.output), FAKES) == []
    # nor do the chunks' deltas joined (the provider's payload of a chunk that held a piece
    # of a secret is dropped: it holds the same piece)
    deltas = "".join(c["response"]["delta"] for c in step.output["chunks"])
    assert "<secret:" in deltas and leaks(deltas.encode(), FAKES) == []
    raw = "".join(c["response"]["raw"]["piece"] for c in step.output["chunks"]
                  if c["response"]["raw"] is not None)
    assert leaks(raw.encode(), FAKES) == []
    # outside the secrets (whose chunks are stored whole) the chunks hold what they add
    assert stored_bytes(li_store, run_id) < sum(map(len, rebuilt)) * 0.9
    with li_store.replay(run_id, secrets=[f.value for f in FAKES]) as player:
        again = chat_chunks(ReplayLLM(player).stream_chat(HELLO))
    # the whole answer comes back with its secrets: each chunk's text is the live answer up
    # to where the chunk ends, less a secret not ended yet (it comes whole where it ends)
    assert len(again) == len(live) and again[-1] == live[-1]
    for chunk, live_chunk in zip(again, live, strict=True):
        text, live_text = chunk[1][0]["text"], live_chunk[1][0]["text"]
        unended = live_text[len(text):]
        assert live_text.startswith(text) and (not unended or any(
            f.value.startswith(unended) or unended in f.value for f in FAKES))


def _chat(texts: list[str | None]) -> dict[str, Any]:
    blocks: list[Any] = [{"block_type": "text", "text": t} if t is not None
                         else ImageBlock(url="https://example.com/a.png") for t in texts]
    return {"type": "chat", "message": {"role": "assistant", "additional_kwargs": {},
                                        "blocks": blocks}, "raw": None, "delta": None,
            "logprobs": None, "additional_kwargs": {}}


def _completion(text: str | None) -> dict[str, Any]:
    return {"type": "completion", "text": text, "raw": None, "delta": None, "logprobs": None,
            "additional_kwargs": {}}


def _round_trip(stream: list[Any]) -> list[Any]:
    stored: list[Any] = []
    previous: list[str | None] = []
    for response in stream:
        stored.append(compacted(response, previous))
        previous = texts_of(response)
    again: list[Any] = []
    previous = []
    for item in stored:
        again.append(expanded(item, previous))
        previous = texts_of(again[-1])
    return again


@given(st.lists(st.lists(st.one_of(st.none(), st.text(max_size=6)), max_size=3), max_size=8),
       st.booleans())
def test_compacting_chunks_loses_nothing(steps: list[list[str | None]], grow: bool) -> None:
    chats: list[Any] = []
    completions: list[Any] = []
    so_far: list[str | None] = []
    for texts in steps:
        if grow:  # each text continues the one before it at its place, where there is one
            texts = [(so_far[i] or "") + t if t is not None and i < len(so_far)
                     and so_far[i] is not None else t for i, t in enumerate(texts)]
        so_far = texts
        chats.append(_chat(texts))
        completions.append(_completion(texts[0] if texts else None))
    assert _round_trip(chats) == chats
    assert _round_trip(completions) == completions
    # recordings made before compaction hold every text whole: they are served as they are
    before: list[Any] = [{}, *chats]
    assert [expanded(c, texts_of(p)) for p, c in zip(before, chats, strict=False)] == chats


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_reasoning_and_tool_arguments_are_stored_as_what_each_chunk_adds(
        li_store: Store, asynchronous: bool) -> None:
    """Each chunk holds the reasoning and the tool call's arguments so far (in blocks, in
    `additional_kwargs`, in the tool calls read from it): stored whole, a stream took space
    quadratic in them. The replay yields every chunk as it was, and the tool calls of each,
    asked for after the stream ended."""
    sizes = []
    for words in (100, 400):
        said = " ".join(sample() for _ in range(words))
        llm = ConfidingCaller(said=said)
        with li_store.record(name="reasoning") as rec, instrument(rec):
            live = streamed(llm, asynchronous)
        assert live[-1]["tool_calls"][0]["tool_kwargs"]["body"] == said
        [step] = li_store.load_steps(rec.run_id)
        sizes.append(len(canonical_bytes(step.output)))
        with li_store.replay(rec.run_id) as player:
            assert streamed(ReplayLLM(player), asynchronous) == live
    # 4 times the words, 4 times the chunks: linear, about 4 times the bytes (quadratic: 16)
    assert sizes[1] < 6 * sizes[0]


def test_a_damaged_grown_chunk_is_refused_by_name() -> None:
    grown = {"response": {"message": {"blocks": [{"content": ""}]}},
             GROWN: [[["response", "message", "blocks", 0, "content"], "more"]]}
    with pytest.raises(ValueError, match="chunk before it, which is missing"):
        expanded_growth(grown, None)
    with pytest.raises(ValueError, match=r"string at \['response', 'message', 'blocks', 0"):
        expanded_growth(grown, {"response": {"message": {"blocks": []}}})
    whole = expanded_growth(grown, {"response": {"message": {"blocks": [{"content": "so "}]}}})
    assert whole == {"response": {"message": {"blocks": [{"content": "so more"}]}}}


@given(st.lists(st.tuples(st.text(max_size=90), st.booleans(), st.text(max_size=90)),
                max_size=8))
def test_storing_what_strings_grow_by_loses_nothing(
        steps: list[tuple[str, bool, str]]) -> None:
    # each chunk holds a string in a dict and one in a block object; a step either adds to
    # the chunk before's (grows) or starts again
    chunks: list[dict[str, Any]] = []
    thought = arguments = ""
    for added, grows, other in steps:
        thought, arguments = (thought + added, arguments + other) if grows else (added, other)
        block = types.ThinkingBlock(content=thought) if BLOCKS else TextBlock(text=thought)
        chunks.append({"response": {"message": {"blocks": [block], "additional_kwargs": {
            "tool_calls": [{"function": {"arguments": arguments}}]}}}, "tool_calls": None})
    stored = compacted_growth(chunks)
    whole: list[dict[str, Any]] = []
    for chunk in stored:
        whole.append(expanded_growth(chunk, whole[-1] if whole else None))
    assert whole == chunks
