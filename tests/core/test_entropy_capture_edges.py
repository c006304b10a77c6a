"""Entropy capture at the edges: executors, frameless threads, odd arguments, seeded draws,
the hash seed (docs/entropy.md)."""

from __future__ import annotations

import _thread
import asyncio
import datetime as dt
import decimal
import logging
import operator
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import uuid4 as uuid4_bound_at_import

import anyio.to_thread
import numpy as np
import pytest

from agentreplay_core import ReplayDivergence, Store, open_store, path_scope
from agentreplay_core._entropy import replay_entropy


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory:") as opened:
        yield opened


def entropy_steps(store: Store, run_id: uuid.UUID) -> list[tuple[str, str]]:
    return [(s.kind, s.name) for s in store.load_steps(run_id) if s.name != "random.seed"]


# -- 1. callables handed straight to an executor are the agent's calls ----------------------


async def executor_agent() -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1) as pool:
        nonce = pool.submit(os.urandom, 8).result()
        bound = pool.submit(uuid4_bound_at_import).result()  # reads os.urandom itself
    return {
        "run_in_executor": await loop.run_in_executor(None, time.time),
        "to_thread": await asyncio.to_thread(uuid.uuid4),
        "submit": nonce,
        "bound": bound,
        "anyio": await anyio.to_thread.run_sync(uuid.uuid4),
    }


def test_entropy_functions_run_by_executors_are_recorded_and_replayed(store: Store) -> None:
    with store.record(name="executor", entropy=True) as rec:
        live = asyncio.run(executor_agent())
    assert sorted(entropy_steps(store, rec.run_id)) == sorted(
        [("random", "os.urandom"), ("random", "os.urandom"), ("time", "time.time"),
         ("uuid", "uuid.uuid4"), ("uuid", "uuid.uuid4")])
    with store.replay(rec.run_id):
        replayed = asyncio.run(executor_agent())
    assert replayed == live


def test_entropy_function_as_a_thread_target_is_recorded(store: Store) -> None:
    with store.record(name="thread", entropy=True) as rec:
        thread = threading.Thread(target=uuid.uuid4)  # Thread.run is the nearest frame
        thread.start()
        thread.join()
    assert entropy_steps(store, rec.run_id) == [("uuid", "uuid.uuid4")]


# -- 2. a call with no Python frame above it -------------------------------------------------


def test_entropy_call_from_a_thread_without_python_frames_works(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: errors.append(u.exc_value))
    done = threading.Event()
    with store.record(name="frames", entropy=True) as rec:
        # only C calls the replacement (list, map, methodcaller), then it signals through done
        calls = map(operator.methodcaller("__call__"), [time.time, done.set])
        _thread.start_new_thread(list, (calls,))
        for _ in range(2000):  # until the thread has finished, either way
            if errors or done.wait(0.005):  # Event.wait does not go through time.sleep
                break
    assert errors == []
    assert entropy_steps(store, rec.run_id) == [("time", "time.time")]


# -- 3. a tzinfo whose str holds its address -------------------------------------------------


class PlainUTC(dt.tzinfo):
    """The classic hand-written zone: no __str__ or __repr__, so str() shows the address."""

    def utcoffset(self, when: dt.datetime | None) -> dt.timedelta:
        return dt.timedelta(0)

    def tzname(self, when: dt.datetime | None) -> str:
        return "UTC"

    def dst(self, when: dt.datetime | None) -> dt.timedelta:
        return dt.timedelta(0)


def test_now_with_an_addressed_tzinfo_replays_with_another_instance(store: Store) -> None:
    recorded_tz, replay_tz = PlainUTC(), PlainUTC()  # both alive: two different addresses
    with store.record(name="tz", entropy=True) as rec:
        live = dt.datetime.now(recorded_tz)
    (step,) = [s for s in store.load_steps(rec.run_id) if s.name == "datetime.now"]
    assert f"{id(recorded_tz):x}" not in step.input["tz"]
    with store.replay(rec.run_id):
        replayed = dt.datetime.now(replay_tz)
    assert replayed == live
    assert replayed.tzinfo is replay_tz


def test_now_with_another_addressed_tzinfo_class_diverges(store: Store) -> None:
    class OtherUTC(PlainUTC):
        pass

    with store.record(name="tz", entropy=True) as rec:
        dt.datetime.now(PlainUTC())
    with pytest.raises(ReplayDivergence), store.replay(rec.run_id):
        dt.datetime.now(OtherUTC())


