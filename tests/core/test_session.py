"""`Session`: one run recorded, replayed or left alone, and `active_session()`."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import (
    AgentReplayError,
    Mode,
    ReplayDivergence,
    RunNotFound,
    RunStatus,
    Session,
    Store,
    StoreError,
    active_session,
    open_store,
    register_session_hook,
)


@pytest.fixture
def memory() -> Iterator[Store]:
    with open_store("memory:") as store:
        yield store


def never(*args: Any) -> Any:
    raise AssertionError("replay called the live function")


def recorded_run(store: Store, *requests: int) -> tuple[uuid.UUID, list[float]]:
    with Session("record", store) as session:
        values = [session.call("tool", "rand", {"i": i}, random.random) for i in requests]
    assert session.run_id is not None
    return session.run_id, values


def test_record_then_replay_then_off(any_store: Store) -> None:
    with Session("record", any_store, name="agent", metadata={"ticket": 7}, tags=["nightly"]
                 ) as session:
        assert active_session() is session
        assert session.recorder is not None and session.player is None
        live = [session.call("tool", "rand", {"i": i}, random.random) for i in range(3)]
    assert active_session() is None
    assert session.target is None  # closed: neither recorder nor player
    run_id = session.run_id
    assert run_id is not None
    run = any_store.get_run(run_id)
    assert (run.status, run.name, run.step_count) == (RunStatus.COMPLETE, "agent", 3)
    assert run.metadata["ticket"] == 7 and run.metadata["tags"] == ["nightly"]

    with Session(Mode.REPLAY, any_store, run_id=str(run_id)) as replaying:
        assert active_session() is replaying
        assert replaying.player is not None and replaying.target is replaying.player
        replayed = [replaying.call("tool", "rand", {"i": i}, never) for i in range(3)]
    assert replayed == live

    with Session("OFF") as off:
        assert active_session() is None  # an off session counts as none
        assert off.call("tool", "rand", {}, lambda: "called") == "called"
    assert len(any_store.list_runs()) == 1  # off recorded nothing


def test_acall_records_and_replays_coroutines(memory: Store) -> None:
    async def fetch(n: int) -> dict[str, float]:
        await asyncio.sleep(0)
        return {"n": n, "value": random.random()}

    async def agent(session: Session, fn: Any) -> list[dict[str, float]]:
        return list(await asyncio.gather(*(session.acall("tool", "fetch", {"n": n}, fn, n)
                                           for n in range(3))))

    with Session("record", memory) as recording:
        live = asyncio.run(agent(recording, fetch))

    async def unreachable(n: int) -> dict[str, float]:
        raise AssertionError("replay awaited the live function")

    with Session("replay", memory, run_id=recording.run_id) as replaying:
        assert asyncio.run(agent(replaying, unreachable)) == live


def test_active_session_nests_and_resets(memory: Store) -> None:
    run_id, _ = recorded_run(memory, 1)
    assert active_session() is None
    with Session("record", memory) as outer:
        with Session("replay", memory, run_id=run_id) as inner:
            assert active_session() is inner
            inner.call("tool", "rand", {"i": 1}, never)
            with Session("off"):
                assert active_session() is None
            assert active_session() is inner
        assert active_session() is outer
        with pytest.raises(ZeroDivisionError), Session("record", memory) as failing:
            assert active_session() is failing
            _ = 1 / 0
        assert active_session() is outer
    assert active_session() is None
    assert failing.run_id is not None
    assert memory.get_run(failing.run_id).status == RunStatus.FAILED


def test_active_session_follows_the_context(memory: Store) -> None:
    seen: dict[str, Session | None] = {}

    async def task() -> None:
        seen["task"] = active_session()

    with Session("record", memory) as session:
        asyncio.run(task())  # tasks copy the context they start in
        thread = threading.Thread(target=lambda: seen.update(thread=active_session()))
        thread.start()
        thread.join()
    assert seen["task"] is session
    assert seen["thread"] is None  # a plain thread starts with an empty context


class Attached:
    """What a test hook saw: the session at entry and exit."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Session | None, bool]] = []


HOOKED = Attached()


def hook(session: Session) -> contextlib.AbstractContextManager[None] | None:
    if session.name != "hooked":  # registered for the whole process: inert elsewhere
        return None

    @contextlib.contextmanager
    def attached() -> Iterator[None]:
        recorder = session.recorder
        HOOKED.events.append(("enter", active_session(), recorder is not None))
        yield
        HOOKED.events.append(("exit", active_session(),
                              recorder is not None and not recorder.closed))

    return attached()


