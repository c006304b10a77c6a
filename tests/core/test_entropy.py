"""Time, randomness and ids: recorded as steps, served back in replay (DESIGN section 6)."""

from __future__ import annotations

import copy
import copyreg
import datetime as dt
import logging
import os
import pickle
import random
import secrets
import threading
import time
import types
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import uuid4 as uuid4_bound_at_import

import pydantic
import pytest

from agentreplay_core import AgentReplayError, ReplayDivergence, Store, open_store, path_scope
from agentreplay_core._entropy import record_entropy, replay_entropy

RealDatetime = dt.datetime
PATCHED = [(time, "time"), (time, "time_ns"), (time, "sleep"), (dt, "datetime"),
           (uuid, "uuid4"), (os, "urandom"), (random, "_urandom"), (random, "random"),
           (random, "choice"), (random, "shuffle"), (random, "seed"), (random, "getstate")]
IST = dt.timezone(dt.timedelta(hours=5, minutes=30), "IST")


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory:") as opened:
        yield opened


def _utcnow() -> dt.datetime:
    # Deprecated on 3.12+, still used by agents in the wild: it must be recorded all the same.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return dt.datetime.utcnow()


def agent_step() -> dict[str, Any]:
    """What an agent does with the clock, randomness and ids, through the usual modules."""
    items = list(range(10))
    random.shuffle(items)
    return {
        "time": time.time(),
        "time_ns": time.time_ns(),
        "now_utc": dt.datetime.now(dt.timezone.utc),
        "now_ist": dt.datetime.now(IST),
        "now_local": dt.datetime.now(),
        "utcnow": _utcnow(),
        "today": dt.datetime.today(),  # C code calling time.time
        "uuid": uuid.uuid4(),
        "urandom": os.urandom(16),
        "token": secrets.token_hex(8),
        "system_random": random.SystemRandom().random(),
        "random": random.random(),
        "choice": random.choice("abcdefghij"),
        "shuffled": items,
    }


def step_names(store: Store, run_id: uuid.UUID) -> list[tuple[str, str]]:
    return [(s.kind, s.name) for s in store.load_steps(run_id)]


def patched_attributes() -> list[object]:
    return [getattr(target, name) for target, name in PATCHED]


def test_replay_serves_the_recorded_values(any_store: Store) -> None:
    with any_store.record(name="t", entropy=False) as rec, record_entropy(rec):
        start = time.monotonic()
        time.sleep(0.2)
        slept = time.monotonic() - start
        live = agent_step()
    with any_store.replay(rec.run_id) as player, replay_entropy(player):
        start = time.monotonic()
        time.sleep(0.2)
        replay_slept = time.monotonic() - start
        replayed = agent_step()

    assert replayed == live
    assert slept >= 0.2
    assert replay_slept < 0.1
    assert type(replayed["now_utc"]) is RealDatetime
    assert replayed["now_utc"].tzinfo is dt.timezone.utc
    assert replayed["now_ist"].tzinfo is IST
    assert replayed["now_local"].tzinfo is None
    assert isinstance(replayed["uuid"], uuid.UUID)
    assert isinstance(replayed["urandom"], bytes)
    assert step_names(any_store, rec.run_id) == [
        ("random", "random.seed"), ("sleep", "time.sleep"), ("time", "time.time"),
        ("time", "time.time_ns"), ("time", "datetime.now"), ("time", "datetime.now"),
        ("time", "datetime.now"), ("time", "datetime.utcnow"), ("time", "time.time"),
        ("uuid", "uuid.uuid4"), ("random", "os.urandom"), ("random", "os.urandom"),
        ("random", "os.urandom"),
    ]
    assert any_store.load_steps(rec.run_id)[1].input == {"seconds": 0.2}
    assert any_store.verify(rec.run_id).ok


def test_a_sleep_of_zero_is_a_turn_for_other_threads_not_a_step(store: Store) -> None:
    """A busy-poll loop yields with `sleep(0)` as often as the scheduling makes it: recorded,
    a replay yielding another number of times diverged."""
    def poll(turns: int) -> float:
        for _ in range(turns):
            time.sleep(0)
        return time.time()

    with store.record(entropy=True) as rec:
        live = poll(7)
    assert step_names(store, rec.run_id) == [("random", "random.seed"), ("time", "time.time")]
    with store.replay(rec.run_id):
        assert poll(3) == live


