"""What an `llm` step stores since the caller-cost rework, and that older runs still replay.

The request stored is the call's match view (mode, messages or prompt, tool names), from which
the recorder derives the match key; the LLM's metadata moved to the output, and responses
are stored as plain JSON. `data/legacy_run.jsonl` is a run recorded by the adapter before
that change (as of commit 35070d0: MockLLM chat, completion, stream, a prompt holding an
OpenAI-style key, redaction key "legacy-fixture-key"), exported with `export_run`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    ImageBlock,
    LogProb,
    MessageRole,
    TextBlock,
)
from llama_index.core.llms import MockLLM

from agentreplay_core import Store, decode, encode
from agentreplay_core._transfer import import_run
from agentreplay_llamaindex import ReplayLLM, instrument
from agentreplay_llamaindex._convert import encodable, llm_view, message_json
from agentreplay_llamaindex._responses import response_from_json, response_json

LEGACY = Path(__file__).parent / "data" / "legacy_run.jsonl"
#: the fake key the legacy run's fourth prompt held (stored only as a placeholder)
SECRET = "sk-proj-" + "Q7wX2kLm9PzR4tYv" * 2 + "Ab3dEf7h"


@pytest.fixture(autouse=True)
def _redaction_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "legacy-fixture-key")


def _first_calls(llm: Any) -> list[str]:
    """A chat, a completion and a streamed chat; the texts they return."""
    return [str(llm.chat([ChatMessage(role="system", content="You are terse."),
                          ChatMessage(role="user", content="first question")]).message.content),
            llm.complete("a completion prompt").text,
            "".join(c.delta or "" for c in
                    llm.stream_chat([ChatMessage(role="user", content="stream this")]))]


def _legacy_calls(llm: Any, last: str = "last question") -> list[str]:
    """The calls the legacy run recorded, in order; the texts they return."""
    first = _first_calls(llm)
    keyed = llm.chat([ChatMessage(role="user", content=f"use the key {SECRET} for this call")])
    then = llm.chat([ChatMessage(role="user", content=last)])
    return [*first, str(keyed.message.content), str(then.message.content)]


def _same_answers(replayed: list[str], live: list[str]) -> bool:
    """MockLLM echoes the prompt: the answer to the prompt holding the key was stored with
    the key's placeholder, and is served so."""
    secret = replayed[3]
    return (replayed[:3] + replayed[4:] == live[:3] + live[4:] and SECRET not in secret
            and secret.startswith("user: use the key <secret:openai:"))


def test_a_run_recorded_by_the_previous_adapter_replays(li_store: Store) -> None:
    run_id = import_run(li_store, LEGACY).run.run_id
    assert all("metadata" in s.input for s in li_store.load_steps(run_id))  # the old form
    with li_store.replay(run_id) as player:  # every recorded step must be asked for
        replayed = _legacy_calls(ReplayLLM(player))
    assert _same_answers(replayed, _legacy_calls(MockLLM()))


def test_new_recordings_keep_the_match_keys_of_old_ones(li_store: Store) -> None:
    legacy = li_store.load_steps(import_run(li_store, LEGACY).run.run_id)
    with li_store.record(name="again") as rec, instrument(rec):
        _legacy_calls(MockLLM())
    steps = li_store.load_steps(rec.run_id)
    # the recorder keys the stored view itself: the adapter's old key for the same call,
    # except for a request holding a secret, whose old key was keyed again (an HMAC)
    assert [s.match_key for i, s in enumerate(steps) if i != 3] == \
        [s.match_key for i, s in enumerate(legacy) if i != 3]
    assert steps[3].match_key != legacy[3].match_key
    assert all(sorted(s.input) in (["messages", "mode", "tools"], ["mode", "prompt", "tools"])
               for s in steps)
    assert steps[0].output["metadata"] == legacy[0].input["metadata"]
    with li_store.replay(rec.run_id) as player:
        assert _same_answers(_legacy_calls(ReplayLLM(player)), _legacy_calls(MockLLM()))


def test_a_fork_of_an_old_run_holds_both_forms_and_replays(li_store: Store) -> None:
    run_id = import_run(li_store, LEGACY).run.run_id
    with li_store.replay(run_id, on_divergence="live") as player:
        continued = _legacy_calls(ReplayLLM(player, live=MockLLM()), last="a changed question")
        fork = player.fork
    assert fork is not None
    forked = li_store.load_steps(fork.run_id)
    assert ["metadata" in s.input for s in forked] == [True, True, True, True, False]
    with li_store.replay(fork.run_id) as player:
        assert _legacy_calls(ReplayLLM(player), last="a changed question") == continued