def test_now_keeps_the_str_of_ordinary_zones_as_its_input(store: Store) -> None:
    zone = dt.timezone(dt.timedelta(hours=2), "EET")
    with store.record(name="tz", entropy=True) as rec:
        dt.datetime.now(zone)
        dt.datetime.now(dt.timezone.utc)
    assert [s.input for s in store.load_steps(rec.run_id) if s.name == "datetime.now"] == [
        {"tz": "EET"}, {"tz": "UTC"}]


# -- 4. time.sleep with any integer type ----------------------------------------------------


def test_sleep_with_a_numpy_integer_is_recorded_and_served(store: Store) -> None:
    with store.record(name="sleep", entropy=True) as rec:
        time.sleep(np.int64(1))
    assert [(s.name, s.input) for s in store.load_steps(rec.run_id)
            if s.name == "time.sleep"] == [("time.sleep", {"seconds": 1})]
    with store.replay(rec.run_id):  # a replay that left the step unused would raise here
        time.sleep(np.int64(1))


def test_sleep_with_an_argument_time_sleep_rejects_still_raises(store: Store) -> None:
    with store.record(name="sleep", entropy=True) as rec, pytest.raises(TypeError):
            time.sleep(decimal.Decimal("0.001"))  # type: ignore[arg-type]
    assert entropy_steps(store, rec.run_id) == []


# -- 5. random draws: one generator for the run, as recorded --------------------------------


def test_draws_inside_a_path_replay_where_the_call_runs_again(store: Store) -> None:
    def agent() -> list[float]:
        with path_scope("branch"):
            inside = random.random()
        return [random.random(), inside, random.random()]

    with store.record(name="paths", entropy=True) as rec:
        live = agent()
    with store.replay(rec.run_id):
        assert agent() == live


def test_a_run_recorded_with_a_non_negative_seed_keeps_one_generator(store: Store) -> None:
    # such a run drew everything, inside calls too, from one generator seeded with its seed
    expected = random.Random(12345)
    with store.record(name="old", entropy=False) as rec:
        rec.record("random", "random.seed", {}, 12345)
    with store.replay(rec.run_id) as player, replay_entropy(player):
        top = random.random()
        with path_scope("tool:roll_dice"):
            inside = random.random()
        after = random.random()
    assert [top, inside, after] == [expected.random() for _ in range(3)]


def test_an_explicit_seed_gives_its_one_sequence_inside_calls_too(store: Store) -> None:
    expected = random.Random(7)
    with store.record(name="seeded", entropy=True) as rec:
        random.seed(7)
        top = random.random()
        inside = rec.call("tool", "draw", {}, random.random)
        after = random.random()
    assert [top, inside, after] == [expected.random() for _ in range(3)]


# -- 6. the hash seed of the recording process ----------------------------------------------


def test_a_fixed_hash_seed_is_kept_in_the_metadata(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "123")
    with store.record(name="seeded") as rec:
        pass
    monkeypatch.delenv("PYTHONHASHSEED")
    with store.record(name="unseeded") as unseeded:
        pass
    assert store.get_run(rec.run_id).metadata["python_hash_seed"] == "123"
    assert "python_hash_seed" not in store.get_run(unseeded.run_id).metadata


@pytest.mark.parametrize("replaying_seed", ["456", None])
def test_replay_warns_when_the_recorded_hash_seed_differs(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    replaying_seed: str | None,
) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "123")
    with store.record(name="seeded", entropy=True) as rec:
        pass
    if replaying_seed is None:
        monkeypatch.delenv("PYTHONHASHSEED")
    else:
        monkeypatch.setenv("PYTHONHASHSEED", replaying_seed)
    with caplog.at_level(logging.WARNING, logger="agentreplay"), store.replay(rec.run_id):
        pass
    warnings = [r for r in caplog.records
                if r.levelno == logging.WARNING and "PYTHONHASHSEED=123" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.parametrize("recorded_seed", ["123", "random", None])
def test_replay_does_not_warn_when_the_hash_seed_cannot_differ(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    recorded_seed: str | None,
) -> None:
    # the same fixed seed, or a recording whose set order was random anyway
    if recorded_seed is None:
        monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    else:
        monkeypatch.setenv("PYTHONHASHSEED", recorded_seed)
    with store.record(name="seeded", entropy=True) as rec:
        pass
    with caplog.at_level(logging.WARNING, logger="agentreplay"), store.replay(rec.run_id):
        pass
    assert not [r for r in caplog.records if "PYTHONHASHSEED" in r.getMessage()]
