"""A group whose rows are still being made is streamed: `LazyRows` are made as the COPY sends
them (in binary, as rows made first are), and a `SealLater` is made after them,
in the same transaction. A short run's seal leaves the making to the writer's thread, which
then overlaps it with the server's work; a longer backlog is shared with the sealing thread."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import _codec, open_store
from agentreplay_core._model import Run, RunStatus
from agentreplay_core._step_chain import StepChain
from agentreplay_core._writer import BatchedWriter
from agentreplay_core.stores._backend import LazyRows, PendingStep, RunFinish, SealLater
from agentreplay_core.stores._pgwrite import SMALL_BATCH
from agentreplay_core.stores._postgres import PostgresBackend

T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
#: labels and JSON a COPY format could mangle (text COPY would have to escape them)
AWKWARD = "tab\there\nnew line\r\\back\\slash \\N \\. é ✓ 🚀 \u2028"


def _rows(run_id: uuid.UUID, count: int) -> list[PendingStep]:
    rows = []
    for n in range(1, count + 1):
        payload = {"text": f"{AWKWARD} {n}", "list": [n, -1.5, None, True, "\\"]}
        rows.append(PendingStep(
            run_id=run_id, step=n, kind=f"llm{n % 2}", name=f"name {AWKWARD}",
            match_key=f"key\t{n}\\", path=f"seq:step:{n}\n{AWKWARD}",
            input_json=_codec.dumps({"in": payload}),
            # JSON with raw whitespace between tokens: valid, not canonical
            output_json=b'{\t"out" :\r\n' + _codec.dumps(payload) + b"}",
            is_error=n % 3 == 0,
            # naive times are read in the session's zone, as a server reads them as text
            started_at=T0 + timedelta(seconds=n) if n % 2 else datetime(2024, 5, 1, 9, n),
            duration_ms=[0.125, math.inf, -0.0, 1e300][n % 4], checksum=f"c{n}"))
    return rows


def _lazy(rows: list[PendingStep], made: list[int] | None = None) -> LazyRows:
    def make(i: int) -> PendingStep:
        if made is not None:
            made.append(i)
        return rows[i]

    return LazyRows({r.run_id for r in rows}, len(rows), make)


def _new_run() -> Run:
    return Run(run_id=uuid.uuid4(), name="streamed", started_at=T0)


def _xmins(dsn: str, schema: str, run_id: uuid.UUID) -> set[str]:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT xmin::text FROM {} WHERE run_id = %(r)s UNION ALL "
                        "SELECT xmin::text FROM {} WHERE run_id = %(r)s").format(
            sql.Identifier(schema, "runs"), sql.Identifier(schema, "run_log"))
        return {row[0] for row in conn.execute(query, {"r": run_id}).fetchall()}


def test_rows_made_as_they_are_sent_store_what_rows_made_first_store(
        backend: PostgresBackend) -> None:
    count = SMALL_BATCH * 3  # enough to be streamed
    first, streamed = uuid.uuid4(), uuid.uuid4()
    backend.create_run(Run(run_id=first, started_at=T0))
    backend.append(_rows(first, count))  # made already
    made: list[int] = []
    lazy = _lazy(_rows(streamed, count), made)
    assert made == []
    backend.write_group(Run(run_id=streamed, started_at=T0), lazy, [], None)
    assert made == list(range(count))  # each row made once, in order

    by_first, by_streamed = backend.load_steps(first), backend.load_steps(streamed)
    assert len(by_streamed) == count
    assert [s.model_copy(update={"run_id": streamed}) for s in by_first] == by_streamed
    one = by_streamed[0]
    assert (one.name, one.match_key, one.path) == (
        f"name {AWKWARD}", "key\t1\\", f"seq:step:1\n{AWKWARD}")
    assert one.input == {"in": {"text": f"{AWKWARD} 1", "list": [1, -1.5, None, True, "\\"]}}
    assert {s.duration_ms for s in by_streamed} == {0.125, math.inf, -0.0, 1e300}


def test_a_streamed_group_stores_a_nan_duration(backend: PostgresBackend) -> None:
    """Not in the comparison above: NaN equals nothing, itself included."""
    run = _new_run()
    rows = [replace_duration(r, math.nan) for r in _rows(run.run_id, SMALL_BATCH + 2)]
    backend.write_group(run, _lazy(rows), [], None)
    assert all(math.isnan(s.duration_ms) for s in backend.load_steps(run.run_id))


def replace_duration(row: PendingStep, duration_ms: float) -> PendingStep:
    return dataclasses.replace(row, duration_ms=duration_ms)


def test_a_seal_made_later_seals_its_run_after_the_rows_in_one_transaction(
        backend: PostgresBackend, pg_dsn: str, pg_schema: str) -> None:
    run = _new_run()
    made: list[int] = []
    lazy = _lazy(_rows(run.run_id, 20), made)
    made_at_seal: list[int] = []

    def seal() -> RunFinish:
        made_at_seal.append(len(made))
        return RunFinish(run.run_id, RunStatus.COMPLETE, 20, "head", T0 + timedelta(hours=1))

    backend.write_group(run, lazy, [], SealLater(run.run_id, seal))
    assert made_at_seal == [20]
    stored = backend.get_run(run.run_id)
    assert (stored.status, stored.step_count, stored.head_checksum, stored.finished_at) == (
        RunStatus.COMPLETE, 20, "head", T0 + timedelta(hours=1))
    assert len(backend.load_steps(run.run_id)) == 20
    assert len(_xmins(pg_dsn, pg_schema, run.run_id)) == 1


@pytest.mark.parametrize("count", [3, 20])  # one statement; a streamed COPY
def test_a_seal_made_later_with_nothing_to_seal_leaves_the_run_open(
        backend: PostgresBackend, count: int) -> None:
    run = _new_run()
    backend.write_group(run, _lazy(_rows(run.run_id, count)), [],
                        SealLater(run.run_id, lambda: None))
    assert backend.get_run(run.run_id).status == RunStatus.RECORDING
    assert len(backend.load_steps(run.run_id)) == count


def test_a_seal_made_later_of_another_run_updates_that_run(backend: PostgresBackend) -> None:
    earlier, run = _new_run(), _new_run()
    backend.create_run(earlier)
    finish = RunFinish(earlier.run_id, RunStatus.FAILED, 0, None, T0)
    backend.write_group(run, _lazy(_rows(run.run_id, 20)), [],
                        SealLater(earlier.run_id, lambda: finish))
    assert backend.get_run(earlier.run_id).status == RunStatus.FAILED
    assert backend.get_run(run.run_id).status == RunStatus.RECORDING
    assert len(backend.load_steps(run.run_id)) == 20


def test_lazy_rows_are_made_once_in_order_whichever_way_they_are_read() -> None:
    rows = _rows(uuid.uuid4(), 6)
    made: list[int] = []
    lazy = _lazy(rows, made)
    assert lazy.run_ids == {rows[0].run_id} and made == []  # known before any row is made
    assert len(lazy) == 6 and made == []
    assert lazy[2] is rows[2] and made == [0, 1, 2]
    assert lazy[-1] is rows[5] and made == list(range(6))
    assert list(lazy) == rows and lazy[1:3] == rows[1:3] and made == list(range(6))
    with pytest.raises(IndexError):
        lazy[6]
    partly = _lazy(rows, made := [])
    iterator = iter(partly)
    assert next(iterator) is rows[0]
    assert partly[3] is rows[3]
    assert list(iterator) == rows[1:] and made == list(range(6))


def test_a_seal_made_later_is_made_once_and_a_failure_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []
    finish = RunFinish(uuid.uuid4(), RunStatus.COMPLETE, 0, None, T0)

    def make() -> RunFinish:
        calls.append(1)
        return finish

    later = SealLater(finish.run_id, make)
    assert later.made() is finish and later.made() is finish and calls == [1]

    def broken() -> RunFinish:
        raise RuntimeError("chain lost")

    with caplog.at_level(logging.ERROR, logger="agentreplay"):
        assert SealLater(finish.run_id, broken).made() is None
    assert "could not be sealed" in caplog.text


def _making_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the threads that make rows, one per row made."""
    names: list[str] = []
    settle: Callable[..., None] = StepChain._settle

    def recorded(chain: StepChain, step: object) -> None:
        names.append(threading.current_thread().name)
        settle(chain, step)

    monkeypatch.setattr(StepChain, "_settle", recorded)
    return names


