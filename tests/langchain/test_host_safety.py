"""Recording never breaks the agent: it never raises into it, never swallows or replaces its
exceptions, survives values it cannot store, and loses nothing under concurrency."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool

from agentreplay_core import Recorder, SerializationError, Store, decode
from agentreplay_langchain import (
    RecordingCallbackHandler,
    ReplayChatModel,
    instrument,
    replay_tools,
)
from tests.langchain.fakes import Counter, Plan, ScriptedChatModel, make_tools, transcript
from tests.langchain.test_tool_loop import tool_loop


class AgentBug(ValueError):
    """The user's own error."""


def callbacks(rec: Recorder) -> RunnableConfig:
    return {"callbacks": [RecordingCallbackHandler(rec)]}


@pytest.mark.parametrize("attach", ["config", "instrument"])
def test_the_agents_exception_propagates_unchanged_and_the_run_fails(store: Store,
                                                                     attach: str) -> None:
    raised = AgentBug("the agent's own bug")
    model = ScriptedChatModel()

    def crash(message: BaseMessage) -> Any:
        raise raised

    chain = model | RunnableLambda(crash)
    with pytest.raises(AgentBug) as caught, store.record(name="crash") as rec:
        if attach == "config":
            chain.invoke("hello", config=callbacks(rec))
        else:
            with instrument(rec):
                chain.invoke("hello")
    assert caught.value is raised
    assert caught.value.__traceback__ is not None
    run = store.get_run(rec.run_id)
    assert run.status == "failed"
    assert [s.kind for s in store.load_steps(rec.run_id)] == ["llm"]  # the model call is kept
    assert store.verify(rec.run_id).ok


def test_a_tool_error_is_recorded_and_raised_unchanged(store: Store) -> None:
    raised = AgentBug("tool bug")

    def broken(x: int) -> int:
        raise raised

    tool = StructuredTool.from_function(broken, name="broken", description="Broken.")
    with store.record(name="tool-bug") as rec, pytest.raises(AgentBug) as caught:
        tool.invoke({"x": 1}, config=callbacks(rec))
    assert caught.value is raised
    [step] = store.load_steps(rec.run_id)
    assert step.is_error and rec.stats.internal_errors == 0


def test_late_events_after_the_run_is_sealed_do_not_raise(store: Store) -> None:
    with store.record(name="sealed") as rec:
        handler = RecordingCallbackHandler(rec)
        ScriptedChatModel().invoke("inside", config={"callbacks": [handler]})
    # e.g. a background thread still running with the handler after the block closed
    answer = ScriptedChatModel().invoke("late", config={"callbacks": [handler]})
    tools = make_tools(Counter())
    result = tools[0].invoke({"city": "Oslo"}, config={"callbacks": [handler]})
    assert str(answer.content).startswith("answer") and result.startswith("Oslo")
    assert rec.stats.internal_errors == 2  # counted, one per dropped step
    assert [s.input["messages"][0]["content"] for s in store.load_steps(rec.run_id)] == [
        "inside"]
    assert store.get_run(rec.run_id).status == "complete"
    assert store.verify(rec.run_id).ok