def test_live_runs_differ(store: Store) -> None:
    runs = []
    for _ in range(2):
        with store.record() as rec, record_entropy(rec):
            runs.append(agent_step())
    first, second = runs
    for key in ("time_ns", "uuid", "urandom", "token", "system_random", "random"):
        assert first[key] != second[key], key


def test_store_replays_entropy_of_runs_that_recorded_it(store: Store) -> None:
    with store.record(name="t", entropy=True) as rec:
        live = agent_step()
    with store.replay(rec.run_id):
        replayed = agent_step()
    assert replayed == live


def test_logging_and_other_infrastructure_record_nothing(store: Store) -> None:
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    logger = logging.getLogger("tests.entropy")
    logger.addHandler(handler)
    try:
        with store.record() as rec, record_entropy(rec):
            logger.warning("before")
            stamp = time.time()
            logger.warning("after")
            with ThreadPoolExecutor(max_workers=2) as pool:
                assert list(pool.map(abs, [-1, -2])) == [1, 2]
    finally:
        logger.removeHandler(handler)
    assert len(records) == 2
    assert step_names(store, rec.run_id) == [("random", "random.seed"), ("time", "time.time")]
    with store.replay(rec.run_id) as player, replay_entropy(player):
        assert time.time() == stamp


def test_calls_from_skipped_modules_record_nothing_not_even_nested_ones(store: Store) -> None:
    source = "import time, uuid\ndef new_id():\n    return uuid.uuid4()\n" \
             "def stamp():\n    return time.time()\n"
    client = types.ModuleType("infra.client")  # a submodule of a skipped package
    lookalike = types.ModuleType("infra_tools")  # the same prefix, another package
    exec(source, client.__dict__)
    exec(source, lookalike.__dict__)
    with store.record() as rec, record_entropy(rec, skip_modules=("infra",)):
        client.new_id()  # its inner os.urandom(16) is not recorded either
        client.stamp()
        lookalike.new_id()
    assert step_names(store, rec.run_id) == [("random", "random.seed"), ("uuid", "uuid.uuid4")]


def test_infrastructure_drawing_random_numbers_does_not_shift_the_run(store: Store) -> None:
    """A connection pool drawing jitter in the middle of a run (psycopg_pool does)."""
    pool = types.ModuleType("infra.pool")
    exec("import random\nfrom random import random as bound\n"
         "def jitter():\n    return random.random() + bound()\n", pool.__dict__)
    with store.record() as rec, record_entropy(rec, skip_modules=("infra",)):
        first = random.random()
        pool.jitter()
        live = [first, random.choice("abcdefghij"), random.randrange(10**9)]
    with store.replay(rec.run_id) as player, replay_entropy(player, skip_modules=("infra",)):
        replayed = [random.random(), random.choice("abcdefghij"), random.randrange(10**9)]
    assert replayed == live


def test_patches_are_restored_exactly_even_when_the_body_raises(store: Store) -> None:
    before = patched_attributes()
    state = random.getstate()
    reducer = copyreg.dispatch_table.get(RealDatetime)
    with pytest.raises(RuntimeError), store.record() as rec, record_entropy(rec):
        assert not any(a is b for a, b in zip(before, patched_attributes(), strict=True))
        random.random()
        raise RuntimeError("the agent failed")
    assert all(a is b for a, b in zip(before, patched_attributes(), strict=True))
    assert copyreg.dispatch_table.get(RealDatetime) is reducer
    assert random.getstate() == state

    with pytest.raises(RuntimeError), store.replay(rec.run_id, allow_unused=True) as player, \
            replay_entropy(player):
        raise RuntimeError("the replayed agent failed")
    assert all(a is b for a, b in zip(before, patched_attributes(), strict=True))
    assert random.getstate() == state


def test_asking_for_more_than_was_recorded_diverges(store: Store) -> None:
    with store.record() as rec, record_entropy(rec):
        time.time()
    original = time.time
    with pytest.raises(ReplayDivergence) as diverged, store.replay(rec.run_id) as player, \
            replay_entropy(player):
        time.time()
        time.time()
    assert diverged.value.classification == "unexpected_call"
    assert (diverged.value.kind, diverged.value.name) == ("time", "time.time")
    assert time.time is original


def test_replaying_a_run_without_entropy_changes_nothing(store: Store) -> None:
    with store.record() as rec:
        pass
    before = patched_attributes()
    with store.replay(rec.run_id) as player:
        with pytest.raises(ReplayDivergence, match=r"random\.seed"), replay_entropy(player):
            pass
        assert all(a is b for a, b in zip(before, patched_attributes(), strict=True))
        with store.record() as other, record_entropy(other):  # the slot was given back
            pass


