"""A recorder or store used in a forked child (a `fork` multiprocessing pool, `os.fork`).

The child has no writer thread, and the parent's connections are not its to use: the calls it
records run and return, but are not recorded; they are counted as lost (in the child, and in
the parent at the seal) and a warning says so once per child. Nothing of the child reaches the
parent's run, which stays intact; nothing hangs. A store used afresh in the child (a new
run, `list_runs`) works through writers and connections of the child's own.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.pool import Pool
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import open_store
from agentreplay_core._recorder import Recorder, RecordingStats
from agentreplay_core._store import Store
from agentreplay_core.stores._postgres import PostgresBackend

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork"),
]

#: how long a forked child may take before the test counts it as hung
DEADLINE = 20.0

#: what a pool worker reports: the values its calls returned, its stats, its warnings
InChild = tuple[list[int], RecordingStats, list[str]]
#: what the pool's workers use: set before the pool forks them
_inherited: dict[str, Any] = {}


@contextlib.contextmanager
def _warnings_in_child() -> Iterator[list[str]]:
    messages: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("agentreplay")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def _call_twice_in_child() -> InChild:
    rec: Recorder = _inherited["rec"]
    with _warnings_in_child() as messages:
        values = [rec.call("tool", "add", {"n": n}, lambda n=n: n + 1) for n in (1, 2)]
    return values, rec.stats, messages


@contextlib.contextmanager
def _fork_pool(**inherited: Any) -> Iterator[Pool]:
    _inherited.update(inherited)
    pool = multiprocessing.get_context("fork").Pool(1)
    try:
        yield pool
    finally:
        pool.terminate()  # a worker hung on the parent's connection must not outlive the test
        pool.join()
        _inherited.clear()


def _in_forked_child(body: Callable[[], int]) -> int:
    """Run `body` in an `os.fork` child; its exit code, or -1 if it hung past `DEADLINE`."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 70
        try:
            code = body()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1


def _assert_intact(store: Store, run_id: Any, names: list[str]) -> None:
    assert [s.name for s in store.load_steps(run_id)] == names
    assert store.get_run(run_id).status.value == "complete"
    report = store.verify(run_id)
    assert report.ok, report


@pytest.fixture(params=["memory", "file"])
def local_store(request: pytest.FixtureRequest, tmp_path: Path, spool_dir: Path
                ) -> Iterator[Store]:
    url = "memory:" if request.param == "memory" else f"file:{tmp_path / 'runs'}"
    store = open_store(url, spool_dir=spool_dir)
    try:
        yield store
    finally:
        store.close()




def _record_around_a_forked_worker(store: Store, durability: str) -> tuple[Recorder, InChild]:
    with store.record(name="pool", durability=durability) as rec:
        rec.call("tool", "before", {}, lambda: 0)  # the connection has been used
        with _fork_pool(rec=rec) as pool:
            in_child = pool.apply_async(_call_twice_in_child).get(timeout=DEADLINE)
        rec.call("tool", "after", {}, lambda: 0)
    return rec, in_child


def _assert_counted_and_warned_once(rec: Recorder, in_child: InChild) -> None:
    values, stats, messages = in_child
    assert values == [2, 3]  # the calls themselves ran
    assert stats.lost == 2
    assert len(messages) == 1, messages
    assert "forked child" in messages[0] and "not supported" in messages[0]
    assert str(rec.run_id) in messages[0] and "spawn" in messages[0]
    # the parent hears of them when it seals
    assert (rec.stats.lost, rec.stats.steps) == (2, 2)
    assert stats.forked_lost == rec.stats.forked_lost == 2


def test_calls_recorded_in_a_fork_pool_worker_are_counted_lost_and_warned(
        local_store: Store) -> None:
    rec, in_child = _record_around_a_forked_worker(local_store, "batched")
    _assert_counted_and_warned_once(rec, in_child)
    _assert_intact(local_store, rec.run_id, ["before", "after"])


@pytest.mark.parametrize("durability", ["sync", "batched"])
def test_a_fork_pool_worker_never_writes_through_the_parents_connections(
        pg_store: Store, durability: str) -> None:
    rec, in_child = _record_around_a_forked_worker(pg_store, durability)
    _assert_counted_and_warned_once(rec, in_child)
    _assert_intact(pg_store, rec.run_id, ["before", "after"])


def _leave_the_inherited_block(store: Store, durability: str) -> None:
    block = store.record(name="forked", durability=durability)
    rec = block.__enter__()
    rec.record("tool", "before", {}, 1)

    def child() -> int:
        rec.record("tool", "in-child", {}, 2)
        block.__exit__(None, None, None)  # the child leaves the block it inherited
        store.close()  # and closes the store: its own, not the parent's writer or sessions
        return 0 if rec.stats.lost == 1 and rec.stats.forked_lost == 1 else 3

    assert _in_forked_child(child) == 0
    rec.record("tool", "after", {}, 3)
    block.__exit__(None, None, None)
    _assert_intact(store, rec.run_id, ["before", "after"])
    assert rec.stats.lost == rec.stats.forked_lost == 1


def test_a_child_leaving_the_record_block_neither_seals_nor_waits(local_store: Store) -> None:
    _leave_the_inherited_block(local_store, "batched")


@pytest.mark.parametrize("durability", ["sync", "batched"])
def test_a_child_leaving_the_record_block_leaves_the_pg_run_to_the_parent(
        pg_store: Store, durability: str) -> None:
    _leave_the_inherited_block(pg_store, durability)


def _record_a_run_of_its_own() -> tuple[str, int]:
    store: Store = _inherited["store"]
    with store.record(name="child's own") as rec:
        rec.record("tool", "mine", {}, 1)
    return str(rec.run_id), rec.stats.lost


def test_a_store_used_afresh_in_a_forked_child_records_there(tmp_path: Path,
                                                             spool_dir: Path) -> None:
    with open_store(f"file:{tmp_path / 'runs'}", spool_dir=spool_dir) as store:
        with store.record(name="parent") as rec:
            rec.record("tool", "p", {}, 1)  # the writer thread runs before the fork
        with _fork_pool(store=store) as pool:
            run_id, lost = pool.apply_async(_record_a_run_of_its_own).get(timeout=DEADLINE)
        assert lost == 0
        _assert_intact(store, run_id, ["mine"])
        _assert_intact(store, rec.run_id, ["p"])


def _run_ids() -> list[str]:
    store: Store = _inherited["store"]
    return [str(run.run_id) for run in store.list_runs()]


def _backend_pid(store: Store | None = None) -> int:
    """The server process of the session a store connection of this process gets."""
    backend = (store or _inherited["store"]).backend
    assert isinstance(backend, PostgresBackend)
    with backend._connection("find the session") as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def test_a_forked_child_reads_and_records_through_connections_of_its_own(
        pg_store: Store) -> None:
    with pg_store.record(name="parent") as rec:
        rec.record("tool", "p", {}, 1)
    parents = _backend_pid(pg_store)
    with _fork_pool(store=pg_store) as pool:
        assert pool.apply_async(_run_ids).get(timeout=DEADLINE) == [str(rec.run_id)]
        assert pool.apply_async(_backend_pid).get(timeout=DEADLINE) != parents
        run_id, lost = pool.apply_async(_record_a_run_of_its_own).get(timeout=DEADLINE)
    assert lost == 0
    _assert_intact(pg_store, run_id, ["mine"])
    _assert_intact(pg_store, rec.run_id, ["p"])
    assert _backend_pid(pg_store) > 0  # the parent's connections still work