class Connection:
    """Something no recording can hold: a live resource with a lock in it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        return "Connection()"


class Opaque:
    """A plain object the codec does not know."""


def odd_tools(counter: Counter) -> list[BaseTool]:
    def connect(name: str) -> Connection:
        counter.hit("connect")
        return Connection()

    def opaque(name: str) -> Opaque:
        counter.hit("opaque")
        return Opaque()

    def measure(name: str) -> dict[str, float]:
        counter.hit("measure")
        return {"value": math.nan, "limit": math.inf}

    def echo(text: str) -> str:
        counter.hit("echo")
        return f"{text}\x00tail"

    return [StructuredTool.from_function(f, name=f.__name__, description=f"The {f.__name__}.")
            for f in (connect, opaque, measure, echo)]


@pytest.mark.parametrize("name", ["opaque", "connect"])
def test_an_unstorable_tool_result_is_counted_and_the_run_goes_on(store: Store,
                                                                  name: str) -> None:
    counter = Counter()
    by_name = {t.name: t for t in odd_tools(counter)}
    with store.record(name="unstorable") as rec:
        result = by_name[name].invoke({"name": "db"}, config=callbacks(rec))
        after = ScriptedChatModel().invoke("still recording", config=callbacks(rec))
    assert type(result).__name__ in ("Opaque", "Connection")  # the agent got its value
    steps = store.load_steps(rec.run_id)
    assert [(s.kind, s.name) for s in steps] == [("tool", name), ("llm", "chat_model")]
    assert rec.stats.unencodable == 1 and rec.stats.internal_errors == 0
    assert store.verify(rec.run_id).ok
    with store.replay(rec.run_id) as player:
        [tool] = replay_tools(player, [by_name[name]])
        with pytest.raises(SerializationError, match="could not be recorded"):
            tool.invoke({"name": "db"})  # says why, rather than replaying something else
        assert ReplayChatModel(player=player).invoke("still recording").content == after.content
    assert counter.total == 1


def test_nan_infinity_and_nul_characters_round_trip(store: Store) -> None:
    by_name = {t.name: t for t in odd_tools(Counter())}
    with store.record(name="odd-values") as rec:
        measured = by_name["measure"].invoke({"name": "x"}, config=callbacks(rec))
        echoed = by_name["echo"].invoke(
            {"name": "echo", "args": {"text": "x\x00y"}, "id": "call_e", "type": "tool_call"},
            config=callbacks(rec))
    assert rec.stats.unencodable == 0 and rec.stats.internal_errors == 0
    counter = Counter()
    with store.replay(rec.run_id) as player:
        tools = {t.name: t for t in replay_tools(player, odd_tools(counter))}
        again = tools["measure"].invoke({"name": "x"})
        echoed_again = tools["echo"].invoke(
            {"name": "echo", "args": {"text": "x\x00y"}, "id": "call_e", "type": "tool_call"})
    assert math.isnan(again["value"]) and again["limit"] == math.inf == measured["limit"]
    assert echoed_again.content == echoed.content == "x\x00y\x00tail"
    assert transcript([echoed_again]) == transcript([echoed])
    assert counter.total == 0
    assert store.verify(rec.run_id).ok


def test_a_model_answer_with_nul_and_nan_replays(store: Store) -> None:
    class Odd(ScriptedChatModel):
        def _reply(self, messages: list[BaseMessage], tools: Any) -> AIMessage:
            reply = super()._reply(messages, tools)
            return reply.model_copy(update={
                "content": f"{reply.content}\x00", "response_metadata": {"logprob": -math.inf,
                                                                          "p": math.nan}})

    with store.record(name="odd-model") as rec:
        live = Odd().invoke("hi", config=callbacks(rec))
    assert rec.stats.unencodable == 0
    with store.replay(rec.run_id) as player:
        replayed = ReplayChatModel(player=player).invoke("hi")
    assert replayed.content == live.content and str(replayed.content).endswith("\x00")
    assert replayed.response_metadata["logprob"] == -math.inf
    assert math.isnan(replayed.response_metadata["p"])


PLAN: Plan = [[("weather", {"city": "Paris"}), ("add", {"a": 1.0, "b": 2.0})]]


def test_eight_threads_lose_no_step_and_the_run_verifies(store: Store) -> None:
    questions = [f"trip {i}" for i in range(16)]
    counter = Counter()
    tools = make_tools(counter)

    def one_agent(question: str, config: RunnableConfig) -> list[BaseMessage]:
        # the config carries the recording handler into the loop's calls
        return tool_loop(ScriptedChatModel(plan=PLAN), tools, question, config)

    with store.record(name="eight-threads") as rec:
        results = RunnableLambda(one_agent).batch(
            questions, config={**callbacks(rec), "max_concurrency": 8})
    assert counter.total == 2 * len(questions)
    steps = store.load_steps(rec.run_id)
    # per agent: model, 2 tools, model
    assert len(steps) == 4 * len(questions) == rec.step_count
    assert [s.step for s in steps] == list(range(1, len(steps) + 1))
    assert rec.stats.internal_errors == 0 and rec.stats.lost == 0
    recorded_questions = [s.input["messages"][0]["content"] for s in steps if s.kind == "llm"]
    assert sorted(recorded_questions) == sorted(questions * 2)
    assert store.verify(rec.run_id).ok
    # every answer an agent got is in exactly one model step, the one of its own question
    for messages in results:
        for answer in (m for m in messages if isinstance(m, AIMessage)):
            [holder] = [s for s in steps if s.kind == "llm" and str(answer.id) in str(s.output)]
            assert holder.input["messages"][0]["content"] == messages[0].content


def test_recording_handler_never_changes_what_the_agent_gets(store: Store) -> None:
    question = [HumanMessage("same?")]
    model = ScriptedChatModel()
    with store.record(name="transparent") as rec:
        handler = RecordingCallbackHandler(rec)
        message = model.invoke(question, config={"callbacks": [handler]})
    message.content = "changed by the agent afterwards"
    [step] = store.load_steps(rec.run_id)
    assert "changed by the agent" not in str(step.output)  # stored at event time
    assert str(message.id) in str(step.output)


class _KeyedModel(ScriptedChatModel):
    """An integration that (carelessly) lists its credentials among its parameters."""

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": "keyed", "openai_api_key": "sk-live-123", "max_tokens": 64,
                "client_secret": "s3cret"}


def test_credentials_among_model_parameters_are_never_stored(store: Store) -> None:
    with store.record(name="keyed") as rec:
        _KeyedModel().invoke("hi", config={"callbacks": [RecordingCallbackHandler(rec)]})
    (step,) = store.load_steps(rec.run_id)
    params = decode(step.output)["model"]["invocation_params"]
    assert params["max_tokens"] == 64 and params["model_name"] == "keyed"
    assert params["openai_api_key"].startswith("<secret:field:")
    assert params["client_secret"].startswith("<secret:field:")
    assert "sk-live-123" not in repr(step.output) and "s3cret" not in repr(step.output)