def test_only_one_session_per_process(store: Store) -> None:
    with store.record(name="earlier") as earlier:
        pass
    with store.record(name="first") as first, record_entropy(first):
        with store.record(name="second") as second, \
                pytest.raises(AgentReplayError, match="still active") as refused, \
                record_entropy(second):
            pass
        with pytest.raises(AgentReplayError, match="still active"), \
                store.replay(earlier.run_id, allow_unused=True) as player, \
                replay_entropy(player):
            pass
        stamp = time.time()  # the first session is untouched
    assert f"entropy recording of run {first.run_id}" in str(refused.value)
    assert "entropy=False" in str(refused.value)
    assert step_names(store, first.run_id) == [("random", "random.seed"), ("time", "time.time")]
    with store.replay(first.run_id) as player, replay_entropy(player):
        assert time.time() == stamp


def test_worker_threads_are_recorded_and_replayed(store: Store) -> None:
    def work() -> tuple[uuid.UUID, float]:
        return uuid.uuid4(), time.time()

    with store.record() as rec, record_entropy(rec), ThreadPoolExecutor(1) as pool:
        live = [pool.submit(work).result() for _ in range(3)]
    with store.replay(rec.run_id) as player, replay_entropy(player), ThreadPoolExecutor(1) as pool:
        replayed = [pool.submit(work).result() for _ in range(3)]
    assert replayed == live


def run_branches(order: list[str]) -> dict[str, uuid.UUID]:
    """Two threads, each in its own path scope, taking an id in the given order."""
    results: dict[str, uuid.UUID] = {}
    turn = {name: threading.Event() for name in order}

    def branch(name: str) -> None:
        assert turn[name].wait(5)
        with path_scope(name):
            results[name] = uuid.uuid4()
        later = order[order.index(name) + 1:]
        if later:
            turn[later[0]].set()

    threads = [threading.Thread(target=branch, args=(name,)) for name in sorted(order)]
    for thread in threads:
        thread.start()
    turn[order[0]].set()
    for thread in threads:
        thread.join(10)
    return results


def test_concurrent_branches_get_their_own_values_whatever_the_order(store: Store) -> None:
    with store.record() as rec, record_entropy(rec):
        live = run_branches(["a", "b"])
    with store.replay(rec.run_id) as player, replay_entropy(player):
        replayed = run_branches(["b", "a"])
    assert replayed == live


def test_many_threads_at_once(store: Store) -> None:
    barrier = threading.Barrier(4)

    def work(_: int) -> list[uuid.UUID]:
        barrier.wait(5)
        return [uuid.uuid4() for _ in range(5)]

    with store.record() as rec, record_entropy(rec), ThreadPoolExecutor(4) as pool:
        live = [u for ids in pool.map(work, range(4)) for u in ids]
    with store.replay(rec.run_id) as player, replay_entropy(player), ThreadPoolExecutor(4) as pool:
        replayed = [u for ids in pool.map(work, range(4)) for u in ids]
    # without path scopes, which thread gets which value follows the scheduling
    assert sorted(replayed) == sorted(live)
    assert len(set(live)) == 20
    assert step_names(store, rec.run_id).count(("uuid", "uuid.uuid4")) == 20


def stamp_now() -> dt.datetime:
    class Stamp(dt.datetime):  # a subclass made while the stand-in is installed
        pass

    stamp = Stamp.now(dt.timezone.utc)
    assert type(stamp) is Stamp
    assert type(Stamp(2024, 1, 2)) is Stamp
    assert not isinstance(RealDatetime(2024, 1, 2), Stamp)
    return stamp


