"""Decision models (langchain-core 1.8's classifiers) and the middlewares that ask them:
`ModelRouterMiddleware` picks the model of a run, `AutoModeMiddleware` blocks risky tool calls.
Their answers are recorded like a model's and served by `ReplayDecisionModel`."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from agentreplay_core import ReplayDivergence, Store
from agentreplay_langchain import RecordingCallbackHandler, instrument
from tests.langchain.fakes import (
    Counter,
    Plan,
    ScriptedChatModel,
    assert_offline,
    make_tools,
    nonce,
    transcript,
)

decisions = pytest.importorskip("langchain_core.decisions",
                                reason="decision models are langchain-core 1.8's")
middleware = pytest.importorskip("langchain.agents.middleware",
                                 reason="create_agent is langchain 1.x")
from langchain.agents import create_agent  # noqa: E402

from agentreplay_langchain import ReplayDecisionModel, ReplayMiddleware  # noqa: E402

PLAN: Plan = [[("weather", {"city": "Oslo"}), ("add", {"a": 0.1, "b": 0.2})],
        [("search", {"query": "fjords"})]]


def _share() -> float:
    return (int.from_bytes(os.urandom(2), "big") + 1) / 65537


class RandomClassifier(decisions.BaseDecisionModel):  # type: ignore[misc,name-defined]
    """A provider's classifier: random distributions and a random request id, so that only
    the recording can reproduce an answer; fails with a provider error on a state saying
    "outage"; counts its calls."""

    model: str = "random-classifier"
    calls: int = 0

    @property
    def _provider(self) -> str:
        return "random"

    def _classify(self, state: Any, questions: dict[str, Any]) -> Any:
        self.calls += 1
        if "outage" in str(state):
            raise ConnectionError(f"classifier unavailable ({nonce()})")
        answers: dict[str, Any] = {}
        for qid, question in questions.items():
            if question.type == "choice":
                weights = {label: _share() for label in question.criteria}
                total = sum(weights.values())
                probabilities = {label: w / total for label, w in weights.items()}
                best = max(probabilities, key=probabilities.__getitem__)
                answers[qid] = decisions.ChoiceAnswer(
                    type="choice", choice=best, probabilities=probabilities,
                    confidence=probabilities[best])
            else:
                answers[qid] = decisions.NoulAnswer(type="noul", noul=_share())
        return decisions.ClassifierResponse(
            model=self.model, answers=answers, request_id=f"req_{nonce()}",
            usage={"input_tokens": int.from_bytes(os.urandom(1), "big"), "output_tokens": 1})


ROUTES = ("small", "large", "medium", "a-very-long-route-name")


def router(classifier: Any, models: Mapping[str, Any]) -> Any:
    return middleware.ModelRouterMiddleware(
        choices={name: middleware.ModelChoice(model=models[name], criteria=f"tasks for {name}")
                 for name in ROUTES},
        instructions="Pick the cheapest model that can do it.", classifier=classifier)


def routed_agent(classifier: Any, *, replay: Any = None) -> tuple[Any, dict[str, Any]]:
    """An agent whose router picks one of four models, each a scripted model of its own."""
    models = {name: ScriptedChatModel(plan=PLAN) for name in ROUTES}
    stack = [router(classifier, models)] + ([replay] if replay is not None else [])
    return create_agent(ScriptedChatModel(plan=PLAN), make_tools(Counter()),
                        middleware=stack), models


def ask(agent: Any, text: str, *, use_async: bool) -> dict[str, Any]:
    state = {"messages": [HumanMessage(text)]}
    return asyncio.run(agent.ainvoke(state)) if use_async else agent.invoke(state)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_routed_agent_replays_its_route_and_answers(store: Store, use_async: bool) -> None:
    with store.record(name="router", entropy=True) as rec, instrument(rec):
        agent, models = routed_agent(RandomClassifier())
        live = ask(agent, "a weekend in Oslo", use_async=use_async)
    assert rec.stats.internal_errors == 0
    [decision] = [s for s in store.load_steps(rec.run_id) if s.kind == "decision"]
    # the whole answer: the route with its distribution (in the questions' key order), usage
    # and the provider's request id
    assert decision.output["response"]["answers"]["model_route"]["choice"] \
        == live["model_route"].choice
    assert decision.output["model"] == {"ls_provider": "random",
                                        "ls_model_name": "random-classifier"}

    with store.replay(rec.run_id) as player, instrument(player):
        assert_offline()
        agent, models = routed_agent(ReplayDecisionModel(player=player),
                                     replay=ReplayMiddleware(player))
        again = ask(agent, "a weekend in Oslo", use_async=use_async)
    assert all(m.calls == 0 for m in models.values())
    assert again["model_route"] == live["model_route"]
    assert list(again["model_route"].probabilities) == list(live["model_route"].probabilities)
    assert transcript(again["messages"]) == transcript(live["messages"])


def test_a_classifier_left_live_in_replay_is_reported(store: Store) -> None:
    """The classifier not swapped for its stand-in runs (it is the agent's code): its recorded
    answer is left over, and the replay says so rather than passing with another route."""
    with store.record(name="router") as rec, instrument(rec):
        live = ask(routed_agent(RandomClassifier())[0], "a weekend in Oslo", use_async=False)
    with pytest.raises(ReplayDivergence) as unused, \
            store.replay(rec.run_id, allow_unused=False) as player, instrument(player):
        ask(routed_agent(RandomClassifier(), replay=ReplayMiddleware(player))[0],
            "a weekend in Oslo", use_async=False)
    assert unused.value.classification == "missing_call"
    assert "decision 'decision_model'" in str(unused.value)
    assert live["model_route"].choice in ROUTES


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_failing_classifier_fails_again_in_replay(store: Store, use_async: bool) -> None:
    with store.record(name="outage") as rec, instrument(rec), \
            pytest.raises(ConnectionError) as live:
        ask(routed_agent(RandomClassifier())[0], "during the outage", use_async=use_async)
    with store.replay(rec.run_id) as player, instrument(player), \
            pytest.raises(ConnectionError) as again:
        ask(routed_agent(ReplayDecisionModel(player=player), replay=ReplayMiddleware(player))[0],
            "during the outage", use_async=use_async)
    assert str(again.value) == str(live.value)


def guarded_agent(classifier: Any, tools: list[Any], *, replay: Any = None) -> Any:
    guard = middleware.AutoModeMiddleware(tools=["weather", "search"], classifier=classifier)
    return create_agent(ScriptedChatModel(plan=PLAN), tools,
                        middleware=[guard] + ([replay] if replay is not None else []))


def test_auto_mode_blocks_and_allows_the_recorded_tool_calls(store: Store) -> None:
    """Each guarded tool call is classified (at random); what was blocked and what ran is the
    recording's in replay, and the tools never run."""
    with store.record(name="auto-mode", entropy=True) as rec:
        live = guarded_agent(RandomClassifier(), make_tools(Counter())).invoke(
            {"messages": [HumanMessage("a weekend in Oslo")]},
            config={"callbacks": [RecordingCallbackHandler(rec)]})
    asked = [s for s in store.load_steps(rec.run_id) if s.kind == "decision"]
    assert [s.input["state"]["tool_call"]["name"] for s in asked] == ["weather", "search"]
    counter = Counter()
    with store.replay(rec.run_id) as player, instrument(player):
        again = guarded_agent(ReplayDecisionModel(player=player), make_tools(counter),
                              replay=ReplayMiddleware(player)).invoke(
            {"messages": [HumanMessage("a weekend in Oslo")]})
    assert counter.total == 0
    assert transcript(again["messages"]) == transcript(live["messages"])


def test_a_changed_question_asks_the_live_classifier_in_the_fork(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    with store.record(name="router", entropy=True) as rec, instrument(rec):
        ask(routed_agent(RandomClassifier())[0], "a weekend in Oslo", use_async=False)
    classifier = RandomClassifier()
    with store.replay(rec.run_id, on_divergence="live") as player, instrument(player):
        agent, models = routed_agent(ReplayDecisionModel(player=player, live=classifier),
                                     replay=ReplayMiddleware(player))
        forked = ask(agent, "a week in Bergen", use_async=False)
        fork = player.fork
    assert fork is not None and classifier.calls == 1
    [decision] = [s.step for s in store.load_steps(rec.run_id) if s.kind == "decision"]
    assert f"diverged at step {decision} (prompt_changed)" in caplog.text
    assert sum(m.calls for m in models.values()) == 3  # the route's model, live
    with store.replay(fork.run_id) as player, instrument(player):
        again = ask(routed_agent(ReplayDecisionModel(player=player),
                                 replay=ReplayMiddleware(player))[0],
                    "a week in Bergen", use_async=False)
    assert again["model_route"] == forked["model_route"]
    assert transcript(again["messages"]) == transcript(forked["messages"])
