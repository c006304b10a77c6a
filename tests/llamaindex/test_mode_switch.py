"""The mode switch: the same LlamaIndex program records, replays or runs untouched, as a
`Session` (or `AGENTREPLAY_MODE` in a real process) decides, through `instrument()` and the
`replayable_*` factories."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from llama_index_instrumentation import get_dispatcher

from agentreplay_core import NetworkAccessDuringReplay, Session, Store, active_session
from agentreplay_llamaindex import (
    Instrumentation,
    ReplayEmbedding,
    ReplayLLM,
    ReplayRetriever,
    ReplayTool,
    instrument,
    replayable_embedding,
    replayable_llm,
    replayable_retriever,
    replayable_tools,
)
from agentreplay_llamaindex._routing import RoutingEventHandler
from tests.llamaindex import scenarios
from tests.llamaindex.mode_switch_agent import (
    CountingEmbedding,
    live_parts,
    program,
    unreachable_parts,
)
from tests.llamaindex.models import SampledLLM, ToolCallingLLM

ROOT = Path(__file__).resolve().parents[2]
KINDS = ["embedding"] * 5 + ["retriever", "llm", "llm", "tool", "tool", "llm"]
CHANGED = "Now do it with other numbers."


def routed() -> int:
    """How many agentreplay routing handlers the root dispatcher holds (0 or 1)."""
    return sum(isinstance(h, RoutingEventHandler) for h in get_dispatcher().event_handlers)


def _active(handle: Instrumentation) -> bool:
    return handle.active  # (a function: mypy would keep what an earlier assert narrowed)


def _assert_offline() -> None:
    with pytest.raises(NetworkAccessDuringReplay):
        socket.create_connection(("192.0.2.1", 9), timeout=0.5).close()


def test_the_same_program_records_then_replays_with_nothing_live(li_store: Store) -> None:
    parts = live_parts()
    with Session("record", li_store, name="mode-switch") as session:
        live = program(parts)
        run_id = session.recorder.run_id if session.recorder else None
    assert run_id is not None
    assert sorted(s.kind for s in li_store.load_steps(run_id)) == sorted(KINDS)
    assert sorted(parts.ran) == ["add", "multiply"]
    assert program(live_parts()) != live  # outside a session: live, and sampled

    with Session("replay", li_store, run_id=run_id):
        _assert_offline()
        replayed = program(unreachable_parts())
    assert replayed == live
    assert len(li_store.list_runs()) == 1  # replaying recorded nothing


def test_the_factories_pick_the_stand_in_from_the_session(li_store: Store) -> None:
    parts = live_parts()
    llm, embedding, tools = parts.rag_llm, parts.embedding, parts.tools
    retriever = scenarios.build_index(embedding).as_retriever()
    assert active_session() is None
    assert replayable_llm(llm) is llm and replayable_embedding(embedding) is embedding
    assert replayable_retriever(retriever) is retriever and replayable_tools(tools) == tools
    with Session("record", li_store, name="factories") as session:
        assert replayable_llm(llm) is llm and replayable_embedding(embedding) is embedding
        assert replayable_retriever(retriever) is retriever and replayable_tools(tools) == tools
        answer = llm.complete("one").text
        ToolCallingLLM().complete("two")  # a second model: names tell them apart
        run_id = session.run_id
    with Session("replay", li_store, run_id=run_id):
        replay_llm = replayable_llm(llm)
        assert isinstance(replay_llm, ReplayLLM) and replay_llm.recorded_name == "sampled-llm"
        assert replay_llm.complete("one").text == answer
        other = replayable_llm(ToolCallingLLM())
        assert isinstance(other, ReplayLLM) and other.recorded_name == "tool-caller"
        other.complete("two")
        assert isinstance(replayable_embedding(embedding), ReplayEmbedding)
        assert isinstance(replayable_retriever(retriever), ReplayRetriever)
        replayed_tools = replayable_tools(tools)
        assert all(isinstance(t, ReplayTool) for t in replayed_tools)
        assert [t.metadata.name for t in replayed_tools] == ["add", "multiply"]
    assert parts.ran == []


def test_a_replay_that_goes_live_at_the_divergence_forks(li_store: Store) -> None:
    with Session("record", li_store, name="before the fix") as session:
        live = program(live_parts())
        run_id = session.run_id

    parts = live_parts()
    options = {"on_divergence": "live", "allow_unused": True}
    with Session("replay", li_store, run_id=run_id, replay_options=options) as session:
        fixed = program(parts, question=CHANGED)
        player = session.player
    assert player is not None and player.fork is not None
    fork = li_store.get_run(player.fork.run_id)
    assert fork.parent_run_id == run_id and fork.fork_step is not None
    # the RAG query came from the recording; from the changed question on, the live parts ran
    assert fixed["rag"] == live["rag"] and fixed["agent"] != live["agent"]
    assert sorted(parts.ran) == ["add", "multiply"]
    assert isinstance(parts.embedding, CountingEmbedding) and parts.embedding.embedded == 0

    with Session("replay", li_store, run_id=fork.run_id):  # the fork replays like any run
        again = program(unreachable_parts(), question=CHANGED)
    assert again == fixed


def test_instrument_without_a_session_is_inert() -> None:
    assert active_session() is None
    with instrument() as handle:
        assert (handle.active, handle.target, handle.handler) == (False, None, None)
        assert routed() == 0
        SampledLLM().complete("nothing records this")
    with Session("off") as session:
        assert not instrument().active and not instrument(session).active
    assert routed() == 0


def test_a_session_instruments_llamaindex_for_its_lifetime(li_store: Store) -> None:
    llm = SampledLLM()
    with Session("record", li_store, name="hooked") as session:
        assert routed() == 1  # attached by the session, with no instrument() call
        handle = instrument()
        assert handle.active and handle.session is session
        assert handle.recorder is session.recorder
        assert instrument() is handle and instrument(session) is handle
        assert session.recorder is not None and instrument(session.recorder) is handle
        prompts = ["inside the with block", "after the with block", "after close"]
        with instrument():
            answers = [llm.complete(prompts[0]).text]
        # the session's instrumentation outlives the block; closing its handle does nothing
        answers.append(llm.complete(prompts[1]).text)
        handle.close()
        answers.append(llm.complete(prompts[2]).text)
        run_id = session.run_id
    assert routed() == 0 and not _active(handle)
    llm.complete("after the session")
    assert run_id is not None
    assert [s.input["prompt"] for s in li_store.load_steps(run_id)] == prompts

    with Session("replay", li_store, run_id=run_id) as session:
        tracking = instrument()
        assert tracking.recorder is None and tracking.tree is not None
        assert tracking.session is session
        replay = replayable_llm(llm)
        assert [replay.complete(p).text for p in prompts] == answers
    assert routed() == 0


def test_a_session_inside_another_shadows_it(li_store: Store) -> None:
    llm = SampledLLM()
    with Session("record", li_store, name="outer") as outer:
        llm.complete("outer one")
        with Session("record", li_store, name="inner") as inner:
            llm.complete("inner")
        llm.complete("outer two")
    assert outer.run_id is not None and inner.run_id is not None
    assert [s.input["prompt"] for s in li_store.load_steps(outer.run_id)] == \
        ["outer one", "outer two"]
    assert [s.input["prompt"] for s in li_store.load_steps(inner.run_id)] == ["inner"]


def test_instrument_refuses_what_it_cannot_attach(li_store: Store) -> None:
    with Session("record", li_store, name="one") as session, \
            li_store.record(name="another") as other, \
            pytest.raises(RuntimeError, match=str(session.run_id)):
        instrument(other)
    with pytest.raises(RuntimeError, match="not open"):
        instrument(Session("record", li_store, name="never opened"))
    with pytest.raises(TypeError, match="a Session, a Recorder or a Player, not str"):
        instrument("record")  # type: ignore[arg-type]


def test_recording_without_instrumentation_warns_and_instrument_attaches(
        li_store: Store) -> None:
    llm = SampledLLM()
    with Session("record", li_store, name="unhooked", instrument=False) as session:
        assert routed() == 0
        with pytest.warns(RuntimeWarning, match=r"not instrumented.*instrument\(\)"):
            assert replayable_llm(llm) is llm
        with instrument() as handle:
            assert handle.session is None and handle.recorder is session.recorder
            assert instrument() is handle
            replayable_llm(llm).complete("recorded")
        llm.complete("not recorded")
        run_id = session.run_id
    assert run_id is not None
    assert [s.input["prompt"] for s in li_store.load_steps(run_id)] == ["recorded"]


# -- a real process, switched by the environment --------------------------------------------

def _run(pg_dsn: str, pg_schema: str, tmp_path: Path, **env: str) -> tuple[Any, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENTREPLAY_")}
    environ.update(AGENTREPLAY_DSN=pg_dsn, AGENTREPLAY_SCHEMA=pg_schema,
                   AGENTREPLAY_SPOOL_DIR=str(tmp_path / "spool"), **env)
    child = subprocess.run([sys.executable, "-m", "tests.llamaindex.mode_switch_agent"],
                           capture_output=True, text=True, cwd=ROOT, env=environ, timeout=240)
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1]), child.stderr


def test_agentreplay_mode_records_and_replays_the_same_program(
        li_store: Store, pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    run_id = uuid.uuid4()  # chosen by the caller this time
    recorded, stderr = _run(pg_dsn, pg_schema, tmp_path, AGENTREPLAY_MODE="record",
                            AGENTREPLAY_RUN_ID=str(run_id), AGENTREPLAY_RUN_NAME="li-agent")
    assert f"agentreplay: recording run {run_id}" in stderr
    assert recorded["live_calls"] == {"tools": 2, "embedded": 5}
    run = li_store.get_run(run_id)
    assert run.status == "complete" and run.name == "li-agent"
    assert sorted(s.kind for s in li_store.load_steps(run_id)) == sorted(KINDS)

    replayed, stderr = _run(pg_dsn, pg_schema, tmp_path, AGENTREPLAY_MODE="replay",
                            AGENTREPLAY_RUN_ID=str(run_id))
    assert f"agentreplay: replaying run {run_id}" in stderr
    assert replayed["live_calls"] == {"tools": 0, "embedded": 0}
    assert {**replayed, "live_calls": None} == {**recorded, "live_calls": None}
    assert [r.run_id for r in li_store.list_runs()] == [run_id]
    # (mode off, the same script untouched: tests/langchain/test_mode_switch.py)


def test_a_model_without_a_name_is_found_under_its_class_name(li_store: Store) -> None:
    from llama_index.core.llms import MockLLM

    unnamed = MockLLM(max_tokens=4)
    assert unnamed.metadata.model_name == "unknown"  # LlamaIndex's default
    with Session("record", li_store, name="unnamed") as session:
        answer = unnamed.complete("one").text
        ToolCallingLLM().complete("two")  # a second model: the stand-in must pick by name
        run_id = session.run_id
    with Session("replay", li_store, run_id=run_id):
        replay_llm = replayable_llm(unnamed)
        assert isinstance(replay_llm, ReplayLLM) and replay_llm.recorded_name == "MockLLM"
        assert replay_llm.complete("one").text == answer
        replayable_llm(ToolCallingLLM()).complete("two")
