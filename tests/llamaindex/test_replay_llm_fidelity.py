"""`ReplayLLM` answers as the live model did: what it did reading no tool calls, and the
settings (metadata) of each of several models recorded under one name."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from llama_index.core import Document, SummaryIndex
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.llm import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool, ToolSelection
from pydantic import BaseModel

import agentreplay_llamaindex._llm_calls as llm_calls
from agentreplay_core import ReplayDivergence, Store
from agentreplay_llamaindex import ReplayLLM, instrument
from tests.llamaindex.models import ToolCallingLLM, sample


def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


class Answer(BaseModel):
    x: int


def _plain_text(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """The model answers in words where a tool call was asked for."""
    return ChatMessage(role=MessageRole.ASSISTANT, content=f"plain text {sample()}")


def _outcome(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        return "returned", str(call())
    except Exception as exc:
        return type(exc).__name__, str(exc)


def _tool_program(llm: LLM) -> list[tuple[str, str]]:
    tool = FunctionTool.from_defaults(fn=lookup)
    return [
        _outcome(lambda: llm.predict_and_call([tool], user_msg="hi").response),
        _outcome(lambda: llm.structured_predict(Answer, PromptTemplate("q {a}"), a=1)),
    ]


class LenientToolCaller(ToolCallingLLM):
    """Answers in words where a tool call was asked for, and reads no tool call from that
    without raising whatever `error_on_no_tool_call` says (as LlamaIndex's own
    `MockFunctionCallingLLM` does)."""

    def _reply(self, messages: Sequence[ChatMessage], tools: list[Any]) -> ChatMessage:
        return _plain_text(messages)

    def get_tool_calls_from_response(self, response: ChatResponse,
                                     error_on_no_tool_call: bool = True, **kwargs: Any
                                     ) -> list[ToolSelection]:
        return super().get_tool_calls_from_response(response, error_on_no_tool_call=False)


def test_a_model_that_ignores_error_on_no_tool_call_replays_without_raising(
        li_store: Store) -> None:
    """A model (LlamaIndex's own mock too) returns no tool calls where
    `error_on_no_tool_call=True`:
    `predict_and_call` returns the text, `structured_predict` raises LlamaIndex's own error.
    The replay made up a "no tool call" error for both."""
    with li_store.record(name="no-tool-call") as rec, instrument(rec):
        live = _tool_program(LenientToolCaller())
    assert live[0][0] == "returned"
    # LlamaIndex's own error (0.14: "did not return any tool calls for structured output";
    # earlier lines: an IndexError), whatever it is
    assert live[1][0] != "returned"
    with li_store.replay(rec.run_id) as player, instrument(player):
        assert _tool_program(ReplayLLM(player)) == live


class NoToolCallError(ValueError):
    """An integration's own error for a response without the tool call it was told to make."""


class StrictToolCaller(ToolCallingLLM):
    """Raises its own error, with the response's text, where it finds no tool call."""

    def get_tool_calls_from_response(self, response: ChatResponse,
                                     error_on_no_tool_call: bool = True, **kwargs: Any
                                     ) -> list[ToolSelection]:
        calls = super().get_tool_calls_from_response(response, error_on_no_tool_call=False)
        if not calls and error_on_no_tool_call:
            raise NoToolCallError(f"no tool call in {response.message.content!r}")
        return calls


def test_the_live_models_own_no_tool_call_error_is_raised_again(
        li_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The error the live model raised, not one made up; chat and stream alike. A run
    recorded before the live model's answer was stored still gets the made-up error."""
    def program(llm: Any) -> list[tuple[str, str]]:
        response = llm.chat([ChatMessage(role=MessageRole.USER, content="hi")])
        *_, last = llm.stream_chat([ChatMessage(role=MessageRole.USER, content="again")])
        return [_outcome(lambda: llm.get_tool_calls_from_response(response)),
                _outcome(lambda: llm.get_tool_calls_from_response(last)),
                _outcome(lambda: llm.get_tool_calls_from_response(
                    response, error_on_no_tool_call=False))]

    with li_store.record(name="strict") as rec, instrument(rec):
        live = program(StrictToolCaller())
    assert [kind for kind, _ in live] == ["NoToolCallError", "NoToolCallError", "returned"]
    with li_store.replay(rec.run_id) as player, instrument(player):
        assert program(ReplayLLM(player)) == live

    def before_the_fix(output: dict[str, Any], instance: Any, response: Any) -> None:
        output["tool_calls"] = llm_calls._tool_calls(instance, response)

    monkeypatch.setattr(llm_calls, "add_tool_calls", before_the_fix)
    with li_store.record(name="strict-old") as old, instrument(old):
        program(StrictToolCaller())
    with li_store.replay(old.run_id) as player, instrument(player):
        replayed = program(ReplayLLM(player))
    assert replayed[0] == ("ValueError", "Expected at least one tool call, but got 0 tool "
                           "calls (replayed from the recording).")


class SizedModel(CustomLLM):
    """One model name, configured for short or long answers (`max_tokens` of a real
    integration, which its metadata reports as `num_output`)."""

    max_tokens: int = 256

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="sized", context_window=2000, num_output=self.max_tokens)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        return CompletionResponse(text=f"answer {sample()}")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError


_DOCS = [Document(text="lorem ipsum dolor sit amet " * 60 + os.urandom(4).hex(), id_=f"d{i}")
         for i in range(4)]


def _one_engine_after_the_other(short: LLM, long: LLM) -> list[str]:
    index = SummaryIndex.from_documents(_DOCS)
    first = str(index.as_query_engine(llm=short).query("summary?"))
    return [first, str(index.as_query_engine(llm=long).query("details?"))]


def _both_engines_first(short: LLM, long: LLM) -> list[str]:
    index = SummaryIndex.from_documents(_DOCS)
    engines = [index.as_query_engine(llm=short), index.as_query_engine(llm=long)]
    return [str(engines[0].query("summary?")), str(engines[1].query("details?"))]


def test_models_of_one_name_with_other_settings_replay(li_store: Store) -> None:
    """Each query engine packs its prompt for its own model's output size; `ReplayLLM(player)`
    reported the first recorded step's settings to both."""
    with li_store.record(name="two-sizes") as rec, instrument(rec):
        live = _one_engine_after_the_other(SizedModel(max_tokens=64),
                                           SizedModel(max_tokens=1000))
    with li_store.replay(rec.run_id) as player, instrument(player):
        assert _one_engine_after_the_other(ReplayLLM(player), ReplayLLM(player)) == live


def test_metadata_or_live_chooses_the_settings(li_store: Store) -> None:
    with li_store.record(name="two-sizes-first") as rec, instrument(rec):
        live = _both_engines_first(SizedModel(max_tokens=64), SizedModel(max_tokens=1000))
    with li_store.replay(rec.run_id) as player, instrument(player):
        short = ReplayLLM(player, metadata={"num_output": 64})
        long = ReplayLLM(player, metadata=SizedModel(max_tokens=1000).metadata)
        assert (short.metadata.num_output, long.metadata.num_output) == (64, 1000)
        assert _both_engines_first(short, long) == live
        with pytest.raises(ValueError, match=r"num_output=64\) / \(num_output=1000"):
            ReplayLLM(player, metadata={"num_output": 5})
    with li_store.replay(rec.run_id) as player, instrument(player):
        assert _both_engines_first(ReplayLLM(player, live=SizedModel(max_tokens=64)),
                                   ReplayLLM(player, live=SizedModel(max_tokens=1000))) == live


def test_a_divergence_says_the_models_settings_differ(li_store: Store) -> None:
    """Both engines built before either ran: nothing tells the stand-ins apart, and the
    divergence names the settings, not a changed prompt."""
    with li_store.record(name="two-sizes-unchosen") as rec, instrument(rec):
        _both_engines_first(SizedModel(max_tokens=64), SizedModel(max_tokens=1000))
    with pytest.raises(ReplayDivergence) as caught, li_store.replay(rec.run_id) as player, \
            instrument(player):
        _both_engines_first(ReplayLLM(player), ReplayLLM(player))
    diverged = caught.value
    assert diverged.classification == "params_changed"
    assert "the model's settings differ" in str(diverged)
    assert "recorded with num_output=1000, this ReplayLLM reported num_output=64" \
        in str(diverged)
    assert "metadata=" in str(diverged)
