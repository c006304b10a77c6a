"""instrument(): recording (or run-tree tracking) attached to every LangChain run without
changing the agent's code, detached again, and never attached twice."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from agentreplay_core import Recorder, Store
from agentreplay_langchain import (
    Instrumentation,
    RecordingCallbackHandler,
    ReplayChatModel,
    RunTreeTracker,
    instrument,
    replay_tools,
)
from tests.langchain.fakes import Counter, Plan, ScriptedChatModel, make_tools, transcript
from tests.langchain.test_tool_loop import tool_loop

PLAN: Plan = [[("weather", {"city": "Paris"})]]


def chain(model: BaseChatModel) -> Runnable[dict[str, str], Any]:
    prompt = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{q}")])
    return prompt | model


def prompts(store: Store, run_id: Any) -> list[str]:
    """The human message of every recorded model call, in step order."""
    return [s.input["messages"][-1]["content"] for s in store.load_steps(run_id)
            if s.kind == "llm"]


def test_records_a_chain_without_callbacks_in_its_config(store: Store) -> None:
    model = ScriptedChatModel()
    with store.record(name="ambient") as rec:
        with instrument(rec):
            live = chain(model).invoke({"q": "one"})
        chain(model).invoke({"q": "after the with block"})
        handle = instrument(rec)
        chain(model).invoke({"q": "two"})
        handle.close()
        handle.close()  # closing twice is harmless
        chain(model).invoke({"q": "after close"})
    assert model.calls == 4
    assert prompts(store, rec.run_id) == ["one", "two"]
    assert rec.stats.internal_errors == 0
    with store.replay(rec.run_id, allow_unused=True) as player:
        assert chain(ReplayChatModel(player=player)).invoke({"q": "one"}).content == live.content


def test_an_instrument_block_that_saw_no_run_says_why_it_may_be(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """Agents run on the application's own threads do not see the context `instrument()`
    set: the run was sealed empty, and nothing said so until its replay found nothing."""
    model = ScriptedChatModel()
    with caplog.at_level(logging.WARNING, logger="agentreplay.langchain"), \
            store.record(name="own threads") as rec:
        with instrument(rec), ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda q: chain(model).invoke({"q": q}), ["a", "b"]))
        with instrument(rec):  # a block whose runs it sees: nothing to say
            chain(model).invoke({"q": "c"})
    assert model.calls == 3 and prompts(store, rec.run_id) == ["c"]
    [warning] = [r.getMessage() for r in caplog.records if "saw no LangChain run" in
                 r.getMessage()]
    assert str(rec.run_id) in warning and "ContextThreadPoolExecutor" in warning


def test_a_tool_loop_under_instrument_replays(store: Store) -> None:
    with store.record(name="ambient-loop") as rec, instrument(rec):
        live = tool_loop(ScriptedChatModel(plan=PLAN), make_tools(Counter()), "weather?")
    assert [(s.kind, s.name) for s in store.load_steps(rec.run_id)] == [
        ("llm", "chat_model"), ("tool", "weather"), ("llm", "chat_model")]
    with store.replay(rec.run_id) as player:
        replayed = tool_loop(ReplayChatModel(player=player),
                             replay_tools(player, make_tools(Counter())), "weather?")
    assert transcript(replayed) == transcript(live)


def test_instrument_twice_raises(store: Store) -> None:
    with store.record(name="twice") as rec, instrument(rec):
        with pytest.raises(RuntimeError, match=r"already active.*close the first handle"):
            instrument(rec)
        ScriptedChatModel().invoke("hi")
    assert rec.step_count == 1  # recorded once, by the first handle
    with store.replay(rec.run_id) as player, instrument(player):
        with pytest.raises(RuntimeError, match="already active"):
            instrument(player)
        ReplayChatModel(player=player).invoke("hi")
    with store.record(name="again") as rec2, instrument(rec2):  # free again once closed
        ScriptedChatModel().invoke("hi")
    assert rec2.step_count == 1


def test_instrument_rejects_other_targets() -> None:
    with pytest.raises(TypeError, match="Recorder or a Player, not str"):
        instrument("postgresql://")  # type: ignore[arg-type]


def test_explicit_handler_and_instrument_record_each_step_once(store: Store) -> None:
    with store.record(name="both") as rec, instrument(rec) as handle:
        explicit = RecordingCallbackHandler(rec)
        tool_loop(ScriptedChatModel(plan=PLAN), make_tools(Counter()), "weather?",
                  config={"callbacks": [explicit]})
        ScriptedChatModel().invoke("ambient only")
    steps = store.load_steps(rec.run_id)
    assert [(s.kind, s.name) for s in steps] == [
        ("llm", "chat_model"), ("tool", "weather"), ("llm", "chat_model"), ("llm", "chat_model")]
    assert prompts(store, rec.run_id)[-1] == "ambient only"
    assert isinstance(handle.handler, RecordingCallbackHandler)


def test_batch_in_worker_threads_records_every_call(store: Store) -> None:
    questions = [f"question {i}" for i in range(6)]
    with store.record(name="batch") as rec, instrument(rec):
        answers = chain(ScriptedChatModel()).batch([{"q": q} for q in questions],
                                                   config={"max_concurrency": 3})
    assert sorted(prompts(store, rec.run_id)) == questions
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = chain(ReplayChatModel(player=player)).batch([{"q": q} for q in questions])
    assert [a.content for a in replayed] == [a.content for a in answers]


def test_ainvoke_and_abatch_record(store: Store) -> None:
    async def run(model: Any) -> list[Any]:
        first = await chain(model).ainvoke({"q": "async one"})
        rest = await chain(model).abatch([{"q": "async two"}, {"q": "async three"}])
        return [first, *rest]

    with store.record(name="async") as rec, instrument(rec):
        live = asyncio.run(run(ScriptedChatModel()))
    assert sorted(prompts(store, rec.run_id)) == ["async one", "async three", "async two"]
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = asyncio.run(run(ReplayChatModel(player=player)))
    assert [m.content for m in replayed] == [m.content for m in live]


def test_a_handle_closed_in_another_context_detaches_everywhere(store: Store) -> None:
    model = ScriptedChatModel()

    def shutdown(handle: Instrumentation, rec: Recorder) -> None:
        # e.g. a shutdown hook in another task, which has an instrumentation of its own
        with instrument(rec):
            handle.close()
            chain(model).invoke({"q": "the other context's own"})

    def agent(rec: Recorder) -> None:
        handle = instrument(rec)
        chain(model).invoke({"q": "before"})
        contextvars.Context().run(shutdown, handle, rec)
        chain(model).invoke({"q": "after"})
        with instrument(rec):  # and instrumenting again is allowed
            chain(model).invoke({"q": "again"})

    with store.record(name="elsewhere") as rec:
        contextvars.copy_context().run(agent, rec)  # what it leaves set stays in there
    assert prompts(store, rec.run_id) == ["before", "the other context's own", "again"]


def test_instrument_with_a_player_attaches_only_the_tracker(store: Store) -> None:
    with store.record(name="tracked") as rec, instrument(rec):
        chain(ScriptedChatModel()).invoke({"q": "hi"})
    runs_before = len(store.list_runs())
    seen: list[list[BaseCallbackHandler]] = []

    def look(value: Any, config: RunnableConfig) -> Any:
        manager = config.get("callbacks")
        seen.append(list(getattr(manager, "handlers", None) or []))
        return value

    with store.replay(rec.run_id) as player, instrument(player) as handle:
        (chain(ReplayChatModel(player=player)) | RunnableLambda(look)).invoke({"q": "hi"})
    [handlers] = seen
    trackers = [h for h in handlers if isinstance(h, RunTreeTracker)]
    assert trackers == [handle.handler]
    assert not isinstance(handle.handler, RecordingCallbackHandler)
    assert len(store.list_runs()) == runs_before  # replaying recorded nothing
