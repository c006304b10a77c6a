"""The mode switch: the same agent code records, replays or runs untouched, as a `Session` (or
`AGENTREPLAY_MODE` in a real process) decides, through `instrument()` and the `replayable_*`
factories."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.vectorstores import InMemoryVectorStore

from agentreplay_core import Session, Store, active_session
from agentreplay_langchain import (
    Instrumentation,
    RecordingCallbackHandler,
    RecordingEmbeddings,
    ReplayChatModel,
    ReplayEmbeddings,
    ReplayLLM,
    ReplayRetriever,
    ReplayTool,
    RunTreeTracker,
    instrument,
    replayable_chat_model,
    replayable_embeddings,
    replayable_llm,
    replayable_retriever,
    replayable_tools,
)
from tests.langchain.fakes import (
    Counter,
    HashEmbeddings,
    NamedStructuredModel,
    ScriptedChatModel,
    ScriptedLLM,
    assert_offline,
    make_tools,
    network_attempts,
)
from tests.langchain.mode_switch_agent import (
    DOCS,
    agent,
    live_parts,
    unreachable_parts,
)

ROOT = Path(__file__).resolve().parents[2]
KINDS = ["embedding", "embedding", "retriever", "llm", "tool", "tool", "llm"]


def attached() -> list[BaseCallbackHandler]:
    """The agentreplay handlers a LangChain run started here gets."""
    seen: list[BaseCallbackHandler] = []

    def look(value: Any, config: RunnableConfig) -> Any:
        manager = config.get("callbacks")
        seen.extend(getattr(manager, "handlers", None) or [])
        return value

    RunnableLambda(look).invoke(None)
    return [h for h in seen if isinstance(h, RunTreeTracker)]


def _active(handle: Instrumentation) -> bool:
    return handle.active  # (a function: mypy would keep what an earlier assert narrowed)


def prompts(store: Store, run_id: Any) -> list[str]:
    return [s.input["messages"][-1]["content"] for s in store.load_steps(run_id)]


def test_the_same_agent_records_then_replays_with_nothing_live(store: Store) -> None:
    parts = live_parts()
    with Session("record", store, name="mode-switch") as session:
        live = agent(parts)
        run_id = session.recorder.run_id if session.recorder else None
    assert run_id is not None
    assert [s.kind for s in store.load_steps(run_id)] == KINDS
    assert parts.counter.counts == {"weather": 1, "search": 1}
    assert agent(live_parts()) != live  # outside a session: live, and nondeterministic

    with network_attempts() as attempts, Session("replay", store, run_id=run_id):
        assert_offline()
        replayed = agent(unreachable_parts())
    assert replayed == live
    assert attempts == []
    assert len(store.list_runs()) == 1  # replaying recorded nothing


def vector_retriever() -> Any:
    """A real vector-store retriever (InMemoryVectorStore over float64 embeddings)."""
    vectors = InMemoryVectorStore(embedding=HashEmbeddings())
    vectors.add_documents(DOCS)
    return vectors.as_retriever()


def test_the_factories_pick_the_backend_from_the_session(store: Store) -> None:
    counter = Counter()
    model, llm, embeddings = ScriptedChatModel(), ScriptedLLM(), HashEmbeddings()
    tools, retriever = make_tools(counter), vector_retriever()
    assert active_session() is None
    assert replayable_chat_model(model) is model and replayable_llm(llm) is llm
    assert replayable_embeddings(embeddings) is embeddings
    assert replayable_retriever(retriever) is retriever
    assert replayable_tools(tools) == tools
    with Session("off"):
        assert replayable_chat_model(model) is model
        assert replayable_embeddings(embeddings) is embeddings
    with Session("record", store, name="factories") as session:
        assert replayable_chat_model(model) is model and replayable_llm(llm) is llm
        assert replayable_retriever(retriever) is retriever
        assert replayable_tools(tools) == tools
        recording = replayable_embeddings(embeddings)
        assert isinstance(recording, RecordingEmbeddings)
        assert recording.recorder is session.recorder and recording.inner is embeddings
        vector = recording.embed_query("one")
        llm.invoke("complete this")
        run_id = session.run_id
    with Session("replay", store, run_id=run_id):
        replay_model = replayable_chat_model(model)
        assert isinstance(replay_model, ReplayChatModel) and replay_model.live is None
        # what code that inspects the model reads (create_agent's structured-output choice)
        named = replayable_chat_model(NamedStructuredModel(
            profile={"structured_output": True, "max_input_tokens": 1000}))
        assert isinstance(named, ReplayChatModel) and named.model_name == "gpt-4o-mini"
        assert getattr(named, "profile", None) == ({
            "structured_output": True, "max_input_tokens": 1000}
            if "profile" in BaseChatModel.model_fields else None)  # langchain-core 1.x
        replay_llm = replayable_llm(llm)
        assert isinstance(replay_llm, ReplayLLM) and replay_llm.live is None
        replay_embeddings = replayable_embeddings(embeddings)
        assert isinstance(replay_embeddings, ReplayEmbeddings) and replay_embeddings.live is None
        assert replay_embeddings.embed_query("one") == vector
        replay_retriever = replayable_retriever(retriever)
        assert isinstance(replay_retriever, ReplayRetriever) and replay_retriever.live is None
        replayed_tools = replayable_tools(tools)
        assert all(isinstance(t, ReplayTool) for t in replayed_tools)
        assert [t.name for t in replayed_tools] == [t.name for t in tools]
        assert replay_llm.invoke("complete this").startswith("completion ")
    assert counter.total == 0 and llm.calls == 1


def test_a_replay_that_goes_live_at_the_divergence_forks(store: Store) -> None:
    with Session("record", store, name="before the fix") as session:
        live = agent(live_parts())
        run_id = session.run_id

    parts = live_parts()
    options = {"on_divergence": "live", "allow_unused": True}
    with Session("replay", store, run_id=run_id, replay_options=options) as session:
        fixed = agent(parts, style="Be brief. ")
        player = session.player
    assert player is not None and player.fork is not None
    fork = store.get_run(player.fork.run_id)
    assert fork.parent_run_id == run_id and fork.fork_step == KINDS.index("llm") + 1
    # the retrieval came from the recording; from the changed prompt on, the live parts ran
    assert fixed["docs"] == live["docs"]
    assert fixed["transcript"][1] != live["transcript"][1]
    assert parts.counter.counts == {"weather": 1, "search": 1}
    assert isinstance(parts.model, ScriptedChatModel) and parts.model.calls == 2
    assert getattr(parts.embeddings, "calls", None) == 0

    with Session("replay", store, run_id=fork.run_id):  # the fork replays like any recording
        again = agent(unreachable_parts(), style="Be brief. ")
    assert again == fixed


def test_a_replayable_llm_goes_live_where_the_replay_may(store: Store) -> None:
    llm = ScriptedLLM()
    with Session("record", store, name="text llm") as session:
        replayable_llm(llm).invoke("the sky is")
        run_id = session.run_id
    options = {"on_divergence": "live", "allow_unused": True}
    with Session("replay", store, run_id=run_id, replay_options=options) as session:
        replay = replayable_llm(llm)
        assert isinstance(replay, ReplayLLM) and replay.live is llm
        answer = replay.invoke("the sea is")
        player = session.player
    assert "of the sea is" in answer and llm.calls == 2
    assert player is not None and player.fork is not None


def test_instrument_without_a_session_is_inert() -> None:
    assert active_session() is None
    with instrument() as handle:
        assert (handle.active, handle.target, handle.handler) == (False, None, None)
        assert attached() == []
        assert instrument() is not handle  # nothing attached: every call gets its own
    with Session("off") as session:
        assert not instrument().active and not instrument(session).active
        assert attached() == []


def test_a_session_instruments_langchain_for_its_lifetime(store: Store) -> None:
    model = ScriptedChatModel()
    assert attached() == []
    with Session("record", store, name="hooked") as session:
        [handler] = attached()  # attached by the session, with no instrument() call
        assert isinstance(handler, RecordingCallbackHandler)
        assert handler.recorder is session.recorder
        handle = instrument()
        assert handle.active and handle.handler is handler and handle.session is session
        assert instrument() is handle and instrument(session) is handle
        assert instrument(session.recorder) is handle
        recorded = ["inside the with block", "after the with block", "after close"]
        with instrument():
            answers = [model.invoke(recorded[0]).content]
        # the session's attachment outlives the block, and closing its handle does nothing
        answers.append(model.invoke(recorded[1]).content)
        handle.close()
        answers.append(model.invoke(recorded[2]).content)
        run_id = session.run_id
    assert attached() == [] and not _active(handle)
    model.invoke("after the session")
    assert prompts(store, run_id) == recorded

    with Session("replay", store, run_id=run_id) as session:
        [tracker] = attached()
        assert not isinstance(tracker, RecordingCallbackHandler)
        assert instrument().handler is tracker
        assert session.player is not None
        replay = ReplayChatModel(player=session.player)
        assert [replay.invoke(p).content for p in recorded] == answers
    assert attached() == []


def test_a_session_inside_another_shadows_it(store: Store) -> None:
    model = ScriptedChatModel()
    with Session("record", store, name="outer") as outer:
        model.invoke("outer one")
        with Session("record", store, name="inner") as inner:
            model.invoke("inner")
            [handler] = attached()
            assert isinstance(handler, RecordingCallbackHandler)
            assert handler.recorder is inner.recorder
        model.invoke("outer two")
    assert prompts(store, outer.run_id) == ["outer one", "outer two"]
    assert prompts(store, inner.run_id) == ["inner"]
    assert attached() == []


def test_instrument_refuses_what_it_cannot_attach(store: Store) -> None:
    with Session("record", store, name="one") as session, \
            store.record(name="another") as other, \
            pytest.raises(RuntimeError, match=f"already active.*{session.run_id}"):
        instrument(other)
    unopened = Session("record", store, name="never opened")
    with pytest.raises(RuntimeError, match="not open"):
        instrument(unopened)
    with pytest.raises(TypeError, match="a Session, a Recorder or a Player, not str"):
        instrument("record")  # type: ignore[arg-type]


def test_recording_without_instrumentation_warns_and_instrument_attaches(store: Store) -> None:
    model = ScriptedChatModel()
    with Session("record", store, name="unhooked", instrument=False) as session:
        assert attached() == []
        with pytest.warns(RuntimeWarning, match="not instrumented.*instrument\\(\\)"):
            assert replayable_chat_model(model) is model
        with instrument() as handle:
            assert handle.session is None and handle.target is session.recorder
            assert instrument() is handle  # the active handle, not a second attachment
            replayable_chat_model(model).invoke("recorded")
        model.invoke("not recorded")
        run_id = session.run_id
    assert prompts(store, run_id) == ["recorded"]
    assert attached() == []


# -- a real process, switched by the environment --------------------------------------------

def _run_agent(pg_dsn: str, pg_schema: str, tmp_path: Path, **env: str) -> tuple[Any, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTREPLAY_")}
    environ.update(AGENTREPLAY_DSN=pg_dsn, AGENTREPLAY_SCHEMA=pg_schema,
                   AGENTREPLAY_SPOOL_DIR=str(tmp_path / "spool"), **env)
    child = subprocess.run([sys.executable, "-m", "tests.langchain.mode_switch_agent"],
                           capture_output=True, text=True, cwd=ROOT, env=environ, timeout=240)
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1]), child.stderr


def test_agentreplay_mode_records_replays_and_leaves_alone_the_same_script(
        store: Store, pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    recorded, stderr = _run_agent(pg_dsn, pg_schema, tmp_path, AGENTREPLAY_MODE="record")
    found = re.search(r"agentreplay: recording run ([0-9a-f-]{36})", stderr)
    assert found is not None, stderr
    run_id = uuid.UUID(found.group(1))
    assert recorded["live_calls"] == {"model": 2, "tools": 2, "embeddings": 2}
    run = store.get_run(run_id)
    assert run.status == "complete" and run.name == "mode_switch_agent"
    assert [s.kind for s in store.load_steps(run_id)] == KINDS
    assert store.verify(run_id).ok

    report = tmp_path / "report.json"
    replayed, stderr = _run_agent(pg_dsn, pg_schema, tmp_path, AGENTREPLAY_MODE="replay",
                                  AGENTREPLAY_RUN_ID=str(run_id),
                                  AGENTREPLAY_REPORT_FILE=str(report))
    assert f"agentreplay: replaying run {run_id}" in stderr
    assert replayed["live_calls"] == {"model": 0, "tools": 0, "embeddings": 0}
    assert replayed == {**recorded, "live_calls": replayed["live_calls"]}
    ended = json.loads(report.read_text())
    assert (ended["mode"], ended["run_id"], ended["ok"]) == ("replay", str(run_id), True)

    untouched, stderr = _run_agent(pg_dsn, pg_schema, tmp_path, AGENTREPLAY_MODE="off")
    assert "agentreplay:" not in stderr
    assert untouched["live_calls"] == recorded["live_calls"]
    assert untouched["transcript"] != recorded["transcript"]
    assert [r.run_id for r in store.list_runs()] == [run_id]  # nothing else was recorded
