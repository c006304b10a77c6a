"""`agentreplay prune --older-than`: old runs go, live recordings and kept tags stay."""

from __future__ import annotations

import contextlib
import socket
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import Run, RunNotFound, RunStatus, Store, open_store
from agentreplay_core._prune import plan_prune, prune
from tests.core.test_cli_runs import agentreplay, json_of, one_line_error, record_then_die


@pytest.fixture(autouse=True)
def _own_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTREPLAY_SPOOL_DIR", str(tmp_path / "spool"))


def finished(store: Store, name: str, *, tags: tuple[str, ...] = (),
             failed: bool = False) -> uuid.UUID:
    with pytest.raises(RuntimeError) if failed else contextlib.nullcontext(), \
            store.record(name=name, tags=tags, durability="sync") as rec:
        rec.record("embedding", "embed", {"texts": [name]}, [[0.5, 0.25]])
        if failed:
            raise RuntimeError("failed run")
    return rec.run_id


def elsewhere(store: Store) -> uuid.UUID:
    """A run left `recording` by a process on another host (its liveness is unknowable)."""
    run = Run(run_id=uuid.uuid4(), name="remote", started_at=datetime.now(timezone.utc),
              metadata={"agentreplay": {"pid": 1, "host": "not-" + socket.gethostname()}})
    store.backend.create_run(run)
    return run.run_id


def rows_of(dsn: str, schema: str, run_id: uuid.UUID) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}.run_log WHERE run_id = %s").format(
            sql.Identifier(schema)), (run_id,)).fetchone()
    return int(row[0]) if row else -1


def test_prune_deletes_old_runs_but_never_live_recordings(pg_dsn: str, pg_schema: str) -> None:
    where = ("--dsn", pg_dsn, "--schema", pg_schema)
    dead = uuid.UUID(record_then_die(pg_dsn, pg_schema))
    with open_store(pg_dsn, schema=pg_schema) as store, \
            store.record(name="live", durability="sync") as live:
        live.record("tool", "t", {}, 1)
        old = finished(store, "old")
        kept = finished(store, "kept", tags=("keep",))
        failed = finished(store, "failed-old", failed=True)
        remote = elsewhere(store)
        recent = finished(store, "recent")
        aged = [dead, live.run_id, old, kept, failed, remote]
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {}.runs SET started_at = now() - interval '40 days' "
                                 "WHERE run_id = ANY(%s)").format(sql.Identifier(pg_schema)),
                         ([str(r) for r in aged],))

        plan = json_of(agentreplay("prune", "--older-than", "30d", "--keep-tag", "keep",
                                   "--dry-run", "--json", *where))
        assert plan["dry_run"] is True and plan["deleted"] == []
        assert {r["run_id"] for r in plan["would_delete"]} == {str(dead), str(old), str(failed)}
        assert {r["run_id"] for r in plan["still_recording"]} == {str(live.run_id), str(remote)}
        assert len(store.list_runs(limit=None)) == 7  # a dry run deletes nothing

        only_failed = json_of(agentreplay("prune", "--older-than", "4w", "--status", "failed",
                                          "--json", *where))
        assert [r["run_id"] for r in only_failed["deleted"]] == [str(failed)]
        with pytest.raises(RunNotFound):
            store.get_run(failed)
        assert rows_of(pg_dsn, pg_schema, failed) == 0

        table = agentreplay("prune", "--older-than", "30d", "--keep-tag", "keep", *where)
        assert table.returncode == 0, table.stderr
        assert "deleted 2 runs" in table.stdout
        assert str(dead)[:8] in table.stdout and str(old)[:8] in table.stdout
        assert "kept 2 old runs still recording" in table.stderr
        assert {r.run_id for r in store.list_runs(limit=None)} == {
            live.run_id, kept, remote, recent}
        assert rows_of(pg_dsn, pg_schema, old) == 0
        assert rows_of(pg_dsn, pg_schema, live.run_id) == 1
        live.record("tool", "t", {}, 2)  # the live recording goes on untouched
    with open_store(pg_dsn, schema=pg_schema) as store:
        assert store.get_run(live.run_id).status == RunStatus.COMPLETE
        assert store.verify(live.run_id).ok

    bad = agentreplay("prune", "--older-than", "a month", *where)
    assert "not a duration" in one_line_error(bad)
    huge = agentreplay("prune", "--older-than", "99999999999d", *where)
    assert "longer than any duration" in one_line_error(huge)
    missing = agentreplay("prune", *where)
    assert missing.returncode == 2 and "--older-than" in missing.stderr


def test_plan_prune_by_age_tags_and_status(any_store: Store) -> None:
    old = finished(any_store, "old", tags=("x",))
    kept = finished(any_store, "kept", tags=("keep", "x"))
    failed = finished(any_store, "failed", failed=True)
    now = datetime.now(timezone.utc)

    assert plan_prune(any_store, timedelta(days=1)).delete == []  # nothing is a day old yet
    later = now + timedelta(days=2)
    plan = plan_prune(any_store, timedelta(days=1), keep_tags=["keep"], now=later)
    assert [r.run_id for r in plan.delete] == [failed, old]  # newest first
    assert plan.cutoff == later - timedelta(days=1)
    only_failed = plan_prune(any_store, timedelta(days=1), statuses=["failed"], now=later)
    assert [r.run_id for r in only_failed.delete] == [failed]
    assert [r.run_id for r in prune(any_store, plan)] == [failed, old]
    assert [r.run_id for r in any_store.list_runs()] == [kept]
