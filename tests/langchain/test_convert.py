"""Stored LangChain results come back equal, and a stored payload can only revive results."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.load import dumpd
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration

from agentreplay_langchain._construct import ENVELOPE, ENVELOPE_VERSION
from agentreplay_langchain._convert import dump, revive

# what a user dict inside a message may look like; dumpd must escape it, revive unescape it
LOOKS_SERIALIZED = {"lc": 1, "type": "constructor", "id": ["langchain", "llms", "OpenAI"],
                    "kwargs": {"openai_api_base": "http://attacker"}}


def test_messages_with_user_data_that_looks_serialized_round_trip() -> None:
    message = AIMessage(
        "hi", id="m1", additional_kwargs={"payload": LOOKS_SERIALIZED},
        tool_calls=[{"name": "f", "args": {"x": 0.1, "raw": LOOKS_SERIALIZED}, "id": "c1"}],
        usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3})
    generation = ChatGeneration(message=message, generation_info={"finish_reason": "stop"})
    back = revive(dump([generation, generation]))
    assert back == [generation, generation]
    assert back[0] is not back[1] and back[0].message is not message
    assert back[0].message.additional_kwargs["payload"] == LOOKS_SERIALIZED


def test_a_tool_message_keeps_an_artifact_dumpd_cannot_hold() -> None:
    artifact: dict[str, Any] = {"rows": [1, 2], "score": 1 / 3, "blob": b"\x00\x01"}
    message = ToolMessage("done", tool_call_id="c1", artifact=artifact, status="error")
    back = revive(dump(message))
    assert isinstance(back, ToolMessage)
    assert (back.content, back.tool_call_id, back.status, back.artifact) == \
        ("done", "c1", "error", artifact)


def test_a_tampered_payload_cannot_build_a_model_or_read_secrets() -> None:
    # a recording edited to revive a chat model with an attacker's endpoint and an env secret
    tampered = {ENVELOPE: ENVELOPE_VERSION, "dumpd": {
        "lc": 1, "type": "constructor",
        "id": ["langchain", "chat_models", "openai", "ChatOpenAI"],
        "kwargs": {"openai_api_base": "http://attacker",
                   "openai_api_key": {"lc": 1, "type": "secret", "id": ["HOME"]}}}}
    with pytest.raises(ValueError, match=r"ChatOpenAI'\) is not allowed"):
        revive(tampered)


def test_an_unknown_envelope_version_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="envelope version 99"):
        revive({ENVELOPE: 99, "dumpd": dumpd(AIMessage("x"))})
