"""langchain-core 1.8's protocol events (`stream_events(version="v3")`, LangGraph's v3 stream):
a replay yields the recorded events, also for a model that fires no token callbacks."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.prebuilt import ToolNode

from agentreplay_core import Store
from agentreplay_langchain import (
    AbandonedStreamReplayed,
    RecordingCallbackHandler,
    ReplayChatModel,
    instrument,
    replay_tools,
)
from tests.langchain.fakes import Counter, ScriptedChatModel, assert_offline, make_tools
from tests.langchain.test_langgraph import PLAN, build_graph
from tests.langchain.test_streaming import FailingWithProviderError, ProviderError

pytestmark = [
    pytest.mark.skipif(not hasattr(BaseChatModel, "_iter_v2_events"),
                       reason="protocol events came with langchain-core 1.8"),
    pytest.mark.filterwarnings("ignore::langchain_core._api.LangChainBetaWarning"),
]

QUESTION = "what is there to do in Oslo today"


def message_view(message: Any) -> dict[str, Any]:
    assert isinstance(message, AIMessage)
    return {"content": message.content, "id": message.id, "tool_calls": message.tool_calls,
            "usage": message.usage_metadata, "response_metadata": message.response_metadata}


def events_of(model: Any, prompt: str, config: dict[str, Any] | None = None
              ) -> tuple[list[dict[str, Any]], Any, BaseException | None]:
    """The events a v3 stream yields, its message, and the error that ended it."""
    stream = model.stream_events(prompt, config, version="v3")
    events: list[dict[str, Any]] = []
    try:
        for event in stream:
            events.append(dict(event))
    except Exception as exc:  # the stream's own error, compared by the caller
        return events, None, exc
    return events, stream.output_message, None


def test_v3_stream_replays_the_events_of_a_model_that_fires_no_token_callbacks(
        store: Store) -> None:
    # ScriptedChatModel's `_stream` leaves the token callbacks to `stream()`, which the v3
    # path does not call: the handler saw no chunk, and replayed the answer as whole blocks
    live_model = ScriptedChatModel(plan=[[("weather", {"city": "Oslo"})]])
    tools = make_tools(Counter())
    with store.record(name="v3") as rec:
        config = {"callbacks": [RecordingCallbackHandler(rec)]}
        live_events, live_message, _ = events_of(live_model.bind_tools(tools), QUESTION, config)
        answer_events, answer, _ = events_of(live_model, "and tomorrow", config)
    assert rec.stats.internal_errors == 0
    assert sum(e["event"] == "content-block-delta" for e in answer_events) > 3
    assert any(e.get("content", {}).get("type") == "tool_call" for e in live_events)

    with store.replay(rec.run_id) as player:
        assert_offline()
        model = ReplayChatModel(player=player)
        events, message, _ = events_of(model.bind_tools(tools), QUESTION)
        replayed_answer_events, replayed_answer, _ = events_of(model, "and tomorrow")
    assert events == live_events  # the message id in `message-start` included
    assert replayed_answer_events == answer_events
    assert message_view(message) == message_view(live_message)
    assert message_view(replayed_answer) == message_view(answer)


def test_async_v3_stream_replays_the_recorded_events(store: Store) -> None:
    async def events(model: Any, config: dict[str, Any] | None = None) -> tuple[list[Any], Any]:
        stream = await model.astream_events(QUESTION, config, version="v3")
        return [dict(e) async for e in stream], stream.output_message

    with store.record(name="v3 async") as rec:
        live, live_message = asyncio.run(events(ScriptedChatModel(), {
            "callbacks": [RecordingCallbackHandler(rec)]}))
    with store.replay(rec.run_id) as player:
        replayed, message = asyncio.run(events(ReplayChatModel(player=player)))
    assert len(live) > 4 and replayed == live
    assert message_view(message) == message_view(live_message)


def test_v3_stream_that_failed_replays_its_events_then_the_same_error(store: Store) -> None:
    with store.record(name="v3 failing") as rec:
        live, _, live_error = events_of(FailingWithProviderError(), QUESTION, {
            "callbacks": [RecordingCallbackHandler(rec)]})
    assert isinstance(live_error, ProviderError) and live

    with store.replay(rec.run_id) as player:
        replayed, _, error = events_of(ReplayChatModel(player=player), QUESTION)
    assert replayed == live
    assert type(error) is ProviderError and str(error) == str(live_error)


def test_call_recorded_by_v1_stream_replays_through_v3_as_langchain_bridges_it(
        store: Store) -> None:
    def fake() -> GenericFakeChatModel:
        return GenericFakeChatModel(messages=iter([AIMessage("a calm sunny day", id="m-1")]))

    with store.record(name="v1") as rec:
        list(fake().stream(QUESTION, config={"callbacks": [RecordingCallbackHandler(rec)]}))
    with store.replay(rec.run_id) as player:
        replayed, message, _ = events_of(ReplayChatModel(player=player), QUESTION)
    bridged, _, _ = events_of(fake(), QUESTION)  # what LangChain makes of the same chunks

    def without_id(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "id"} for e in events]
    assert without_id(replayed) == without_id(bridged)
    # the recorded message's id, not the id of this replay's run
    assert replayed[0]["id"] == message.id == "m-1"


def test_langgraph_v3_stream_replays_the_same_parts(store: Store) -> None:
    def drive(app: Any, config: dict[str, Any]) -> tuple[list[Any], Any]:
        run = app.stream_events({"messages": [HumanMessage("a day in Europe")]}, config,
                                version="v3")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parts = list(run)
        return parts, run.output

    def view(part: dict[str, Any]) -> tuple[Any, ...]:
        # LangChain's run ids, the checkpoint namespaces and the model's own name in the
        # metadata are not recorded; the rest of a part is
        data = part["params"]["data"]
        if part["method"] == "messages":
            data = data[0]
        return part["method"], part["params"]["timestamp"], part.get("seq"), repr(data)

    tools = make_tools(Counter())
    app = build_graph(ScriptedChatModel(plan=PLAN), ToolNode(tools), tools)
    # entropy=True: the parts' timestamps and the messages' ids replay too
    with store.record(name="langgraph v3", entropy=True) as rec:
        live, live_output = drive(app, {"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0
    assert sum(part["method"] == "messages" for part in live) > 20

    with store.replay(rec.run_id) as player:
        assert_offline()
        stand_ins = replay_tools(player, make_tools(Counter()))
        replay_app = build_graph(ReplayChatModel(player=player), ToolNode(stand_ins),
                                 stand_ins)
        with instrument(player):
            replayed, output = drive(replay_app, {})
    assert [view(p) for p in replayed] == [view(p) for p in live]
    assert repr(output["messages"]) == repr(live_output["messages"])


def test_v3_stream_its_consumer_stopped_reading_replays_up_to_there(store: Store) -> None:
    # LangChain never ends such a call (no on_llm_end, no on_llm_error): the recording
    # records it as abandoned when the run ends, with the events it streamed
    def first_events(model: Any, config: dict[str, Any] | None = None) -> list[Any]:
        stream = model.stream_events(QUESTION, config, version="v3")
        taken = []
        for event in stream:
            taken.append(dict(event))
            if len(taken) == 3:
                break
        return taken

    with store.record(name="v3 abandoned") as rec:
        live = first_events(ScriptedChatModel(), {"callbacks": [RecordingCallbackHandler(rec)]})
    [step] = store.load_steps(rec.run_id)
    assert step.is_error and step.output["abandoned"] is True

    with store.replay(rec.run_id) as player:  # every step is asked for
        assert first_events(ReplayChatModel(player=player)) == live
    with store.replay(rec.run_id) as player:
        events, _, error = events_of(ReplayChatModel(player=player), QUESTION)
    assert events[:3] == live and isinstance(error, AbandonedStreamReplayed)
    assert "after 3 events" in str(error)
