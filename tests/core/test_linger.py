"""The batched writer's `linger`: how long it waits for more steps before it writes a burst.

A burst recorded within the linger goes to PostgreSQL in one transaction, written without a
flush once the linger is over; a full batch, a flush or a seal does not wait for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import Store, open_store
from agentreplay_core._writer import LINGER, BatchedWriter


def _xmins(dsn: str, schema: str, run_id: object) -> list[str]:
    """The transaction of each stored step of the run (`xmin`), in step order."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(sql.SQL("SELECT xmin::text FROM {} WHERE run_id = %s ORDER BY step")
                            .format(sql.Identifier(schema, "run_log")), (run_id,)).fetchall()
    return [row[0] for row in rows]


def _eventually(check: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _writer(store: Store) -> BatchedWriter:
    writer = store._writer("batched")
    assert isinstance(writer, BatchedWriter)
    return writer


@pytest.mark.parametrize("value", [-0.001, 61, float("nan"), float("inf"), True, "0.1", None])
def test_a_linger_that_is_not_seconds_from_0_to_60_is_refused(
    pg_dsn: str, pg_schema: str, value: Any
) -> None:
    with pytest.raises(ValueError, match="linger must be seconds from 0 to 60"):
        open_store(pg_dsn, schema=pg_schema, linger=value)


@pytest.mark.parametrize("value", [0, 0.5])
def test_the_linger_given_to_open_store_is_the_writers(
    pg_dsn: str, pg_schema: str, value: float
) -> None:
    with open_store(pg_dsn, schema=pg_schema) as default, \
            open_store(pg_dsn, schema=pg_schema, linger=value) as chosen:
        assert (_writer(default).linger, _writer(chosen).linger) == (LINGER, value)
        with chosen.record(name="lingered") as rec:
            rec.record("tool", "t", {"i": 1}, {"ok": True})
        assert [s.step for s in chosen.load_steps(rec.run_id)] == [1]


def test_a_burst_within_the_linger_is_written_by_itself_in_one_transaction(
    pg_dsn: str, pg_schema: str, spool_dir: Path
) -> None:
    linger = 2.0  # far longer than recording the burst takes, so it all joins one batch
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir, linger=linger) as store:
        with store.record(name="burst") as rec:
            t0 = time.monotonic()
            for i in range(20):
                rec.record("tool", "t", {"i": i}, {"result": "x" * i})
            recorded = time.monotonic() - t0
            before = _xmins(pg_dsn, pg_schema, rec.run_id)
            # no flush: the writer writes once its linger is over
            assert _eventually(lambda: len(_xmins(pg_dsn, pg_schema, rec.run_id)) == 20, 30)
            written = _xmins(pg_dsn, pg_schema, rec.run_id)
        assert recorded < linger / 2, "the burst took too long to be a burst; rerun"
        assert before == []  # still lingering right after the burst
        assert len(set(written)) == 1
        assert store.verify(rec.run_id).ok


def test_a_full_batch_flush_and_seal_do_not_wait_for_the_linger(
    pg_dsn: str, pg_schema: str, spool_dir: Path
) -> None:
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir, linger=60) as store:
        writer = _writer(store)
        writer.max_batch = 50
        t0 = time.monotonic()
        with store.record(name="full batch") as rec:
            rec.record("tool", "t", {"i": 0}, {"ok": 0})
            time.sleep(0.5)  # the writer has woken for the first step and lingers now
            for i in range(1, 50):
                rec.record("tool", "t", {"i": i}, {"ok": i})
            # the run's row and 49 steps fill a batch: written without a flush, long before
            # the linger is over (the 50th may join them or wait for the next batch)
            assert _eventually(lambda: len(_xmins(pg_dsn, pg_schema, rec.run_id)) >= 49, 30)
            rec.record("tool", "t", {"i": 50}, {"ok": 50})
            assert rec.flush(timeout=30)
            assert len(_xmins(pg_dsn, pg_schema, rec.run_id)) == 51
            rec.record("tool", "t", {"i": 51}, {"ok": 51})
        # leaving the block sealed the run, and its last step, without lingering either
        assert time.monotonic() - t0 < 45
        assert len(_xmins(pg_dsn, pg_schema, rec.run_id)) == 52
        assert store.get_run(rec.run_id).status.value == "complete"


def _waits_for_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
    return bool(row and row[0])


def test_a_row_queued_while_a_batch_is_written_waits_one_linger_in_all(
    pg_dsn: str, pg_schema: str, spool_dir: Path
) -> None:
    """The linger counts from when the batch before was taken. A row that came while that
    batch was being written (held up here by a lock on the table, for longer than a linger)
    is taken as soon as the write ends, not after one more linger."""
    linger = 3.0
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir, linger=linger,
                    lock_timeout=60, write_statement_timeout=60) as store, \
            psycopg.connect(pg_dsn) as blocker:
        with store.record(name="held up") as rec:
            rec.record("tool", "t", {"i": 1}, {"ok": 1})  # the writer wakes and lingers
            blocker.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE")
                            .format(sql.Identifier(pg_schema, "run_log")))
            # the linger ends: the writer takes the first batch and waits for the lock
            assert _eventually(lambda: _waits_for_a_lock(pg_dsn), 30)
            rec.record("tool", "t", {"i": 2}, {"ok": 2})  # queued during that write
            time.sleep(linger + 0.5)
            blocker.commit()  # the lock goes: the first batch is written
            released = time.monotonic()
            assert _eventually(lambda: len(_xmins(pg_dsn, pg_schema, rec.run_id)) == 2, 30)
            waited = time.monotonic() - released
            first, second = _xmins(pg_dsn, pg_schema, rec.run_id)
        assert first != second  # the second row was not in the batch the lock held up
        assert waited < linger / 2, f"the second batch waited {waited:.1f}s after the first"
        assert store.verify(rec.run_id).ok
