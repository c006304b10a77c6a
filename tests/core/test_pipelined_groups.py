"""A burst run's one group (its steps made as they go, then its row sealed) goes as one libpq
pipeline of INSERTs of binary arrays: it must store exactly what the binary COPY stores, leave
nothing behind when the server refuses a row or the connection dies midway, and hand the
pool back a connection it can use."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import RunStatus, StoreError, open_store
from agentreplay_core._model import Run
from agentreplay_core.stores import _pgpipeline
from agentreplay_core.stores._backend import PendingStep, RunFinish, SealLater
from agentreplay_core.stores._postgres import PostgresBackend
from tests.core.test_streamed_groups import T0, _lazy, _rows
from tests.support.pgfaults import reject_rows

COUNT = _pgpipeline.CHUNK_ROWS * 2 + 7  # three chunks by count, and more cut by size


def burst_rows(run_id: uuid.UUID) -> list[PendingStep]:
    """Awkward text in every column, and two outputs large enough to cut a chunk by size."""
    rows = _rows(run_id, COUNT)
    big = b'{"big": "' + b"x" * _pgpipeline.CHUNK_BYTES + b'"}'
    for n in (10, 11):
        rows[n] = dataclasses.replace(rows[n], output_json=big)
    # a delta-encoded input: stored as the delta, not as the logical input
    rows[3] = dataclasses.replace(rows[3], stored_input_json=b'{"delta": [1, 2]}')
    return rows


def sealing(run_id: uuid.UUID, then: Callable[[], None] = lambda: None) -> SealLater:
    def seal() -> RunFinish:
        then()
        return RunFinish(run_id, RunStatus.COMPLETE, COUNT, "head", T0 + timedelta(hours=1))

    return SealLater(run_id, seal)


@pytest.fixture
def pipelines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many groups went as a pipeline (the real one, counted)."""
    calls: list[int] = []
    real = _pgpipeline.write_in_pipeline

    def counted(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        real(*args, **kwargs)

    monkeypatch.setattr(_pgpipeline, "write_in_pipeline", counted)
    return calls


def table_text(dsn: str, schema: str) -> tuple[list[str], list[str]]:
    """Every row of `runs` and `run_log`, as the server prints it."""
    with psycopg.connect(dsn) as conn:
        def rows(table: str, order: str) -> list[str]:
            query = sql.SQL("SELECT t::text FROM {} AS t ORDER BY {}").format(
                sql.Identifier(schema, table), sql.Identifier(order))
            return [r[0] for r in conn.execute(query)]

        return rows("runs", "run_id"), rows("run_log", "step")


@pytest.fixture
def copying(pg_dsn: str, other_schema: str) -> Iterator[PostgresBackend]:
    store = PostgresBackend(pg_dsn, schema=other_schema, max_size=2)
    yield store
    store.close()


def test_a_pipeline_stores_what_binary_copy_stores(
        backend: PostgresBackend, copying: PostgresBackend, pg_dsn: str, pg_schema: str,
        other_schema: str, pipelines: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run(run_id=uuid.uuid4(), name="burst \t\\ é", started_at=T0,
              metadata={"quote": "it's \\ \"q\"", "n": [1.5, None]})
    rows = burst_rows(run.run_id)
    made: list[int] = []
    backend.write_group(run, _lazy(rows, made), [], sealing(run.run_id))
    assert pipelines == [1]
    assert made == list(range(COUNT))  # each row made once, in order
    monkeypatch.setattr(_pgpipeline, "supported", lambda: False)  # a libpq before 14
    copying.write_group(run, _lazy(rows), [], sealing(run.run_id))
    assert pipelines == [1]

    piped, copied = table_text(pg_dsn, pg_schema), table_text(pg_dsn, other_schema)
    assert len(piped[1]) == COUNT
    assert piped == copied
    stored = backend.get_run(run.run_id)
    assert (stored.status, stored.step_count, stored.head_checksum) == (
        RunStatus.COMPLETE, COUNT, "head")


def test_chunks_are_cut_by_rows_and_by_size() -> None:
    rows = burst_rows(uuid.uuid4())
    sizes = [len(c) for c in _pgpipeline.chunks(iter(rows))]
    assert sum(sizes) == COUNT
    # rows 0-10 (the 11th is large), 11 alone, then 25, 25 and the rest
    assert sizes == [11, 1, 25, 20]


@pytest.fixture
def one_connection(pg_dsn: str, pg_schema: str) -> Iterator[PostgresBackend]:
    """A backend whose every write takes the same connection."""
    store = PostgresBackend(pg_dsn, schema=pg_schema, min_size=1, max_size=1)
    yield store
    store.close()


def test_a_refused_row_mid_pipeline_stores_nothing_and_the_connection_serves_again(
        one_connection: PostgresBackend, pg_dsn: str, pg_schema: str, pipelines: list[int],
        caplog: pytest.LogCaptureFixture) -> None:
    backend = one_connection
    run = Run(run_id=uuid.uuid4(), started_at=T0)
    rows = burst_rows(run.run_id)
    rows[40] = dataclasses.replace(rows[40], name="refuse me")  # in the second chunk
    reject_rows(pg_dsn, pg_schema, "run_log", "refuse me", "22023")
    with pytest.raises(StoreError, match="refused") as caught:
        backend.write_group(run, _lazy(rows), [], sealing(run.run_id))
    assert pipelines == [1]
    assert backend.is_permanent(caught.value)  # a refusal of the data: not retried
    assert table_text(pg_dsn, pg_schema) == ([], [])
    # returned idle, out of pipeline mode (else the pool warns, and resets or discards it)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]
    # the same connection takes the next group, with the statement the refused one prepared
    again = Run(run_id=uuid.uuid4(), started_at=T0)
    backend.write_group(again, _lazy(burst_rows(again.run_id)), [], sealing(again.run_id))
    assert len(backend.load_steps(again.run_id)) == COUNT
    assert backend.get_run(again.run_id).status == RunStatus.COMPLETE


def terminate_writer(dsn: str) -> None:
    """End the server session that is sending the pipeline's INSERTs, as a server restart or
    a network failure would."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND query LIKE 'INSERT INTO%unnest(%'").fetchall()
    assert ended == [(True,)]


def test_a_connection_lost_mid_pipeline_stores_nothing_and_is_replaced(
        backend: PostgresBackend, pg_dsn: str, pg_schema: str, pipelines: list[int]) -> None:
    run = Run(run_id=uuid.uuid4(), started_at=T0)
    with pytest.raises(StoreError) as caught:
        backend.write_group(run, _lazy(burst_rows(run.run_id)), [],
                            sealing(run.run_id, then=lambda: terminate_writer(pg_dsn)))
    assert pipelines == [1]
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert not backend.is_permanent(caught.value)  # an outage: retried, then spooled
    assert table_text(pg_dsn, pg_schema) == ([], [])
    again = Run(run_id=uuid.uuid4(), started_at=T0)
    backend.write_group(again, _lazy(burst_rows(again.run_id)), [], sealing(again.run_id))
    assert backend.get_run(again.run_id).status == RunStatus.COMPLETE


def test_a_run_whose_pipeline_lost_its_connection_is_stored_whole_by_the_retry(
        pg_dsn: str, pg_schema: str, pipelines: list[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the store: the group fails, and the writer stores the run's rows one way or
    another (a commit whose answer was lost is retried without storing a row twice)."""
    real = _pgpipeline.step_arrays
    killed: list[int] = []

    def arrays_then_kill(rows: Any, zone: Any) -> list[bytes]:
        if not killed:
            killed.append(1)
            terminate_writer(pg_dsn)
        return real(rows, zone)

    monkeypatch.setattr(_pgpipeline, "step_arrays", arrays_then_kill)
    with open_store(pg_dsn, schema=pg_schema) as store:
        with store.record(name="burst") as rec:
            for n in range(60):
                rec.record("tool", "t", {"n": n}, "x" * 300)
        assert killed == [1] and len(pipelines) >= 1
        assert rec.stats.lost == 0 and rec.stats.spooled == 0
        assert store.get_run(rec.run_id).status == RunStatus.COMPLETE
        assert len(store.load_steps(rec.run_id)) == 60
        assert store.verify(rec.run_id).ok


def test_the_insert_is_prepared_once_a_connection_and_again_when_deallocated(
        one_connection: PostgresBackend) -> None:
    backend = one_connection

    def group() -> Run:
        run = Run(run_id=uuid.uuid4(), started_at=T0)
        backend.write_group(run, _lazy(burst_rows(run.run_id)), [], sealing(run.run_id))
        return run

    def prepared() -> list[str]:
        with backend._connection("list prepared statements") as conn:
            return [r[0] for r in conn.execute(
                "SELECT name FROM pg_prepared_statements WHERE name LIKE 'agentreplay%'")]

    group()
    group()
    assert len(prepared()) == 1  # one connection, one statement
    with backend._connection("forget prepared statements") as conn:
        conn.execute("DEALLOCATE ALL")
    with pytest.raises(StoreError, match="does not exist"):
        group()  # the writer's sink then writes its rows one by one
    kept = group()  # prepared again
    assert backend.get_run(kept.run_id).status == RunStatus.COMPLETE
    assert len(prepared()) == 1


def test_a_value_an_int4_cannot_hold_is_a_permanent_error(
        backend: PostgresBackend, pg_dsn: str, pg_schema: str, pipelines: list[int]) -> None:
    run = Run(run_id=uuid.uuid4(), started_at=T0)
    rows = burst_rows(run.run_id)
    rows[-1] = dataclasses.replace(rows[-1], step=2**31)
    with pytest.raises(StoreError, match="out of its column's range") as caught:
        backend.write_group(run, _lazy(rows), [], sealing(run.run_id))
    assert pipelines == [1]
    assert backend.is_permanent(caught.value)  # as binary COPY's: refused, not retried
    assert table_text(pg_dsn, pg_schema) == ([], [])


def test_behind_a_transaction_pooler_the_pipeline_prepares_nothing_and_stores_the_same(
        pg_dsn: str, pg_schema: str, other_schema: str, copying: PostgresBackend,
        pipelines: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """`pooler="transaction"`: each chunk's INSERT planned where it runs, the same rows as
    binary COPY, and no statement left on the session, neither the group's nor psycopg's."""
    backend = PostgresBackend(pg_dsn, schema=pg_schema, max_size=1, pooler="transaction")
    try:
        runs = [Run(run_id=uuid.uuid4(), name=f"pooled {n}", started_at=T0) for n in range(3)]
        for run in runs:
            backend.write_group(run, _lazy(burst_rows(run.run_id)), [], sealing(run.run_id))
            for _ in range(8):  # psycopg would prepare a statement run five times
                assert backend.get_run(run.run_id).step_count == COUNT
        assert pipelines == [1, 1, 1]
        with backend._connection("list prepared statements") as conn:
            assert conn.execute("SELECT name FROM pg_prepared_statements").fetchall() == []
    finally:
        backend.close()
    monkeypatch.setattr(_pgpipeline, "supported", lambda: False)
    for run in runs:
        copying.write_group(run, _lazy(burst_rows(run.run_id)), [], sealing(run.run_id))
    assert table_text(pg_dsn, pg_schema) == table_text(pg_dsn, other_schema)