@pytest.mark.parametrize(("steps", "max_batch", "sealer_helps"),
                         [(40, 1_000, False), (40, 10, True)])
def test_who_makes_a_runs_last_rows(pg_dsn: str, pg_schema: str, spool_dir: Path,
                                    monkeypatch: pytest.MonkeyPatch, steps: int,
                                    max_batch: int, sealer_helps: bool) -> None:
    """A backlog of up to a batch is made by the writer while it streams it; a longer one
    by the sealing thread too, which would only wait otherwise. Either way the run is
    whole, sealed and verified."""
    names = _making_threads(monkeypatch)
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir) as store:
        writer = store._writer("batched")
        assert isinstance(writer, BatchedWriter)
        writer.linger, writer.max_batch = 60.0, max_batch  # the rows wait for the seal
        with store.record(name="backlog") as rec:
            for i in range(steps):
                rec.record("tool", "t", {"i": i, "text": AWKWARD}, {"out": "x" * i})
            sealing = threading.current_thread().name
        assert len(names) == steps
        assert (sealing in names) is sealer_helps
        assert (rec.stats.steps, rec.stats.lost, rec.stats.pending) == (steps, 0, 0)
        assert store.get_run(rec.run_id).status.value == "complete"
        assert store.verify(rec.run_id).ok
