"""A hand-written tool loop: record it live, replay it offline, compare the transcripts."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any, cast

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, tool

from agentreplay_core import NetworkAccessDuringReplay, ReplayDivergence, Store
from agentreplay_langchain import (
    RecordingCallbackHandler,
    ReplayChatModel,
    instrument,
    replay_tools,
)
from tests.langchain.fakes import (
    Counter,
    Plan,
    ScriptedChatModel,
    assert_offline,
    make_tools,
    transcript,
)

PLAN: Plan = [[("weather", {"city": "Paris"}), ("search", {"query": "louvre hours"})],
        [("add", {"a": 2.5, "b": 0.1})]]


def tool_loop(model: Any, tools: Sequence[BaseTool], question: str,
              config: RunnableConfig | None = None, *, narrate: bool = False
              ) -> list[BaseMessage]:
    """The loop users write by hand: call the model, run the tools it asks for, repeat;
    `narrate`: also tell the model, in text, what it called (the arguments as JSON)."""
    by_name = {t.name: t for t in tools}
    bound = model.bind_tools(tools)
    messages: list[BaseMessage] = [HumanMessage(question)]
    for _ in range(5):
        reply = bound.invoke(messages, config=config)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            messages.append(by_name[call["name"]].invoke(call, config=config))
            if narrate:
                messages.append(HumanMessage(f"you called {call['name']}"
                                             f"({json.dumps(call['args'])}): {json.dumps(call)}"))
    return messages


def record(store: Store, counter: Counter) -> tuple[Any, list[BaseMessage]]:
    model = ScriptedChatModel(plan=PLAN)
    with store.record(name="tool-loop") as rec:
        live = tool_loop(model, make_tools(counter), "plan my day",
                         {"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0 and rec.stats.unencodable == 0
    return rec.run_id, live


def test_replay_reproduces_the_transcript_without_running_tools(store: Store) -> None:
    counter = Counter()
    run_id, live = record(store, counter)
    assert counter.counts == {"weather": 1, "search": 1, "add": 1}
    again = tool_loop(ScriptedChatModel(plan=PLAN), make_tools(Counter()), "plan my day")
    assert transcript(again) != transcript(live)  # the agent is nondeterministic

    counter_during_replay = Counter()
    with store.replay(run_id) as player:
        assert_offline()
        model = ReplayChatModel(player=player)
        tools = replay_tools(player, make_tools(counter_during_replay))
        replayed = tool_loop(model, tools, "plan my day")
    assert transcript(replayed) == transcript(live)
    assert counter_during_replay.total == 0
    artifacts = [m.artifact for m in replayed if isinstance(m, ToolMessage) and m.artifact]
    assert artifacts and artifacts[0]["score"] == 0.5


def test_replay_runs_under_the_network_guard(store: Store) -> None:
    import socket

    run_id, _ = record(store, Counter())
    with store.replay(run_id, allow_unused=True) as player:
        assert player.run_id == run_id
        with pytest.raises(NetworkAccessDuringReplay):
            socket.create_connection(("203.0.113.1", 443), timeout=1)


def test_replayed_messages_are_fresh_copies(store: Store) -> None:
    run_id, live = record(store, Counter())
    with store.replay(run_id) as player:
        model = ReplayChatModel(player=player)
        replayed = tool_loop(model, replay_tools(player, make_tools(Counter())), "plan my day")
    cast(AIMessage, replayed[1]).tool_calls[0]["args"]["city"] = "changed"
    assert cast(AIMessage, live[1]).tool_calls[0]["args"]["city"] == "Paris"


def test_replayed_calls_tell_tracers_what_they_are(store: Store) -> None:
    """LangSmith's parameters of a replayed call: the replay as provider, the call's own
    model, temperature, token limit and stop sequences when it passed them."""
    from langchain_core.callbacks import BaseCallbackHandler

    class Seen(BaseCallbackHandler):
        def __init__(self) -> None:
            self.metadata: list[dict[str, Any]] = []

        def on_chat_model_start(self, serialized: dict[str, Any], messages: Any, *,
                                metadata: dict[str, Any] | None = None, **kw: Any) -> None:
            self.metadata.append({k: v for k, v in (metadata or {}).items()
                                  if k.startswith("ls_")})

    run_id, _ = record(store, Counter())
    seen = Seen()
    with store.replay(run_id) as player:
        model = ReplayChatModel(player=player)
        tool_loop(model, replay_tools(player, make_tools(Counter())), "plan my day",
                  {"callbacks": [seen]})
    first = seen.metadata[0]
    assert {k: first.get(k) for k in ("ls_provider", "ls_model_type", "ls_model_name")} == {
        "ls_provider": "agentreplay", "ls_model_type": "chat", "ls_model_name": "replay"}
    assert model._get_ls_params(stop=["END"], model="gpt-x", temperature=0.5,
                                max_tokens=7) == {
        "ls_provider": "agentreplay", "ls_model_type": "chat", "ls_model_name": "gpt-x",
        "ls_stop": ["END"], "ls_temperature": 0.5, "ls_max_tokens": 7}


@tool
def population(city: str) -> str:
    """How many people live in a city (a local, deterministic lookup)."""
    return f"{city}: 2.1 million"


@pytest.mark.parametrize("tracked", [True, False])
def test_a_tool_left_real_in_replay_is_named_at_the_end(store: Store, tracked: bool) -> None:
    plan: Plan = [[("population", {"city": "Paris"})]]
    with store.record(name="real-tool") as rec, instrument(rec):
        live = tool_loop(ScriptedChatModel(plan=plan), [population], "how big is Paris?")
    # the tool is not swapped: it runs for real, and the model's next request still matches
    with pytest.raises(ReplayDivergence) as caught, store.replay(rec.run_id) as player, \
            instrument(player) if tracked else contextlib.nullcontext():
        again = tool_loop(ReplayChatModel(player=player), [population], "how big is Paris?")
    assert transcript(again) == transcript(live)
    assert caught.value.classification == "missing_call" and caught.value.name == "population"
    # tracked, the replay knows the tool started at its recorded path
    assert ("it ran for real in this replay" in str(caught.value)) is tracked
    assert "replay_tools(player, tools)" in str(caught.value) or not tracked
    with store.replay(rec.run_id) as player, instrument(player):
        tool_loop(ReplayChatModel(player=player), replay_tools(player, [population]),
                  "how big is Paris?")


@tool
def scale(value: float, by: float) -> str:
    """Scale a value (a local, deterministic computation)."""
    return str(value * by)


def test_tool_call_arguments_replay_in_the_models_key_order(store: Store) -> None:
    # keys in an order sorting would change, at two levels (PostgreSQL's JSONB reorders too)
    plan: Plan = [[("scale", {"value": 2.0, "by": 1.5, "zz_note": {"why": "x", "as": "y"}})]]
    with store.record(name="key-order") as rec:
        live = tool_loop(ScriptedChatModel(plan=plan), [scale], "scale it",
                         {"callbacks": [RecordingCallbackHandler(rec)]}, narrate=True)
    told = str(live[3].content)
    assert '({"value": 2.0, "by": 1.5, "zz_note": {"why": "x", "as": "y"}})' in told
    assert '{"name": "scale", "args": {"value"' in told
    with store.replay(rec.run_id) as player:
        again = tool_loop(ReplayChatModel(player=player), replay_tools(player, [scale]),
                          "scale it", narrate=True)
    assert transcript(again) == transcript(live)


@tool
def forecast(city: str) -> dict[str, Any]:
    """A structured forecast, its keys in the order a service sends them (not sorted)."""
    return {"temperature": 21.5, "city": city, "details": {"wind": "W", "humidity": 40}}


def test_a_dict_a_tool_returns_replays_in_its_key_order(store: Store) -> None:
    """A tool invoked without a tool call returns its dict as it is, and a chain that puts it
    into a prompt (`str(dict)`) shows its keys in order, which the run log's JSON does not keep."""
    prompt = ChatPromptTemplate.from_messages([("human", "forecast: {forecast}")])

    def chain(weather: BaseTool, model: Any) -> Runnable[Any, Any]:
        built: Runnable[Any, Any] = (weather | (lambda f: {"forecast": str(f)}) | prompt
                                     | model)
        return built

    with store.record(name="dict-result") as rec:
        live = chain(forecast, ScriptedChatModel()).invoke(
            {"city": "Paris"}, config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert "{'temperature': 21.5, 'city': 'Paris', 'details': {'wind'" in str(live.content)
    with store.replay(rec.run_id) as player:
        (weather,) = replay_tools(player, [forecast])
        again = chain(weather, ReplayChatModel(player=player)).invoke({"city": "Paris"})
    assert again.content == live.content


@tool
def squad(team: str) -> dict[Any, Any]:
    """Players by shirt number (keys that are no strings), in the order of the team sheet."""
    return {10: "Messi", 7: {"name": "Di María", "caps": 145}, 9: "Álvarez", "coach": "Scaloni"}


def test_a_dict_with_keys_that_are_no_strings_replays_in_its_key_order(store: Store) -> None:
    # the codec stores such a dict as pairs sorted by key; a prompt built from it came back
    # in another order, a divergence that never happened
    prompt = ChatPromptTemplate.from_messages([("human", "rank: {players}")])

    def chain(sheet: BaseTool, model: Any) -> Runnable[Any, Any]:
        built: Runnable[Any, Any] = sheet | (lambda s: {"players": str(s)}) | prompt | model
        return built

    with store.record(name="int keys") as rec:
        live = chain(squad, ScriptedChatModel()).invoke(
            {"team": "ARG"}, config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert "{10: 'Messi', 7: {'name'" in str(live.content)
    with store.replay(rec.run_id) as player:
        (replayed,) = replay_tools(player, [squad])
        again = chain(replayed, ReplayChatModel(player=player)).invoke({"team": "ARG"})
    assert again.content == live.content