def test_session_hooks_are_entered_and_exited(memory: Store) -> None:
    register_session_hook(hook)
    register_session_hook(hook)  # twice: still once
    HOOKED.events.clear()
    with Session("record", memory, name="hooked") as session:
        assert [e[0] for e in HOOKED.events] == ["enter"]
    # entered with the session active and recording; left before the run was sealed
    assert HOOKED.events == [("enter", session, True), ("exit", session, True)]
    HOOKED.events.clear()
    with Session("record", memory, name="hooked", instrument=False):
        pass
    with Session("off", name="hooked"):
        pass
    assert HOOKED.events == []


def test_bad_construction_raises_value_error(memory: Store) -> None:
    with pytest.raises(ValueError, match="a record session needs a run store"):
        Session("record")
    with pytest.raises(ValueError, match="needs the id of the run to replay"):
        Session("replay", memory)
    with pytest.raises(ValueError, match="valid modes: record, replay, off"):
        Session("rewind", memory)
    with pytest.raises(ValueError, match="'3f2a' is not a UUID: a new run needs a whole one"):
        Session("record", memory, run_id="3f2a")
    # a replay takes a prefix, as the command line does: resolved when it opens
    bad = Session("replay", memory, run_id="not-a-uuid")
    with pytest.raises(RunNotFound, match="run ids are UUIDs, or a unique prefix of one"):
        bad.open()


def test_replay_closing_with_unused_steps_raises(memory: Store) -> None:
    run_id, _ = recorded_run(memory, 1, 2)
    with pytest.raises(ReplayDivergence) as info, Session("replay", memory, run_id=run_id
                                                          ) as session:
        session.call("tool", "rand", {"i": 1}, never)
    assert info.value.classification == "missing_call"
    assert info.value.step == 2
    assert active_session() is None  # reset even though closing raised
    with Session("replay", memory, run_id=run_id,
                 replay_options={"allow_unused": True}) as session:
        session.call("tool", "rand", {"i": 1}, never)


def test_replay_divergence_goes_live_when_asked(memory: Store) -> None:
    run_id, recorded = recorded_run(memory, 1, 2)
    with Session("replay", memory, run_id=run_id,
                 replay_options={"on_divergence": "live"}) as session:
        assert session.goes_live_on_divergence
        assert session.call("tool", "rand", {"i": 1}, never) == recorded[0]
        assert session.call("tool", "rand", {"i": 3}, lambda: "live") == "live"
        player = session.player
        assert player is not None and player.fork is not None
        fork_id = player.fork.run_id
    fork = memory.get_run(fork_id)
    assert (fork.parent_run_id, fork.fork_step, fork.status) == (run_id, 2, RunStatus.COMPLETE)
    with pytest.raises(ReplayDivergence), Session("replay", memory, run_id=run_id) as strict:
        strict.call("tool", "rand", {"i": 3}, lambda: "live")


def test_a_session_that_is_not_open_refuses_calls(memory: Store) -> None:
    run_id, _ = recorded_run(memory, 1)
    session = Session("replay", memory, run_id=run_id)
    with pytest.raises(AgentReplayError, match="is not open"):
        session.call("tool", "rand", {"i": 1}, lambda: "live")
    with session:
        session.call("tool", "rand", {"i": 1}, never)
        with pytest.raises(RuntimeError, match="already open"):
            session.open()
    with pytest.raises(AgentReplayError, match="is not open"):  # never live after the end
        session.call("tool", "rand", {"i": 1}, lambda: "live")
    assert Session("off").call("tool", "t", {}, lambda: 1) == 1


def test_recording_refuses_the_id_of_a_stored_run(memory: Store) -> None:
    run_id, _ = recorded_run(memory, 1)
    with pytest.raises(AgentReplayError, match=f"run {run_id} already exists"):
        Session("record", memory, run_id=run_id).__enter__()
    assert active_session() is None
    assert memory.verify(run_id).ok  # the stored run is untouched
    fresh = uuid.uuid4()
    with Session("record", memory, run_id=fresh) as session:
        session.call("tool", "rand", {}, random.random)
    assert memory.get_run(fresh).step_count == 1


def test_close_store_closes_it_with_the_session(tmp_path: Path) -> None:
    store = open_store(f"file:{tmp_path / 'runs'}")
    with Session("record", store, close_store=True) as session:
        session.call("tool", "rand", {}, random.random)
    with pytest.raises(StoreError, match="is closed"), store.record():
        pass
    with open_store(f"file:{tmp_path / 'runs'}") as reopened:  # everything was written
        assert session.run_id is not None
        assert reopened.get_run(session.run_id).status == RunStatus.COMPLETE
