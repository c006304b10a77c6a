"""Stored LangChain results in the fields envelope (version 2): exact round trips on
langchain-core's own objects, the dumpd envelope (version 1) still read, and only allow-listed
classes ever built from a recording."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.load import dumpd
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    ChatMessageChunk,
    FunctionMessage,
    FunctionMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, Generation, GenerationChunk
from pydantic import BaseModel

from agentreplay_core import Store, decode, encode
from agentreplay_core._codec import canonical_bytes
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel
from agentreplay_langchain._construct import ENVELOPE, FIELDS_VERSION
from agentreplay_langchain._convert import dump, revive, revive_encoded

# what a user dict inside a message may look like: it must stay data, never be revived
LOOKS_SERIALIZED = {"lc": 1, "type": "constructor", "id": ["langchain", "llms", "OpenAI"],
                    "kwargs": {"openai_api_base": "http://attacker"}}
LOOKS_LIKE_AN_ENVELOPE = {ENVELOPE: 2, "class": "AIMessage", "fields": {"content": "x"}}
HAS_CHUNK_POSITION = "chunk_position" in AIMessageChunk.model_fields


def stored(value: Any) -> Any:
    """`value` as a replay gets it back: dumped, encoded, stored as canonical JSON, then
    revived both ways (decoded first, or straight from the encoded form), which must agree."""
    tree = orjson.loads(canonical_bytes(encode(dump(value))))
    back = revive(decode(tree))
    assert revive_encoded(tree) == back
    return back


# -- shapes ------------------------------------------------------------------------------------

texts = st.text(max_size=12)
ids = st.none() | texts
scalars = (st.none() | st.booleans() | st.integers() | texts
           | st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8)
json_dicts = st.dictionaries(texts, json_values, max_size=3)
blocks = st.one_of(
    texts,
    st.builds(lambda t: {"type": "text", "text": t}, texts),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, texts),
    st.builds(lambda i, x: {"type": "tool_use", "id": i, "name": "f", "input": x}, texts,
              json_dicts),
    st.just({"type": "text", "text": "hi", "annotations": [LOOKS_SERIALIZED]}),
)
contents = texts | st.lists(blocks, max_size=3)
tool_calls = st.lists(st.builds(lambda n, a, i: {"name": n, "args": a, "id": i},
                                texts, json_dicts, ids), max_size=2)
invalid_calls = st.lists(st.builds(
    lambda n, a, i, e: {"name": n, "args": a, "id": i, "error": e, "type": "invalid_tool_call"},
    st.none() | texts, st.none() | texts, ids, st.none() | texts), max_size=2)
usages = st.none() | st.builds(
    lambda i, o, cached: {"input_tokens": i, "output_tokens": o, "total_tokens": i + o,
                          **({"input_token_details": {"cache_read": cached}}
                             if cached is not None else {})},
    st.integers(0, 10**6), st.integers(0, 10**6), st.none() | st.integers(0, 100))
call_chunks = st.lists(st.builds(
    lambda n, a, i, k: {"name": n, "args": a, "id": i, "index": k, "type": "tool_call_chunk"},
    st.none() | texts, st.none() | st.sampled_from(['{"a": 1}', '{"a"', "", "[1, 2]"]), ids,
    st.none() | st.integers(0, 3)), max_size=2)
common = {"content": contents, "id": ids, "additional_kwargs": json_dicts,
          "response_metadata": json_dicts}


def _message(cls: type[BaseMessage], **extra: st.SearchStrategy[Any]
             ) -> st.SearchStrategy[BaseMessage]:
    return st.builds(cls, **common, **extra)


ai_chunk_extra: dict[str, st.SearchStrategy[Any]] = {
    "tool_call_chunks": call_chunks, "usage_metadata": usages, "name": st.none() | texts}
if HAS_CHUNK_POSITION:
    ai_chunk_extra["chunk_position"] = st.sampled_from([None, "last"])
messages = st.one_of(
    _message(AIMessage, tool_calls=tool_calls, invalid_tool_calls=invalid_calls,
             usage_metadata=usages, name=st.none() | texts),
    _message(AIMessageChunk, **ai_chunk_extra),
    _message(HumanMessage, name=st.none() | texts),
    _message(HumanMessageChunk),
    _message(SystemMessage),
    _message(SystemMessageChunk),
    _message(ToolMessage, tool_call_id=texts, status=st.sampled_from(["success", "error"]),
             artifact=st.none() | json_values | st.just((1, b"\x00raw", frozenset({2})))),
    _message(ToolMessageChunk, tool_call_id=texts),
    _message(ChatMessage, role=texts),
    _message(ChatMessageChunk, role=texts),
    _message(FunctionMessage, name=texts),
    _message(FunctionMessageChunk, name=texts),
)


@st.composite
def generations(draw: st.DrawFn) -> Generation:
    info = draw(st.none() | json_dicts)
    kind = draw(st.sampled_from(["chat", "chunk", "text", "text_chunk"]))
    if kind == "chat":
        return ChatGeneration(message=draw(messages), generation_info=info)
    if kind == "chunk":
        chunk = draw(_message(AIMessageChunk, **ai_chunk_extra))
        assert isinstance(chunk, AIMessageChunk)
        return ChatGenerationChunk(message=chunk, generation_info=info)
    text = draw(texts)
    return (Generation if kind == "text" else GenerationChunk)(text=text, generation_info=info)


# -- round trips -------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages)
def test_every_message_shape_round_trips_exactly_in_the_fields_envelope(
        message: BaseMessage) -> None:
    dumped = dump(message)
    assert dumped[ENVELOPE] == 2 and "dumpd" not in dumped  # not the dumpd fallback
    back = stored(message)
    assert type(back) is type(message)
    assert back == message
    assert back.model_dump() == message.model_dump()
    for name in ("content", "id", "name", "additional_kwargs", "response_metadata",
                 "tool_calls", "invalid_tool_calls", "usage_metadata", "tool_call_chunks",
                 "tool_call_id", "artifact", "status", "role", "chunk_position"):
        assert getattr(back, name, None) == getattr(message, name, None), name


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generations())
def test_every_generation_shape_round_trips_exactly(generation: Generation) -> None:
    dumped = dump(generation)
    assert dumped[ENVELOPE] == 2
    back = stored(generation)
    assert type(back) is type(generation)
    assert back == generation
    assert back.text == generation.text
    if isinstance(generation, ChatGeneration):
        assert isinstance(back, ChatGeneration)
        assert type(back.message) is type(generation.message)
        assert back.message == generation.message


def test_stored_fields_are_plain_json_and_user_data_stays_data() -> None:
    message = AIMessage(
        "hi", id="m1", additional_kwargs={"payload": LOOKS_SERIALIZED,
                                          "nested": LOOKS_LIKE_AN_ENVELOPE},
        tool_calls=[{"name": "f", "args": {"raw": LOOKS_SERIALIZED}, "id": "c1"}],
        response_metadata={"model_name": "m", "ratio": 1 / 3, "big": 2**70})
    dumped = dump(ChatGeneration(message=message, generation_info={"finish_reason": "stop"}))
    assert dumped == {
        ENVELOPE: 2, "class": "ChatGeneration", "generation_info": {"finish_reason": "stop"},
        # fields at their defaults (name, usage, invalid tool calls) are left out
        "message": {ENVELOPE: 2, "class": "AIMessage", "fields": {
            "content": "hi", "id": "m1",
            "additional_kwargs": {"payload": LOOKS_SERIALIZED, "nested": LOOKS_LIKE_AN_ENVELOPE},
            "response_metadata": {"model_name": "m", "ratio": 1 / 3, "big": 2**70},
            "tool_calls": [{"name": "f", "args": {"raw": LOOKS_SERIALIZED}, "id": "c1",
                            "type": "tool_call"}]},
            # the key order the store's sorting loses, for the dicts not in sorted order
            "fields_order": {"inner": {
                "additional_kwargs": {"keys": ["payload", "nested"], "inner": {
                    "payload": {"keys": ["lc", "type", "id", "kwargs"]}}},
                "response_metadata": {"keys": ["model_name", "ratio", "big"]},
                "tool_calls": {"items": {"0": {
                    "keys": ["name", "args", "id", "type"],
                    "inner": {"args": {"inner": {"raw": {
                        "keys": ["lc", "type", "id", "kwargs"]}}}}}}}}},
        }}
    back = revive(dumped)
    assert back.message == message
    assert repr(back.message) == repr(message)  # every dict in the model's key order
    assert back.message.additional_kwargs["nested"] == LOOKS_LIKE_AN_ENVELOPE


def test_a_message_recorded_before_fields_order_keeps_its_tool_calls_order() -> None:
    old = {ENVELOPE: 2, "class": "AIMessage", "fields": {
        "content": "", "tool_calls": [{"args": {"b": 1, "a": 2}, "id": "c1", "name": "f",
                                       "type": "tool_call"}]},
        "tool_calls_order": {"items": {"0": {"keys": ["name", "args", "id", "type"],
                                             "inner": {"args": {"keys": ["b", "a"]}}}}}}
    back = revive(old)
    assert json.dumps(back.tool_calls) == json.dumps(
        [{"name": "f", "args": {"b": 1, "a": 2}, "id": "c1", "type": "tool_call"}])


def test_a_dumped_message_is_a_snapshot_and_each_revival_a_new_object() -> None:
    message = AIMessage("hi", additional_kwargs={"tags": ["a"]},
                        tool_calls=[{"name": "f", "args": {"x": [1]}, "id": "c"}])
    dumped = dump(message)
    message.additional_kwargs["tags"].append("b")  # the agent mutates its message afterwards
    message.tool_calls[0]["args"]["x"].append(2)
    first, second = revive(dumped), revive(dumped)
    assert first.additional_kwargs == {"tags": ["a"]} and first.tool_calls[0]["args"] == {"x": [1]}
    first.additional_kwargs["tags"].append("c")
    first.tool_calls[0]["args"]["x"].append(3)
    assert second.additional_kwargs == {"tags": ["a"]}
    assert second.tool_calls[0]["args"] == {"x": [1]}
    assert revive(dumped) == second


def test_a_chat_generation_keeps_its_text_and_info() -> None:
    message = AIMessage([{"type": "text", "text": "part one "}, {"type": "text", "text": "two"}])
    generation = ChatGeneration(message=message, generation_info={"finish_reason": "stop"})
    back = stored(generation)
    assert back == generation
    assert str(back.text) == str(generation.text)
    assert back.generation_info == {"finish_reason": "stop"}


# -- what goes through dumpd instead -----------------------------------------------------------

class Parsed(BaseModel):
    answer: int


class MyMessage(AIMessage):
    pass


@pytest.mark.parametrize("value", [
    # a parsed object where structured output puts it (not plain JSON)
    AIMessage("x", additional_kwargs={"parsed": Parsed(answer=1), "n": [1, {"b": 2, "a": 1}]}),
    AIMessage("x", response_metadata={"when": (1, 2)}),
    ChatGeneration(message=AIMessage("x"), generation_info={"logprobs": (0.5,)}),
], ids=["pydantic-in-kwargs", "tuple-in-metadata", "tuple-in-info"])
def test_values_plain_json_cannot_hold_come_back_as_they_were(value: Any) -> None:
    # dumpd, which stored them before, gave the parsed object back as a dict (and turned
    # what it cannot serialise into None): the core codec keeps them as any value
    dumped = dump(value)
    assert dumped[ENVELOPE] == FIELDS_VERSION
    back = revive_encoded(encode(dumped))  # as a store gives it back
    assert back == value and repr(back) == repr(value)


def test_a_subclass_of_an_allowed_class_is_stored_with_dumpd_and_not_revived() -> None:
    dumped = dump(MyMessage(content="a subclass"))
    assert dumped[ENVELOPE] == 1
    with pytest.raises(ValueError, match="MyMessage'\\) is not allowed"):
        revive(dumped)


def test_a_document_round_trips_through_dumpd() -> None:
    document = Document(page_content="doc", metadata={"source": "s", "page": 2}, id="d1")
    assert stored(document) == document


# -- recordings made before version 2 ----------------------------------------------------------

@pytest.mark.parametrize("value", [
    AIMessage("hi", id="m1", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c1"}],
              usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}),
    ChatGeneration(message=AIMessage("hi", id="m2"), generation_info={"finish_reason": "stop"}),
    ChatGenerationChunk(message=AIMessageChunk(content="h", id="m3")),
    HumanMessage("question"),
    Generation(text="completion"),
    Document(page_content="doc"),
])
def test_version_1_envelopes_still_revive(value: Any) -> None:
    old = {ENVELOPE: 1, "dumpd": dumpd(value)}  # as agentreplay stored them before
    assert revive(decode(orjson.loads(canonical_bytes(encode(old))))) == value


def test_a_version_1_tool_message_keeps_its_artifact() -> None:
    message = ToolMessage("done", tool_call_id="c1", artifact={"rows": [1, 2]}, status="error")
    bare = message.model_copy(update={"artifact": None})
    old = {ENVELOPE: 1, "dumpd": dumpd(bare), "artifact": {"rows": [1, 2]}}
    assert revive(old) == message


# -- tampered recordings -----------------------------------------------------------------------

@pytest.mark.parametrize("tampered", [
    {ENVELOPE: 2, "class": "ChatOpenAI", "fields": {"openai_api_base": "http://attacker"}},
    {ENVELOPE: 2, "class": "Document", "fields": {"page_content": "x"}},
    {ENVELOPE: 2, "class": "BaseMessage", "fields": {"content": "x"}},
    {ENVELOPE: 2, "class": ["AIMessage"], "fields": {"content": "x"}},
    {ENVELOPE: 2, "fields": {"content": "x"}},
], ids=["model", "document", "base-class", "list-class", "no-class"])
def test_a_tampered_fields_envelope_cannot_build_anything_else(tampered: Any) -> None:
    with pytest.raises(ValueError, match="is not allowed"):
        revive(tampered)


def test_a_generation_cannot_smuggle_a_model_as_its_message() -> None:
    model = {"lc": 1, "type": "constructor",
             "id": ["langchain", "chat_models", "openai", "ChatOpenAI"],
             "kwargs": {"openai_api_base": "http://attacker",
                        "openai_api_key": {"lc": 1, "type": "secret", "id": ["HOME"]}}}
    with pytest.raises(ValueError, match=r"ChatOpenAI'\) is not allowed"):
        revive({ENVELOPE: 2, "class": "ChatGeneration", "generation_info": None,
                "message": {ENVELOPE: 1, "dumpd": model}})
    inner = {ENVELOPE: 2, "class": "Generation", "text": "x", "generation_info": None}
    with pytest.raises(ValueError, match="no message"):
        revive({ENVELOPE: 2, "class": "ChatGeneration", "message": inner})
    with pytest.raises(ValueError, match="no message"):
        revive({ENVELOPE: 2, "class": "ChatGeneration", "message": {"content": "x"}})


def test_fields_of_the_wrong_shape_are_validated_not_trusted() -> None:
    with pytest.raises(ValueError, match="content"):
        revive({ENVELOPE: 2, "class": "AIMessage", "fields": {
            "content": 5, "additional_kwargs": {}, "response_metadata": {}, "name": None,
            "id": None, "tool_calls": [], "invalid_tool_calls": [], "usage_metadata": None}})
    with pytest.raises(ValueError, match="no text"):
        revive({ENVELOPE: 2, "class": "Generation", "generation_info": None})
    with pytest.raises(ValueError, match="no fields"):
        revive({ENVELOPE: 2, "class": "AIMessage", "fields": ["content"]})
    with pytest.raises(ValueError, match="envelope version"):
        revive({ENVELOPE: True, "dumpd": dumpd(AIMessage("x"))})


def test_fields_at_their_defaults_are_left_out_and_come_back() -> None:
    message = AIMessageChunk(content="x", id="m1")
    assert dump(message)["fields"] == {"content": "x", "id": "m1"}
    back = revive({ENVELOPE: 2, "class": "AIMessageChunk",
                   "fields": {"content": "x", "id": "m1"}})
    assert back == message
    back.additional_kwargs["k"] = 1  # each default a new value
    assert revive(dump(message)).additional_kwargs == {}


def test_a_message_from_the_other_langchain_core_line_revives_equal() -> None:
    # 0.3 messages have `example`, 1.x chunks `chunk_position`: at their defaults they are not
    # stored; a field this line does not know comes back as an extra, and a field it requires
    # but the recording lacks is reported by pydantic
    recorded = {ENVELOPE: 2, "class": "AIMessage", "fields": {"content": "x"}}
    assert revive(recorded) == AIMessage(content="x")
    unknown = revive({ENVELOPE: 2, "class": "AIMessage",
                      "fields": {"content": "x", "from_the_future": 1}})
    assert unknown.content == "x" and getattr(unknown, "from_the_future", None) == 1
    with pytest.raises(ValueError, match="tool_call_id"):
        revive({ENVELOPE: 2, "class": "ToolMessage", "fields": {"content": "x"}})


# -- replay end to end -------------------------------------------------------------------------

def test_replayed_messages_equal_the_recorded_ones(store: Store) -> None:
    answers = [
        AIMessage("plain", id="a1", response_metadata={"model_name": "m"},
                  usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}),
        AIMessage([{"type": "text", "text": "blocks"}, {"type": "tool_use", "id": "t"}],
                  id="a2", tool_calls=[{"name": "f", "args": {"x": math.pi}, "id": "c1"}],
                  invalid_tool_calls=[{"name": "g", "args": "{", "id": "c2", "error": "bad",
                                       "type": "invalid_tool_call"}],
                  additional_kwargs={"refusal": None, "nested": {"k": [1, 2]}}),
    ]
    prompts = ["first", "second"]
    with store.record(name="fields") as rec:
        live = GenericFakeChatModel(messages=iter(answers))
        handler = RecordingCallbackHandler(rec)
        recorded = [live.invoke(p, config={"callbacks": [handler]}) for p in prompts]
    with store.replay(rec.run_id) as player:
        model = ReplayChatModel(player=player)
        replayed = [model.invoke(p) for p in prompts]
    assert replayed == recorded
    assert [type(m) for m in replayed] == [AIMessage, AIMessage]
    assert replayed[1].tool_calls == answers[1].tool_calls
    assert replayed[1].invalid_tool_calls == answers[1].invalid_tool_calls
