"""Rows are made off the recording thread, in step order, from values copied at record time."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from agentreplay_core import Redactor, Store, open_store
from agentreplay_core._codec import Json


class _NotingRedactor(Redactor):
    """A real redactor that also notes which thread screened each step for secrets (every
    step of a few KB is, from its canonical JSON, before any walk of its trees)."""

    def __init__(self) -> None:
        super().__init__(key=b"k" * 32)
        self.threads: list[str] = []

    def may_hold_secrets(self, *canonical: bytes) -> bool:
        self.threads.append(threading.current_thread().name)
        return super().may_hold_secrets(*canonical)


class _FailingOnce(Redactor):
    """Fails on the step whose input holds "boom" (a bug in preparing one step), in the
    screen of its JSON or in the walk of its trees, whichever comes first."""

    def may_hold_secrets(self, *canonical: bytes) -> bool:
        if b"boom" in canonical[0]:
            raise RuntimeError("redaction bug")
        return super().may_hold_secrets(*canonical)

    def redact_trees(self, trees: Sequence[Json]) -> tuple[list[Json], list[bool]]:
        if "boom" in str(trees[0]):
            raise RuntimeError("redaction bug")
        return super().redact_trees(trees)


@pytest.mark.parametrize("durability", ["batched", "sync"])
def test_steps_are_prepared_on_the_writer_thread_when_batched(
    any_store: Store, durability: str
) -> None:
    noting = _NotingRedactor()
    any_store.redaction = noting
    caller = threading.current_thread().name
    with any_store.record(name="threads", durability=durability) as rec:
        noting.threads.clear()  # the run's own metadata was redacted when it started
        for i in range(5):
            rec.record("tool", "t", {"i": i}, {"token": "sk-" + "a" * 40})
        assert rec.flush()  # else the seal, on this thread, would prepare what is left
    assert len(noting.threads) == 5
    if durability == "batched":
        assert caller not in noting.threads
    else:
        assert set(noting.threads) == {caller}
    steps = any_store.load_steps(rec.run_id)
    assert [s.input for s in steps] == [{"i": i} for i in range(5)]
    assert all("sk-" not in str(s.output) for s in steps)  # redacted all the same
    assert any_store.verify(rec.run_id).ok


def test_values_changed_after_record_returns_are_stored_as_they_were(any_store: Store) -> None:
    request: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    answer: dict[str, Any] = {"content": "hello", "tags": ["a"]}
    with any_store.record(name="mutation") as rec:
        rec.record("llm", "chat", request, answer)
        # the writer lingers a moment before it prepares a burst: the step is still queued
        request["messages"].append({"role": "assistant", "content": "changed"})
        request["messages"][0]["content"] = "changed"
        answer["tags"].append("b")
        answer["content"] = "changed"
    stored = any_store.load_steps(rec.run_id)[0]
    assert stored.input == {"messages": [{"role": "user", "content": "hi"}]}
    assert stored.output == {"content": "hello", "tags": ["a"]}


def test_a_step_that_cannot_be_prepared_is_stored_as_a_marker_and_the_chain_holds(
    tmp_path: Any,
) -> None:
    with open_store(f"file:{tmp_path / 'runs'}") as store:
        store.redaction = _FailingOnce(key=b"k" * 32)
        with store.record(name="bug") as rec:
            assert rec.record("tool", "t", {"x": 1}, 1) == 1
            assert rec.record("tool", "t", {"x": "boom"}, 2) == 2
            assert rec.record("tool", "t", {"x": 3}, 3) == 3
        assert rec.stats.internal_errors == 1
        assert rec.stats.unencodable == 1
        steps = store.load_steps(rec.run_id)
        assert [s.step for s in steps] == [1, 2, 3]
        assert steps[1].input["__ar__"] == "unencodable"
        assert "redaction bug" in steps[1].input["error"]
        assert "boom" not in str(steps[1].input) + str(steps[1].output)  # nothing unredacted
        assert (steps[0].output, steps[2].output) == (1, 3)
        assert store.verify(rec.run_id).ok
        with store.replay(rec.run_id, allow_unused=True) as player:
            assert player.next("tool", "t", {"x": 1}) == 1
            assert player.next("tool", "t", {"x": 3}) == 3


def test_many_threads_record_one_chain_in_step_order(pg_store: Store) -> None:
    with pg_store.record(name="threads") as rec:
        def work(t: int) -> None:
            for i in range(200):
                rec.record("tool", f"t{t}", {"i": i}, {"t": t, "i": i})
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    report = pg_store.verify(rec.run_id)
    assert report.ok and report.step_count == 1_600
    steps = pg_store.load_steps(rec.run_id)
    for t in range(8):
        mine = [s.input["i"] for s in steps if s.name == f"t{t}"]
        assert mine == list(range(200))  # each thread's steps in the order it made them


def test_a_caller_ahead_of_a_stalled_writer_prepares_its_own_steps(
    pg_dsn: str, pg_schema: str
) -> None:
    import psycopg
    from psycopg import sql

    store = open_store(pg_dsn, schema=pg_schema)
    noting = _NotingRedactor()
    store.redaction = noting
    blocker = psycopg.connect(pg_dsn)
    caller = threading.current_thread().name
    try:
        with store.record(name="behind") as rec:
            rec.record("tool", "warm-up", {}, 0)
            assert rec.flush()
            noting.threads.clear()
            blocker.execute(sql.SQL("LOCK TABLE {}.run_log IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(pg_schema)))
            for i in range(2_500):  # the writer takes one batch (1,000) and waits on the lock
                rec.record("tool", "t", {"i": i}, i)
            prepared_here = noting.threads.count(caller)
            blocker.rollback()
        # the queue stayed about one batch long: the rest was prepared on this thread
        assert prepared_here >= 2_500 - 2 * 1_000
    finally:
        blocker.close()
        store.close()
    with open_store(pg_dsn, schema=pg_schema) as check:
        assert check.verify(rec.run_id).ok
        assert len(check.load_steps(rec.run_id)) == 2_501
