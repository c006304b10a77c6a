"""A secret a model streams in a tool call's arguments (or its reasoning, or a protocol
event's deltas) is stored as its placeholder: no chunk, and no chunks joined, hold it, in any
of the shapes providers stream tool calls in; the replay streams the redacted call, or the
live one when given the secrets."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult

from agentreplay_core import Store
from agentreplay_core._codec import canonical_bytes
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel
from agentreplay_langchain._convert import revive
from tests.langchain.test_streamed_secrets import FAKES, pieces
from tests.support.secret_leaks import leaks

SAID = "Sending what the config holds: " + " and ".join(f.in_text for f in FAKES)
ARGS = json.dumps({"to": "ops", "body": SAID})
SHAPES = ["tool_call_chunks", "openai_kwargs", "anthropic_blocks", "v1_blocks", "reasoning"]


@pytest.fixture(autouse=True)
def _redaction_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "streamed-tool-secrets-key")


def joined_by_place(items: list[Any]) -> bytes:
    """The strings at each place (the same keys and positions) in `items`, joined in order: a
    secret cut across the items shows whole in these."""
    places: dict[tuple[Any, ...], list[str]] = {}

    def walk(value: Any, place: tuple[Any, ...]) -> None:
        if isinstance(value, str):
            places.setdefault(place, []).append(value)
        elif isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, (*place, key))
        elif isinstance(value, list):
            for position, inner in enumerate(value):
                walk(inner, (*place, position))

    for item in items:
        walk(item, ())
    return "\n".join("".join(texts) for texts in places.values()).encode()


def chunk_of(shape: str, piece: str, first: bool) -> AIMessageChunk:
    """A chunk that adds `piece` to the call's arguments (to its reasoning, for "reasoning"),
    as providers' integrations make them."""
    call = tool_call_chunk(name="send" if first else None, args=piece,
                           id="call_1" if first else None, index=1)
    if shape == "reasoning":
        return AIMessageChunk(content=[{"type": "thinking", "thinking": piece, "index": 0}])
    if shape == "openai_kwargs":  # langchain-openai 0.x: the raw call beside the parsed one
        raw = {"index": 1, "id": call["id"], "type": "function",
               "function": {"name": call["name"], "arguments": piece}}
        return AIMessageChunk(content="", additional_kwargs={"tool_calls": [raw]},
                              tool_call_chunks=[call])
    if shape == "anthropic_blocks":
        block = {"type": "input_json_delta", "partial_json": piece, "index": 1}
        return AIMessageChunk(content=[block], tool_call_chunks=[call])
    if shape == "v1_blocks":
        return AIMessageChunk(content=[dict(call)], tool_call_chunks=[call])
    return AIMessageChunk(content="", tool_call_chunks=[call])


class CallingTool(BaseChatModel):
    """Passes the credentials it was shown on to a tool, its arguments streamed 3 characters
    a chunk."""

    shape: str

    @property
    def _llm_type(self) -> str:
        return "calling-tool"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        raise NotImplementedError("streams only")

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        text = SAID if self.shape == "reasoning" else ARGS
        for number, piece in enumerate(pieces(text)):
            chunk = ChatGenerationChunk(message=chunk_of(self.shape, piece, number == 0))
            if run_manager:
                run_manager.on_llm_new_token("", chunk=chunk)
            yield chunk


def streamed(model: Any, **config: Any) -> AIMessageChunk:
    merged: Any = None
    for chunk in model.stream("send the config to ops", config=config):
        merged = chunk if merged is None else merged + chunk
    assert isinstance(merged, AIMessageChunk)
    return merged


def placeholders_as_rules(value: Any) -> str:
    return re.sub(r"<secret:([a-z_]+):[0-9a-f]+>", r"<secret:\1>", json.dumps(value))


def view(message: AIMessageChunk) -> dict[str, Any]:
    return {"content": message.content, "tool_calls": message.tool_calls,
            "invalid_tool_calls": message.invalid_tool_calls,
            "additional_kwargs": message.additional_kwargs}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_secret_streamed_in_tool_call_arguments_is_stored_as_its_placeholder(
        store: Store, shape: str) -> None:
    with store.record(name=f"tool-secrets-{shape}") as rec:
        live = streamed(CallingTool(shape=shape), callbacks=[RecordingCallbackHandler(rec)])
    assert rec.stats.internal_errors == 0
    if shape != "reasoning":
        assert live.tool_calls[0]["args"]["body"] == SAID
    [step] = store.load_steps(rec.run_id)
    assert leaks(canonical_bytes(step.output), FAKES) == []
    assert leaks(joined_by_place(step.output["chunks"]), FAKES) == []

    with store.replay(rec.run_id) as player:
        redacted = streamed(ReplayChatModel(player=player))
    # the chunks join to the call the step stores whole (redacted on its own: a secret that
    # JSON escapes, written escaped in the arguments' text, has a placeholder of its own)
    [stored] = step.output["generations"]
    assert placeholders_as_rules(view(redacted)) == placeholders_as_rules(
        view(revive(stored).message))
    assert leaks(json.dumps(view(redacted)).encode(), FAKES) == []
    assert "<secret:" in json.dumps(view(redacted))
    with store.replay(rec.run_id, secrets=[f.value for f in FAKES]) as player:
        again = streamed(ReplayChatModel(player=player))
    assert view(again) == view(live)


def joined_args(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"].get("args", "") for e in events
                   if e["event"] == "content-block-delta")


@pytest.mark.skipif(not hasattr(BaseChatModel, "_iter_v2_events"),
                    reason="protocol events came with langchain-core 1.8")
def test_a_secret_in_protocol_event_deltas_is_stored_as_its_placeholder(store: Store) -> None:
    def events(model: Any, **config: Any) -> list[dict[str, Any]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the v3 stream is beta
            stream = model.stream_events("send the config to ops", config, version="v3")
            return [dict(event) for event in stream]

    with store.record(name="event-secrets") as rec:
        live = events(CallingTool(shape="tool_call_chunks"),
                      callbacks=[RecordingCallbackHandler(rec)])
    assert len(live) > 100 and joined_args(live) == ARGS
    [step] = store.load_steps(rec.run_id)
    assert leaks(canonical_bytes(step.output), FAKES) == []
    assert leaks(joined_by_place(step.output["events"]), FAKES) == []
    assert leaks(joined_by_place(step.output["chunks"]), FAKES) == []
    with store.replay(rec.run_id) as player:
        replayed = events(ReplayChatModel(player=player))
    assert leaks(json.dumps(replayed).encode(), FAKES) == []
    with store.replay(rec.run_id, secrets=[f.value for f in FAKES]) as player:
        again = events(ReplayChatModel(player=player))
    # each secret whole in the delta where it ended: the events join to the live ones
    assert [e["event"] for e in again] == [e["event"] for e in live]
    assert joined_args(again) == joined_args(live) == ARGS
    assert [e for e in again if e["event"] != "content-block-delta"] == [
        e for e in live if e["event"] != "content-block-delta"]
