"""What recording promises beyond single calls: metadata, backpressure, exit, vectors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import Store, StoreError, open_store
from tests.support.pgfaults import reject_rows


def test_run_metadata_is_filled_in(any_store: Store, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=n",
                    "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    monkeypatch.chdir(repo)
    with any_store.record(name="meta", metadata={"ticket": 42}, tags=["nightly"]) as rec:
        pass
    meta = any_store.get_run(rec.run_id).metadata
    assert meta["git_revision"] == head
    assert meta["ticket"] == 42
    assert meta["tags"] == ["nightly"]
    assert meta["python"] == ".".join(map(str, sys.version_info[:3]))
    assert meta["pid"] == os.getpid()
    assert "pydantic" in meta["packages"]
    own = meta["agentreplay"]
    assert (own["durability"], own["entropy"], own["pid"]) == ("batched", False, os.getpid())


def test_bounded_queue_applies_backpressure(pg_dsn: str, pg_schema: str) -> None:
    store = open_store(pg_dsn, schema=pg_schema, max_queue=50)
    blocker = psycopg.connect(pg_dsn)
    total = 600
    try:
        with store.record(name="pressure") as rec:
            rec.record("tool", "warm-up", {}, 0)
            assert rec.flush()
            # Another session locks the table, so the writer's COPY waits on it.
            blocker.execute(sql.SQL("LOCK TABLE {}.run_log IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(pg_schema)))
            worker = threading.Thread(
                target=lambda: [rec.record("tool", "t", {"i": i}, i) for i in range(total)])
            worker.start()
            time.sleep(1.0)
            recorded_while_blocked = rec.step_count
            assert worker.is_alive()  # the recording thread waits instead of growing memory
            assert recorded_while_blocked <= 1 + 50 + 1_000 + 2
            assert recorded_while_blocked < total
            blocker.rollback()
            worker.join(timeout=60)
            assert not worker.is_alive()
    finally:
        blocker.close()
        store.close()
    with open_store(pg_dsn, schema=pg_schema) as check:
        assert len(check.load_steps(rec.run_id)) == total + 1
        assert check.verify(rec.run_id).ok


EXITING_CHILD = textwrap.dedent("""
    import sys
    from agentreplay_core import open_store
    store = open_store(sys.argv[1], schema=sys.argv[2])
    with store.record(name="exits") as rec:
        for i in range(3000):
            rec.record("tool", "t", {"i": i}, "z" * 200)
    print(rec.run_id)
    # no store.close(): the rows still queued are written at interpreter exit