@pytest.mark.parametrize("message", [
    ChatMessage(role=MessageRole.USER, content="plain text"),
    ChatMessage(role=MessageRole.SYSTEM, blocks=[TextBlock(text="one"), TextBlock(text="two")]),
    ChatMessage(role=MessageRole.ASSISTANT, content=""),
    ChatMessage(role=MessageRole.TOOL, content="42", additional_kwargs={"tool_call_id": "c1"}),
    ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text="see"),
                                               ImageBlock(url="https://example.com/a.png")]),
], ids=["text", "two-blocks", "empty", "tool-result", "image"])
def test_the_stored_message_is_model_dump(message: ChatMessage) -> None:
    assert message_json(message) == message.model_dump(mode="json")


def test_volatile_fields_are_left_out_of_the_view_but_text_mentioning_them_is_kept() -> None:
    kwargs = {"run_id": "r-1", "tool_call_id": "c1", "nested": {"span_id": "s-9", "keep": 1}}
    said = 'the log line read "run_id": 7'
    view = llm_view("chat", [ChatMessage(role=MessageRole.TOOL, content="x",
                                         additional_kwargs=kwargs),
                             ChatMessage(role=MessageRole.USER, content=said)], {})
    assert view["messages"][0]["additional_kwargs"] == {"tool_call_id": "c1",
                                                       "nested": {"keep": 1}}
    assert view["messages"][1]["blocks"][0]["text"] == said


def _stored_and_back(response: Any) -> Any:
    return response_from_json(decode(encode(response_json(response))))


@pytest.mark.parametrize("response", [
    ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="hi")),
    ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="",
                                     additional_kwargs={"tool_calls": [{"id": "c1"}]}),
                 raw={"id": "resp-1", "usage": {"total_tokens": 7}}, delta="d",
                 logprobs=[[LogProb(token="hi", logprob=-0.5, bytes=[104, 105])]],
                 additional_kwargs={"prompt_tokens": 3}),
    ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT,
                                     blocks=[TextBlock(text="look"),
                                             ImageBlock(image=b"\x89PNG fake",
                                                        image_mimetype="image/png")])),
    CompletionResponse(text="done", raw={"x": [1, 2.5]}, delta="ne",
                       additional_kwargs={"k": "v"}),
], ids=["text", "everything", "image", "completion"])
def test_responses_come_back_as_they_were(response: Any) -> None:
    back = _stored_and_back(response)
    assert type(back) is type(response)
    assert back.model_dump() == response.model_dump()


def test_a_streamed_chunk_is_a_snapshot() -> None:
    message = ChatMessage(role=MessageRole.ASSISTANT, content="",
                          additional_kwargs={"tool_calls": [{"id": "c1"}]})
    stored = response_json(ChatResponse(message=message), snapshot=True)
    message.additional_kwargs["tool_calls"].append({"id": "c2"})  # the integration goes on
    assert stored["message"]["additional_kwargs"] == {"tool_calls": [{"id": "c1"}]}


def test_a_custom_llm_calling_itself_is_one_step_at_its_outer_path(li_store: Store) -> None:
    async def streamed(llm: Any) -> str:
        stream = await llm.astream_chat([ChatMessage(role="user", content="async stream")])
        return "".join([c.delta or "" async for c in stream])

    # CustomLLM.chat calls complete, stream_chat stream_complete: spans of the same LLM
    # inside its own call, which record nothing
    with li_store.record(name="nested") as rec, instrument(rec):
        live = _first_calls(MockLLM())
        live.append(asyncio.run(streamed(MockLLM())))
    steps = li_store.load_steps(rec.run_id)
    assert [(s.path, s.input["mode"]) for s in steps] == [
        ("llm.chat#0", "chat"), ("llm.complete#0", "complete"), ("llm.stream_chat#0", "chat"),
        ("llm.astream_chat#0", "chat")]
    with li_store.replay(rec.run_id) as player, instrument(player):
        replay = ReplayLLM(player)
        assert [*_first_calls(replay), asyncio.run(streamed(replay))] == live


def test_an_unencodable_value_is_kept_as_a_repr_that_is_the_same_on_every_run() -> None:
    class Client:
        """An object no codec knows (an SDK client among an LLM call's keyword arguments)."""

    kept = [encodable({"client": Client()}) for _ in range(2)]
    assert kept[0] == kept[1]  # two objects, two addresses: one repr
    assert "Client object" in kept[0]["unencodable_repr"]
    assert "0x" not in kept[0]["unencodable_repr"]
