"""with_structured_output on replay, for recordings made by function calling and by JSON."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage
from pydantic import BaseModel, Field

from agentreplay_core import ReplayDivergence, Store
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel
from tests.langchain.fakes import StructuredChatModel


class Trip(BaseModel):
    """A planned trip."""

    city: str = Field(description="where to go")
    days: int = Field(description="how long")
    budget: float
    guided: bool


BOOKING: dict[str, Any] = {
    "title": "Booking",
    "description": "A hotel booking.",
    "type": "object",
    "properties": {"hotel": {"type": "string"}, "nights": {"type": "integer"},
                   "price": {"type": "number"}},
    "required": ["hotel", "nights", "price"],
}
SCHEMAS: dict[str, dict[str, Any] | type] = {"pydantic": Trip, "dict": BOOKING}
METHODS = ["function_calling", "json_schema", "json_mode"]
PROMPT = "plan a weekend away"


def raw_view(message: Any) -> dict[str, Any]:
    assert isinstance(message, AIMessage)
    return {"content": message.content, "id": message.id, "tool_calls": message.tool_calls,
            "usage": message.usage_metadata, "response_metadata": message.response_metadata}


def record(store: Store, schema: Any, method: str, *, include_raw: bool,
           model: StructuredChatModel | None = None) -> tuple[Any, Any]:
    live_model = model or StructuredChatModel()
    with store.record(name=f"structured-{method}") as rec:
        live = live_model.with_structured_output(schema, method=method,
                                                 include_raw=include_raw).invoke(
            PROMPT, config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0
    return rec.run_id, live


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_structured_output_replays_the_recorded_value(store: Store, method: str,
                                                      kind: str) -> None:
    schema = SCHEMAS[kind]
    run_id, live = record(store, schema, method, include_raw=False)
    assert isinstance(live, Trip if kind == "pydantic" else dict)
    again = StructuredChatModel().with_structured_output(schema, method=method).invoke(PROMPT)
    assert again != live  # random values: a replay that went live would not match
    with store.replay(run_id) as player:
        # no method given: the replay model finds out how the recording got the value
        replayed = ReplayChatModel(player=player).with_structured_output(schema).invoke(PROMPT)
    assert type(replayed) is type(live)
    assert replayed == live


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_structured_output_with_include_raw(store: Store, method: str, kind: str) -> None:
    schema = SCHEMAS[kind]
    run_id, live = record(store, schema, method, include_raw=True)
    assert live["parsing_error"] is None
    with store.replay(run_id) as player:
        replayed = ReplayChatModel(player=player).with_structured_output(
            schema, include_raw=True, method=method).invoke(PROMPT)
    assert set(replayed) == {"raw", "parsed", "parsing_error"}
    assert raw_view(replayed["raw"]) == raw_view(live["raw"])
    assert replayed["parsed"] == live["parsed"]
    assert replayed["parsing_error"] is None
    if method == "function_calling":
        assert replayed["raw"].tool_calls and replayed["raw"].content == ""
    else:
        assert not replayed["raw"].tool_calls and replayed["raw"].content


def test_a_recorded_parsing_error_comes_back(store: Store) -> None:
    broken = StructuredChatModel(broken_json=True)
    run_id, live = record(store, Trip, "json_schema", include_raw=True, model=broken)
    assert isinstance(live["parsing_error"], OutputParserException) and live["parsed"] is None
    with store.replay(run_id) as player:
        replayed = ReplayChatModel(player=player).with_structured_output(
            Trip, include_raw=True).invoke(PROMPT)
    assert raw_view(replayed["raw"]) == raw_view(live["raw"])
    assert replayed["parsed"] is None
    assert type(replayed["parsing_error"]) is type(live["parsing_error"])

    # without include_raw the parser raises, live and replayed alike
    with pytest.raises(OutputParserException):
        record(store, Trip, "json_schema", include_raw=False, model=broken)


def test_each_schema_replays_by_the_method_it_was_recorded_with(store: Store) -> None:
    model = StructuredChatModel()
    with store.record(name="two-schemas") as rec:
        config: Any = {"callbacks": [RecordingCallbackHandler(rec)]}
        booking = model.with_structured_output(BOOKING, method="json_schema").invoke(
            PROMPT, config=config)
        trip = model.with_structured_output(Trip, method="function_calling").invoke(
            PROMPT, config=config)
    with store.replay(rec.run_id) as player:
        replay = ReplayChatModel(player=player)
        # asked in the other order: each schema still finds its own recording
        assert replay.with_structured_output(Trip).invoke(PROMPT) == trip
        assert replay.with_structured_output(BOOKING).invoke(PROMPT) == booking


@pytest.mark.parametrize("first", ["function_calling", "json_schema"])
def test_one_schema_through_two_methods_replays_each_call_by_its_own(
        store: Store, first: str) -> None:
    # a tool-calling model, then one with JSON output, both asked for a Trip: the replay took
    # the first call's method for both, and the second diverged (its tools differed)
    second = "json_schema" if first == "function_calling" else "function_calling"
    model = StructuredChatModel()
    with store.record(name="one schema, two methods") as rec:
        config: Any = {"callbacks": [RecordingCallbackHandler(rec)]}
        live = [model.with_structured_output(Trip, method=method).invoke(PROMPT, config=config)
                for method in (first, second)]
    with store.replay(rec.run_id) as player:
        replay = ReplayChatModel(player=player)
        # each structured model made just before its call, as the agent made them
        assert [replay.with_structured_output(Trip).invoke(PROMPT) for _ in live] == live


def test_structured_output_streams_on_replay(store: Store) -> None:
    with store.record(name="structured-stream") as rec:
        live = list(StructuredChatModel().with_structured_output(BOOKING, method="json_mode")
                    .stream(PROMPT, config={"callbacks": [RecordingCallbackHandler(rec)]}))
    with store.replay(rec.run_id) as player:
        replayed = list(ReplayChatModel(player=player).with_structured_output(BOOKING)
                        .stream(PROMPT))
    assert replayed == live
    assert replayed[-1] == live[-1] and set(live[-1]) == {"hotel", "nights", "price"}


def test_a_different_schema_is_a_divergence(store: Store) -> None:
    run_id, _ = record(store, Trip, "function_calling", include_raw=False)

    class Flight(BaseModel):
        """A flight."""

        origin: str

    with store.replay(run_id, allow_unused=True) as player, pytest.raises(ReplayDivergence):
        ReplayChatModel(player=player).with_structured_output(Flight).invoke(PROMPT)


def test_strict_function_calling_replays_with_the_recorded_strictness(store: Store) -> None:
    model = StructuredChatModel()
    with store.record(name="strict") as rec:
        live = model.with_structured_output(Trip, strict=True).invoke(
            PROMPT, config={"callbacks": [RecordingCallbackHandler(rec)]})
    (step,) = store.load_steps(rec.run_id)
    # strict schemas forbid extra properties: the bound tool the model saw was different
    assert step.input["tools"][0]["parameters"]["additionalProperties"] is False
    with store.replay(rec.run_id) as player:
        assert ReplayChatModel(player=player).with_structured_output(Trip).invoke(PROMPT) == live
    with store.replay(rec.run_id) as player:
        replay = ReplayChatModel(player=player)
        assert replay.with_structured_output(Trip, strict=True).invoke(PROMPT) == live
    with store.replay(rec.run_id, allow_unused=True) as player, \
            pytest.raises(ReplayDivergence) as caught:
        ReplayChatModel(player=player).with_structured_output(Trip, strict=False).invoke(PROMPT)
    assert caught.value.classification == "params_changed"
