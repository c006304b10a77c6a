"""Objects built from stored fields without validation are the objects validation builds, and
LangChain still finds what it looks for in the replay classes' signatures."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import BaseModel

from agentreplay_langchain import ReplayChatModel, ReplayLLM
from agentreplay_langchain._construct import ENVELOPE, built_message, chat_generation, chat_result
from agentreplay_langchain._convert import dump
from agentreplay_langchain._tools import ReplayTool
from tests.langchain.test_convert_fields import json_dicts, messages


def _same_model(built: BaseModel, validated: BaseModel, given: set[str] | None = None) -> None:
    """Equal, and the same inside: field order, fields set, extras (what repr, copies and
    serialisation read). `given`: the fields a message was built from, which are the fields
    set (validation adds those its validators assign)."""
    assert type(built) is type(validated)
    assert built == validated
    assert list(built.__dict__) == list(validated.__dict__)
    if given is None:
        assert built.model_fields_set == validated.model_fields_set
    else:
        assert built.model_fields_set == given <= validated.model_fields_set
    assert built.__pydantic_extra__ == validated.__pydantic_extra__
    assert built.model_dump() == validated.model_dump()
    assert repr(built) == repr(validated)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_a_message_built_from_stored_fields_is_the_validated_message(
        message: BaseMessage) -> None:
    dumped = dump(message)
    assert dumped[ENVELOPE] == 2  # the fields envelope, not dumpd's
    fields = dumped["fields"]
    built = built_message(type(message), copy.deepcopy(fields))
    _same_model(built, type(message)(**copy.deepcopy(fields)), set(fields))


def test_fields_a_class_does_not_have_are_kept_as_pydantic_keeps_extras() -> None:
    fields: dict[str, Any] = {"content": "hi", "id": "m1", "from_a_newer_version": [1, 2]}
    built = built_message(AIMessage, copy.deepcopy(fields))
    _same_model(built, AIMessage(**copy.deepcopy(fields)), set(fields))
    assert built.__pydantic_extra__ == {"from_a_newer_version": [1, 2]}


def test_defaults_made_anew_are_not_shared_between_messages() -> None:
    first, second = built_message(AIMessage, {"content": "a"}), built_message(AIMessage,
                                                                              {"content": "b"})
    assert isinstance(first, AIMessage) and isinstance(second, AIMessage)
    first.additional_kwargs["x"] = 1
    first.tool_calls.append({"name": "f", "args": {}, "id": "c", "type": "tool_call"})
    assert second.additional_kwargs == {} and second.tool_calls == []


@pytest.mark.parametrize("message", [
    AIMessage("plain text", id="m1"),
    AIMessage([{"type": "text", "text": "blocks "}, {"type": "text", "text": "of text"}]),
    AIMessage([{"text": "a legacy block without a type"}]),
    HumanMessage("a human message"),
], ids=["text", "blocks", "legacy-blocks", "human"])
@pytest.mark.parametrize("info", [None, {"finish_reason": "stop"}])
def test_a_chat_generation_is_the_validated_generation(message: BaseMessage,
                                                       info: dict[str, Any] | None) -> None:
    built = chat_generation(message, info)
    validated = ChatGeneration(message=message, generation_info=info)
    _same_model(built, validated)
    assert built.text == validated.text


@settings(max_examples=100, deadline=None)
@given(messages, json_dicts)
def test_any_chat_generation_and_result_are_the_validated_ones(message: BaseMessage,
                                                               output: dict[str, Any]) -> None:
    generation = chat_generation(message, None)
    _same_model(generation, ChatGeneration(message=message, generation_info=None))
    for llm_output in (None, output):
        _same_model(chat_result([generation], llm_output),
                    ChatResult(generations=[generation], llm_output=llm_output))


def test_a_result_of_another_shape_is_validated() -> None:
    with pytest.raises(ValueError, match="llm_output"):
        chat_result([chat_generation(AIMessage("x"), None)], ["not", "a", "dict"])


@pytest.mark.parametrize("function", [
    ReplayChatModel._generate, ReplayChatModel._agenerate, ReplayLLM._generate,
    ReplayLLM._agenerate, ReplayTool._run, ReplayTool._arun,
], ids=lambda f: f.__qualname__)
def test_the_kept_signature_is_the_one_the_code_has(function: Callable[..., Any]) -> None:
    kept = inspect.signature(function)
    assert "run_manager" in kept.parameters  # what LangChain asks it on every call
    stored = function.__dict__.pop("__signature__")
    try:
        assert inspect.signature(function) == kept == stored
    finally:
        function.__signature__ = stored  # type: ignore[attr-defined]