""")


def test_queued_rows_are_written_at_interpreter_exit(pg_dsn: str, pg_schema: str,
                                                      tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(EXITING_CHILD)
    out = subprocess.run([sys.executable, str(script), pg_dsn, pg_schema], check=True,
                         capture_output=True, text=True).stdout.strip()
    with open_store(pg_dsn, schema=pg_schema) as store:
        assert len(store.load_steps(out)) == 3000
        assert store.verify(out).ok


def test_recorded_embeddings_are_searchable(pg_store: Store) -> None:
    vectors = {"cat": [1.0, 0.0, 0.0] + [0.0] * 61, "dog": [0.9, 0.1, 0.0] + [0.0] * 61,
               "car": [0.0, 0.0, 1.0] + [0.0] * 61}
    with pg_store.record(name="rag") as rec:
        rec.record("embedding", "embed-docs", {"texts": list(vectors)}, list(vectors.values()))
        rec.record("embedding", "embed-query", {"text": "kitten"}, [0.95, 0.05] + [0.0] * 62)
    if not getattr(pg_store.backend, "has_pgvector", False):
        with pytest.raises(StoreError, match="vector"):
            pg_store.search_embeddings(vectors["cat"], limit=2)
        return
    # L2 distances to the query: cat 0.020, kitten 0.058, dog 0.128, car 1.414
    hits = pg_store.search_embeddings([1.0, 0.02] + [0.0] * 62, limit=3)
    assert [(h.step, h.position) for h in hits] == [(1, 0), (2, 0), (1, 1)]
    assert all(h.run_id == rec.run_id for h in hits)
    assert [h.name for h in hits] == ["embed-docs", "embed-query", "embed-docs"]
    assert hits[0].distance == pytest.approx(0.02, abs=1e-6)
    assert hits[0].distance <= hits[1].distance <= hits[2].distance


def test_a_row_the_database_rejects_is_lost_loudly_not_retried_forever(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool) as store:
        reject_rows(pg_dsn, pg_schema, "run_log", "poison", "data_exception")
        with store.record(name="poisoned", durability="sync") as rec:
            rec.record("tool", "fine", {}, 1)
            rec.record("tool", "poison", {}, 2)
            rec.record("tool", "fine", {}, 3)
        with store.record(name="bystander") as other:
            other.record("tool", "fine", {}, 4)
        assert rec.stats.lost == 1 and rec.stats.spooled == 0
        assert [s.step for s in store.load_steps(rec.run_id)] == [1, 3]
        report = store.verify(rec.run_id)
        assert [(p.step, p.code) for p in report.problems][:1] == [(2, "missing_step")]
        assert store.verify(other.run_id).ok  # not spooled behind a tripped breaker
    assert not spool.exists() or not list(spool.iterdir())


def test_a_stuck_writer_costs_one_put_timeout_then_rows_spool_at_once(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    store = open_store(pg_dsn, schema=pg_schema, max_queue=3, spool_dir=tmp_path / "spool")
    blocker = psycopg.connect(pg_dsn)
    timings = []
    try:
        with store.record(name="stalled") as rec:
            rec.record("tool", "warm-up", {}, 0)
            assert rec.flush()
            writer = store._batched
            assert writer is not None
            writer.put_timeout = 1.0
            blocker.execute(sql.SQL("LOCK TABLE {}.run_log IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(pg_schema)))
            for i in range(12):
                t0 = time.monotonic()
                rec.record("tool", "t", {"i": i}, i)
                timings.append(time.monotonic() - t0)
            t0 = time.monotonic()
        seal_time = time.monotonic() - t0
        # only the first row that met a full queue waited; the rest spooled straight away
        assert sum(1 for t in timings if t > 0.5) == 1
        assert seal_time < 5
        assert rec.stats.spooled > 0
        assert rec.stats.spooled + rec.stats.pending + rec.stats.lost <= 13
        blocker.rollback()
    finally:
        blocker.close()
        store.close()
    with open_store(pg_dsn, schema=pg_schema, spool_dir=tmp_path / "spool") as check:
        check.flush_spool()
        assert len(check.load_steps(rec.run_id)) == 13
        assert check.verify(rec.run_id).ok


def test_a_run_row_the_database_rejects_loses_the_run_loudly(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool) as store:
        reject_rows(pg_dsn, pg_schema, "runs", "doomed", "check_violation")
        with store.record(name="doomed", durability="sync") as rec:
            rec.record("tool", "t", {}, 1)
            rec.record("tool", "t", {}, 2)
        with store.record(name="fine") as other:
            other.record("tool", "t", {}, 3)
        assert rec.stats.lost == 2
        assert store.verify(other.run_id).ok
        assert [r.name for r in store.list_runs()] == ["fine"]
    assert not spool.exists() or not list(spool.glob("*.jsonl*"))


class _Adapter:
    """What an adapter registers: a bound method, recording its unfinished calls."""

    def __init__(self, recorder: Any, fail: bool = False) -> None:
        self.recorder, self.fail = recorder, fail
        recorder.before_seal(self.finish)

    def finish(self) -> None:
        if self.fail:
            raise RuntimeError("an adapter bug")
        self.recorder.record("llm", "unfinished", {"n": 1}, {"abandoned": True}, is_error=True)


def test_before_seal_callbacks_record_into_the_run_and_never_raise(any_store: Store) -> None:
    with any_store.record() as rec:
        twice = _Adapter(rec)
        rec.before_seal(twice.finish)  # an equal bound method: still called once
        _Adapter(rec, fail=True)
        rec.forget_before_seal(_Adapter(rec).finish)  # its calls all ended
    assert [s.name for s in any_store.load_steps(rec.run_id)] == ["unfinished"]
    assert rec.stats.internal_errors == 1  # the failing one, counted
    assert any_store.get_run(rec.run_id).status == "complete"
