"""The `agentreplay` command as a user runs it: exit codes and messages, no tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentreplay_core import open_store
from tests.support.pgcluster import PgCluster


def agentreplay(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentreplay_core", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def test_verify_exit_codes(pg_dsn: str, pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema) as store:
        with store.record(name="good") as good:
            good.record("tool", "t", {}, 1)
        with store.record(name="bad") as bad:
            bad.record("tool", "t", {}, 1)
    ok = agentreplay("verify", str(good.run_id), "--dsn", pg_dsn, "--schema", pg_schema)
    assert ok.returncode == 0, ok.stderr
    assert "chain intact" in ok.stdout
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {}.run_log SET output = '2' WHERE run_id = %s").format(
            sql.Identifier(pg_schema)), (bad.run_id,))
    failed = agentreplay("verify", "--all", "--dsn", pg_dsn, "--schema", pg_schema)
    assert failed.returncode == 1
    assert str(bad.run_id) in failed.stdout and "checksum_mismatch" in failed.stdout
    unknown = agentreplay("verify", "00000000-0000-4000-8000-00000000abcd", "--dsn", pg_dsn,
                          "--schema", pg_schema)
    assert unknown.returncode == 2
    assert "no run with id" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_spool_flush_command_loads_spooled_rows(private_cluster: PgCluster,
                                                tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    store = open_store(private_cluster.dsn, schema="cli", spool_dir=spool)
    store._sink.retry_seconds = 0.2
    private_cluster.stop()
    with store.record(name="offline") as rec:
        for i in range(5):
            rec.record("tool", "t", {"i": i}, i)
    store.close()
    assert list(spool.iterdir())
    private_cluster.start()
    private_cluster.wait_ready()
    result = agentreplay("spool", "flush", "--dsn", private_cluster.dsn, "--schema", "cli",
                         env={"AGENTREPLAY_SPOOL_DIR": str(spool)})
    assert result.returncode == 0, result.stderr
    assert f"run {rec.run_id}: 5 steps loaded" in result.stdout
    with open_store(private_cluster.dsn, schema="cli") as check:
        assert [s.output for s in check.load_steps(rec.run_id)] == [0, 1, 2, 3, 4]
        assert check.verify(rec.run_id).ok


def test_unreachable_database_is_one_clear_line(tmp_path: Path) -> None:
    dsn = f"postgresql://nobody@/nodb?host={tmp_path}&port=1"
    result = agentreplay("verify", "--all", "--dsn", dsn)
    assert result.returncode == 2
    assert "error:" in result.stderr
    assert "Traceback" not in result.stderr


def test_db_migrate_and_status(pg_dsn: str, pg_schema: str) -> None:
    migrated = agentreplay("db", "migrate", "--dsn", pg_dsn, "--schema", pg_schema)
    assert migrated.returncode == 0, migrated.stderr
    again = agentreplay("db", "migrate", "--dsn", pg_dsn, "--schema", pg_schema)
    assert "up to date" in again.stdout
    status = agentreplay("db", "status", "--dsn", pg_dsn, "--schema", pg_schema)
    assert status.returncode == 0
    assert "runs_and_run_log" in status.stdout and "applied" in status.stdout


def test_verify_all_reports_progress_for_the_progress_bar() -> None:
    from agentreplay_core import open_store

    store = open_store("memory:")
    for name in ("a", "b", "c"):
        with store.record(name=name) as rec:
            rec.record("tool", "t", {}, 1)
    seen: list[tuple[int, int]] = []
    reports = store.verify_all(progress=lambda done, total: seen.append((done, total)))
    assert [r.ok for r in reports] == [True, True, True]
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_schema_option_applies_to_a_key_value_dsn(pg_dsn: str, pg_schema: str) -> None:
    """`--schema` reaches a libpq key=value DSN as it reaches a postgresql:// URL."""
    with open_store(pg_dsn, schema=pg_schema) as store, store.record(name="kv") as rec:
        rec.record("tool", "t", {}, 1)
    pairs = make_conninfo("", **conninfo_to_dict(pg_dsn))
    assert "=" in pairs and "://" not in pairs
    listed = agentreplay("runs", "--dsn", pairs, "--schema", pg_schema)
    assert listed.returncode == 0, listed.stderr
    assert str(rec.run_id)[:8] in listed.stdout