def test_datetime_stand_in_behaves_like_the_real_class(store: Store) -> None:
    before = RealDatetime(2024, 1, 2, 3, 4, 5)
    with store.record() as rec, record_entropy(rec):
        assert dt.datetime is not RealDatetime
        recorded = dt.datetime.now(IST)
        recorded_stamp = stamp_now()
        made = dt.datetime(2024, 1, 2)
        for value in (recorded, made, dt.datetime.fromisoformat("2024-01-02T03:04:05"),
                      dt.datetime.fromtimestamp(0, dt.timezone.utc),
                      dt.datetime.strptime("2024", "%Y"), copy.deepcopy(recorded),
                      pickle.loads(pickle.dumps(recorded))):
            assert type(value) is RealDatetime
        assert isinstance(before, dt.datetime)
        assert issubclass(RealDatetime, dt.datetime)
        assert issubclass(dt.datetime, RealDatetime)
        assert not isinstance(dt.date(2024, 1, 2), dt.datetime)
        assert dt.datetime.max is RealDatetime.max
        assert pickle.loads(pickle.dumps(recorded)) == recorded

        class Event(pydantic.BaseModel):  # e.g. a tool's argument schema built during a run
            at: dt.datetime

        event = Event.model_validate({"at": "2024-01-02T03:04:05"})
        assert event.at == RealDatetime(2024, 1, 2, 3, 4, 5)
        assert Event.model_json_schema()["properties"]["at"]["format"] == "date-time"
    assert pickle.loads(pickle.dumps(before)) == before
    with store.replay(rec.run_id) as player, replay_entropy(player):
        replayed = dt.datetime.now(IST)
        replayed_stamp = stamp_now()
    assert replayed == recorded
    assert replayed.tzinfo is IST
    assert replayed_stamp == recorded_stamp


def failure(call: Callable[[], object]) -> tuple[type[BaseException], str]:
    try:
        call()
    except Exception as exc:
        return type(exc), str(exc)
    raise AssertionError("no error")


BAD_CALLS: list[Callable[[], object]] = [
    lambda: os.urandom(-1), lambda: os.urandom("8"),  # type: ignore[arg-type]
    lambda: time.sleep(-1), lambda: time.sleep("1"),  # type: ignore[arg-type]
    lambda: dt.datetime.now("UTC"),  # type: ignore[arg-type]
]


def test_invalid_arguments_fail_as_they_do_without_agentreplay(store: Store) -> None:
    expected = [failure(call) for call in BAD_CALLS]
    with store.record() as rec, record_entropy(rec):
        assert [failure(call) for call in BAD_CALLS] == expected
    assert step_names(store, rec.run_id) == [("random", "random.seed")]
    with store.replay(rec.run_id) as player, replay_entropy(player):
        assert [failure(call) for call in BAD_CALLS] == expected


def test_a_reference_kept_after_the_run_calls_the_original(store: Store) -> None:
    with store.record() as rec, record_entropy(rec):
        kept_time, kept_uuid4, kept_datetime = time.time, uuid.uuid4, dt.datetime
    assert len({kept_uuid4() for _ in range(3)}) == 3
    assert abs(kept_time() - time.time()) < 60
    assert type(kept_datetime.now()) is RealDatetime
    assert step_names(store, rec.run_id) == [("random", "random.seed")]


def test_uuid4_bound_at_import_replays_through_os_urandom(store: Store) -> None:
    with store.record() as rec, record_entropy(rec):
        live = uuid4_bound_at_import()
    with store.replay(rec.run_id) as player, replay_entropy(player):
        replayed = uuid4_bound_at_import()
    assert replayed == live
    assert step_names(store, rec.run_id) == [("random", "random.seed"), ("random", "os.urandom")]


def test_a_recorded_value_of_the_wrong_type_is_reported(store: Store) -> None:
    with store.record() as rec:
        rec.record("random", "random.seed", {}, 7)
        rec.record("time", "time.time", {}, "soon")
    with pytest.raises(AgentReplayError) as refused, store.replay(rec.run_id) as player, \
            replay_entropy(player):
        time.time()
    message = str(refused.value)
    assert f"recorded time.time step of run {rec.run_id} holds str 'soon'" in message
    assert "record the run again" in message


def test_a_forked_replay_goes_live_for_entropy_too(store: Store) -> None:
    with store.record() as rec, record_entropy(rec):
        first = time.time()
        rec.record("tool", "lookup", {"q": 1}, "recorded answer")
        second = time.time()
    with store.replay(rec.run_id, on_divergence="live") as player, replay_entropy(player):
        assert time.time() == first
        assert player.next("tool", "lookup", {"q": 2}, live=lambda: "live answer") \
            == "live answer"
        time.sleep(0.01)
        after_fork = time.time()
    assert after_fork != second
    assert player.fork is not None
    fork_steps = store.load_steps(player.fork.run_id)
    assert [(s.kind, s.name) for s in fork_steps] == [
        ("random", "random.seed"), ("time", "time.time"), ("tool", "lookup"),
        ("sleep", "time.sleep"), ("time", "time.time")]
    assert fork_steps[-1].output == after_fork
