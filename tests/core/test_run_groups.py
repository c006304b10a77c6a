"""A short run costs one commit: in batched mode its row, its steps and its seal go to
PostgreSQL in one transaction. When that transaction fails, every row is written on its own
as before (retried, spooled, or lost one by one), and none is stored twice."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import Recorder, Store, open_store
from agentreplay_core._writer import BatchedWriter
from agentreplay_core.stores._pgconn import DatabaseUnavailable
from tests.support.pgfaults import reject_rows


@pytest.fixture
def store(pg_dsn: str, pg_schema: str, spool_dir: Path) -> Iterator[Store]:
    """A store whose batched writer lingers until a flush or a seal wakes it, before any run
    is opened: a run's rows then reach it in one batch, as they do for a run that records
    faster than the writer wakes, and never depending on which thread runs first."""
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir) as opened:
        writer = opened._writer("batched")
        assert isinstance(writer, BatchedWriter)
        writer.linger = 60.0
        yield opened


def _writes(dsn: str, schema: str, run_id: UUID) -> set[str]:
    """The transactions that wrote the run's rows (`xmin`: the transaction that wrote a row
    version; sealing a run row written earlier makes a new version)."""
    tables = ["runs", "run_log"]
    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT to_regclass(%s)", (f'"{schema}".embeddings',)).fetchone() \
                != (None,):
            tables.append("embeddings")
        query = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT xmin::text FROM {} WHERE run_id = %(run)s").format(
                sql.Identifier(schema, table)) for table in tables)
        return {row[0] for row in conn.execute(query, {"run": run_id}).fetchall()}


def _record_as_one_batch(store: Store, name: str, steps: int,
                         embeddings: int = 0) -> Recorder:
    """A run whose rows the writer takes all at once, at the seal (see `store`)."""
    with store.record(name=name) as rec:
        for i in range(steps):
            rec.record("tool", name, {"i": i}, {"result": "x" * 50 * i})
        for i in range(embeddings):
            rec.record("embedding", "embed", {"texts": [str(i)]},
                       [[0.25 * i + j / 7 for j in range(48)]])
    return rec


@pytest.mark.parametrize("steps", [0, 3, 40])
def test_a_short_run_is_stored_in_one_transaction(store: Store, pg_dsn: str, pg_schema: str,
                                                  steps: int) -> None:
    # 3 steps: one statement with the run's row; 40: a COPY inside a transaction
    rec = _record_as_one_batch(store, "short", steps)
    assert len(_writes(pg_dsn, pg_schema, rec.run_id)) == 1
    run = store.get_run(rec.run_id)
    assert (run.status.value, run.step_count) == ("complete", steps)
    assert [s.step for s in store.load_steps(rec.run_id)] == list(range(1, steps + 1))
    assert store.verify(rec.run_id).ok
    assert (rec.stats.steps, rec.stats.lost, rec.stats.spooled, rec.stats.pending) == (
        steps, 0, 0, 0)


def test_embeddings_join_the_transaction(store: Store, pg_dsn: str, pg_schema: str,
                                         server_has_pgvector: bool) -> None:
    rec = _record_as_one_batch(store, "vectors", 2, embeddings=3)
    assert len(_writes(pg_dsn, pg_schema, rec.run_id)) == 1
    assert store.verify(rec.run_id).ok
    with psycopg.connect(pg_dsn) as conn:
        stored = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE run_id = %s").format(
            sql.Identifier(pg_schema, "embeddings")), (rec.run_id,)).fetchone() \
            if server_has_pgvector else (3,)
    assert stored == (3,)


def test_a_long_run_seals_in_its_last_transaction(store: Store, pg_dsn: str,
                                                  pg_schema: str) -> None:
    """The run's row is written with its first steps; the seal with its last ones."""
    with store.record(name="long") as rec:
        for i in range(5):
            rec.record("tool", "t", {"i": i}, i)
        assert rec.flush()
        for i in range(5, 10):
            rec.record("tool", "t", {"i": i}, i)
    assert len(_writes(pg_dsn, pg_schema, rec.run_id)) == 2
    assert store.verify(rec.run_id).ok


@pytest.mark.parametrize("steps", [3, 30])
def test_a_rejected_step_loses_only_itself(store: Store, pg_dsn: str, pg_schema: str,
                                           steps: int) -> None:
    # 30 steps: the server refuses a row in the middle of a COPY
    reject_rows(pg_dsn, pg_schema, "run_log", "poison", "data_exception")
    with store.record(name="poisoned") as rec:
        for i in range(1, steps + 1):
            rec.record("tool", "poison" if i == 2 else "fine", {"i": i}, i)
    assert (rec.stats.steps, rec.stats.lost, rec.stats.spooled) == (steps, 1, 0)
    assert [s.step for s in store.load_steps(rec.run_id)] == [1, *range(3, steps + 1)]
    assert store.get_run(rec.run_id).step_count == steps  # sealed all the same
    report = store.verify(rec.run_id)
    assert [(p.step, p.code) for p in report.problems][:1] == [(2, "missing_step")]


def test_a_rejected_run_row_loses_its_steps_loudly(store: Store, pg_dsn: str,
                                                   pg_schema: str) -> None:
    reject_rows(pg_dsn, pg_schema, "runs", "doomed", "check_violation")
    rec = _record_as_one_batch(store, "doomed", 2)
    assert (rec.stats.steps, rec.stats.lost) == (2, 2)
    assert not store.list_runs()


@pytest.mark.parametrize("steps", [4, 20])  # one statement; a COPY streaming its rows
def test_a_lost_commit_answer_stores_nothing_twice(store: Store, pg_dsn: str,
                                                   pg_schema: str, steps: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The transaction commits but the connection drops before its answer: the rows are
    written again one by one, idempotently, and the run is complete exactly once."""
    backend = store.backend
    commit = backend.write_group
    calls = []

    def commit_then_lose_the_answer(*args: Any) -> None:
        calls.append(args)
        commit(*args)
        raise DatabaseUnavailable("server closed the connection unexpectedly")

    monkeypatch.setattr(backend, "write_group", commit_then_lose_the_answer)
    rec = _record_as_one_batch(store, "unsure", steps)
    assert len(calls) == 1
    assert (rec.stats.steps, rec.stats.lost, rec.stats.spooled) == (steps, 0, 0)
    assert [s.step for s in store.load_steps(rec.run_id)] == list(range(1, steps + 1))
    assert store.get_run(rec.run_id).step_count == steps
    assert store.verify(rec.run_id).ok


@pytest.mark.parametrize("flushed", [True, False])  # made before the COPY: binary; else text
def test_naive_start_times_in_a_copy_read_as_the_server_reads_them(store: Store,
                                                                   pg_dsn: str,
                                                                   flushed: bool) -> None:
    naive = datetime(2024, 5, 1, 12, 30, 15, 250)
    with store.record(name="naive") as rec:
        for i in range(20):
            rec.record("tool", "t", {"i": i}, i, started_at=naive)
        if flushed:
            assert rec.flush()
    with psycopg.connect(pg_dsn) as conn:  # what PostgreSQL makes of a naive timestamp
        row = conn.execute("SELECT %s::timestamptz", (naive,)).fetchone()
    assert row is not None
    assert {s.started_at for s in store.load_steps(rec.run_id)} == {row[0]}
