"""The read-only replay role of SECURITY.md, set up with the SQL printed there: it lists,
shows, verifies, exports and replays runs, and every write it attempts is refused."""

from __future__ import annotations

import logging
import os
import re
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode
from uuid import UUID

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from agentreplay_core import Store, StoreError, open_store
from agentreplay_core._prune import plan_prune, prune
from agentreplay_core._transfer import export_run, import_run

ROOT = Path(__file__).resolve().parents[2]
VECTOR = [0.25, -0.5, 1.0]


@dataclass(frozen=True)
class Reader:
    dsn: str  # a postgresql:// URL, as the CLI takes it
    role: str
    schema: str


def documented_sql() -> str:
    """The role setup exactly as SECURITY.md prints it."""
    text = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- read-only-role-sql.*?-->\s*```sql\n(.*?)```", text, re.DOTALL)
    assert found, "SECURITY.md lost its marked read-only role SQL block"
    return found.group(1)


def role_url(dsn: str, role: str, password: str) -> str:
    """`dsn`'s server and database, as `role` with a password."""
    params = conninfo_to_dict(dsn)
    where = urlencode({k: str(params[k]) for k in ("host", "port") if params.get(k)})
    database = quote(str(params.get("dbname") or "postgres"))
    return f"postgresql://{role}:{quote(password, safe='')}@/{database}?{where}"


def admin(dsn: str, statement: str | sql.Composed, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def reader(pg_dsn: str, pg_schema: str) -> Iterator[Reader]:
    open_store(pg_dsn, schema=pg_schema).close()  # the owner creates the schema first
    role, password = f"ar_reader_{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(12)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT current_user, current_database()").fetchone()
        assert row is not None
        names = {"agentreplay_reader": role, "agentreplay_owner": row[0],
                 "agentreplay": pg_schema, "agents": row[1]}
        setup = re.sub(r"\b(agentreplay_reader|agentreplay_owner|agentreplay|agents)\b",
                       lambda m: sql.Identifier(names[m.group(1)]).as_string(conn),
                       documented_sql())
        conn.execute(setup.replace("'change-me'", sql.Literal(password).as_string(conn)))
    try:
        yield Reader(role_url(pg_dsn, role, password), role, pg_schema)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(pg_schema)))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def server_offers_vector(dsn: str) -> bool:
    return bool(admin(dsn, "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"))


def record_run(store: Store) -> UUID:
    with store.record(name="to-replay", tags=["nightly"]) as rec:
        rec.record("llm", "model", {"prompt": "hi"}, {"text": "hello"})
        rec.record("tool", "lookup", {"q": "x"}, {"rows": [1, 2]})
        rec.record("embedding", "embedder", {"text": "query"}, VECTOR)
    return rec.run_id


def test_the_reader_lists_verifies_exports_and_replays(
    pg_dsn: str, reader: Reader, tmp_path: Path
) -> None:
    with open_store(pg_dsn, schema=reader.schema) as owner:
        run = record_run(owner)
    with open_store(reader.dsn, schema=reader.schema, spool_dir=tmp_path / "spool") as store:
        assert store.backend.read_only is True  # type: ignore[attr-defined]
        assert [r.run_id for r in store.list_runs(tag="nightly")] == [run]
        assert store.get_run(str(run)[:8]).status.value == "complete"
        assert len(store.load_steps(run)) == 3
        report = store.verify(run)
        assert report.ok and report.sealed, report
        assert [r.ok for r in store.verify_all()] == [True]
        with store.replay(run) as player:
            assert player.next("llm", "model", {"prompt": "hi"}) == {"text": "hello"}
            assert player.next("tool", "lookup", {"q": "x"}) == {"rows": [1, 2]}
            assert player.next("embedding", "embedder", {"text": "query"}) == VECTOR
        exported = export_run(store, run, tmp_path / "run.jsonl")
        if server_offers_vector(pg_dsn):
            assert [m.run_id for m in store.search_embeddings(VECTOR, limit=1)] == [run]
        else:  # Debian's PostgreSQL 15: no pgvector, so no search, for anyone
            with pytest.raises(StoreError, match="pgvector"):
                store.search_embeddings(VECTOR)
    assert exported.report.ok and exported.steps == 3
    with open_store(f"file:{exported.path}") as copy:
        assert copy.verify(run).ok
    assert not (tmp_path / "spool").exists()


def agentreplay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentreplay_core", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "AGENTREPLAY_SPOOL_DIR": "/nonexistent/spool"})


def test_the_command_line_works_with_the_reader(pg_dsn: str, reader: Reader,
                                                tmp_path: Path) -> None:
    with open_store(pg_dsn, schema=reader.schema) as owner:
        run = record_run(owner)
    where = ("--dsn", reader.dsn, "--schema", reader.schema)
    listed = agentreplay("runs", "--json", *where)
    assert listed.returncode == 0, listed.stderr
    assert str(run) in listed.stdout
    shown = agentreplay("show", str(run)[:8], "--step", "2", *where)
    assert shown.returncode == 0, shown.stderr
    assert "lookup" in shown.stdout
    verified = agentreplay("verify", "--all", *where)
    assert verified.returncode == 0, verified.stderr
    assert f"run {run}: 3 steps, chain intact" in verified.stdout
    exported = agentreplay("export", str(run), "-o", str(tmp_path / "bug.jsonl"), *where)
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "bug.jsonl").exists()
    pruned = agentreplay("prune", "--older-than", "0d", *where)
    assert pruned.returncode == 2, pruned.stdout
    assert "permission denied" in pruned.stderr and "Traceback" not in pruned.stderr


def test_recording_with_the_reader_fails_at_record(pg_dsn: str, reader: Reader,
                                                   tmp_path: Path) -> None:
    with open_store(pg_dsn, schema=reader.schema) as owner:
        run = record_run(owner)
    ran = []
    with open_store(reader.dsn, schema=reader.schema, spool_dir=tmp_path / "spool") as store:
        with pytest.raises(StoreError, match=rf"role '{reader.role}' may read runs but not "
                                             r"write them \(it lacks INSERT on .*runs"), \
                store.record(name="never"):
            ran.append("the block")
        for durability in ("sync", "batched"):
            with pytest.raises(StoreError, match="may read runs but not write them"), \
                    store.record(name="never", durability=durability):
                ran.append(durability)
        # a fork at the first divergence is a recording too: refused before replay starts
        with pytest.raises(StoreError, match="may read runs but not write them"), \
                store.replay(run, on_divergence="live"):
            ran.append("the replay")
    assert ran == []
    assert not (tmp_path / "spool").exists()
    with open_store(pg_dsn, schema=reader.schema) as owner:
        assert [r.run_id for r in owner.list_runs()] == [run]


def write_statements(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[sql.Composed]]:
    tables = [r[0] for r in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,))]
    found: dict[str, list[sql.Composed]] = {}
    for table in tables:
        name = sql.Identifier(schema, table)
        column = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND "
            "table_name = %s ORDER BY ordinal_position LIMIT 1", (schema, table)).fetchone()
        assert column is not None
        first = sql.Identifier(str(column[0]))
        found[table] = [
            sql.SQL("INSERT INTO {} SELECT * FROM {}").format(name, name),
            sql.SQL("UPDATE {} SET {} = {}").format(name, first, first),
            sql.SQL("DELETE FROM {}").format(name),
            sql.SQL("TRUNCATE {}").format(name),
            sql.SQL("ALTER TABLE {} ADD COLUMN intruder int").format(name),
            sql.SQL("DROP TABLE {}").format(name),
        ]
    found["(schema)"] = [sql.SQL("CREATE TABLE {} (i int)").format(
        sql.Identifier(schema, "intruder"))]
    return found


def test_every_write_is_refused_and_the_run_stays_intact(pg_dsn: str, reader: Reader,
                                                          tmp_path: Path) -> None:
    with open_store(pg_dsn, schema=reader.schema) as owner:
        run = record_run(owner)
        export_run(owner, run, tmp_path / "copy.jsonl")
        before = [s.checksum for s in owner.load_steps(run)]
    with psycopg.connect(reader.dsn, autocommit=True) as conn:
        statements = write_statements(conn, reader.schema)
        expected = {"runs", "run_log", "schema_migrations", "(schema)"}
        if server_offers_vector(pg_dsn):
            expected.add("embeddings")
        assert set(statements) == expected  # no pgvector (PostgreSQL 15): no embeddings table
        allowed = []
        for query in (q for queries in statements.values() for q in queries):
            try:
                conn.execute(query)
            except psycopg.errors.InsufficientPrivilege:
                continue
            allowed.append(query.as_string(conn))
        assert allowed == []
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.cursor() as cur, \
                cur.copy(sql.SQL("COPY {} FROM STDIN").format(
                    sql.Identifier(reader.schema, "run_log"))):
            pass
    with open_store(reader.dsn, schema=reader.schema) as store:
        with pytest.raises(StoreError, match="permission denied"):
            store.delete_run(run)
        plan = plan_prune(store, timedelta(0))
        assert [r.run_id for r in plan.delete] == [run]
        with pytest.raises(StoreError, match="permission denied"):
            prune(store, plan)
        with pytest.raises(StoreError, match="permission denied"):
            import_run(store, tmp_path / "copy.jsonl", replace=True)
    with open_store(pg_dsn, schema=reader.schema) as owner:
        assert owner.verify(run).ok
        assert [s.checksum for s in owner.load_steps(run)] == before
        assert owner.get_run(run).status.value == "complete"


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_reader_reports_a_dead_recorder_incomplete_without_writing(
    pg_dsn: str, reader: Reader, caplog: pytest.LogCaptureFixture
) -> None:
    with open_store(pg_dsn, schema=reader.schema) as owner:
        run = record_run(owner)
    # what a recorder killed mid-run leaves: a `recording` run, unsealed, its process gone
    admin(pg_dsn, sql.SQL(
        "UPDATE {} SET status = 'recording', head_checksum = NULL, finished_at = NULL, "
        "metadata = jsonb_set(metadata, '{{agentreplay,pid}}', to_jsonb(%s::int)) "
        "WHERE run_id = %s").format(sql.Identifier(reader.schema, "runs")),
        dead_pid(), run)
    stored_status = sql.SQL("SELECT status FROM {} WHERE run_id = %s").format(
        sql.Identifier(reader.schema, "runs"))
    with caplog.at_level(logging.DEBUG, logger="agentreplay"), \
            open_store(reader.dsn, schema=reader.schema) as store:
        assert [r.run_id for r in store.list_runs(status="incomplete")] == [run]
        assert store.get_run(run).status.value == "incomplete"
        report = store.verify(run)
        assert report.ok and not report.sealed
    assert admin(pg_dsn, stored_status, run) == [("recording",)]
    notes = [r for r in caplog.records if "incomplete without storing" in r.getMessage()]
    assert notes and {r.levelno for r in notes} == {logging.DEBUG}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    with open_store(pg_dsn, schema=reader.schema) as owner:  # a writer stores it
        assert owner.get_run(run).status.value == "incomplete"
    assert admin(pg_dsn, stored_status, run) == [("incomplete",)]


def test_the_reader_opens_without_migrating(pg_dsn: str, reader: Reader) -> None:
    table = sql.Identifier(reader.schema, "schema_migrations")
    # a migration that needs pgvector is missing (as when the owner may not create the
    # extension), and the optional ones (as after an upgrade the owner has not opened yet): the
    # reader opens all the same, only search would be missing
    admin(pg_dsn, sql.SQL("DELETE FROM {} WHERE version IN (2, 3, 4, 5)").format(table))
    with psycopg.connect(reader.dsn) as conn:
        from agentreplay_core.stores._migrate import read_status

        state = {s.version: s.state for s in read_status(conn, reader.schema)}[2]
    # pgvector installed, so the owner would apply it; without pgvector it waits
    assert state == ("pending" if server_offers_vector(pg_dsn) else "waiting")
    with open_store(reader.dsn, schema=reader.schema) as store:
        assert store.list_runs() == []
    assert admin(pg_dsn, sql.SQL("SELECT version FROM {}").format(table)) \
        == [(1,)]
    # a schema the store cannot work without: the reader may not create it, and says so
    missing = f"{reader.schema}_new"
    with pytest.raises(StoreError, match=r"lacks migrations 0001_runs_and_run_log; this role "
                                         r"may not apply them \(permission denied.*as the "
                                         r"schema's owner"):
        open_store(reader.dsn, schema=missing)
    assert admin(pg_dsn, "SELECT 1 FROM pg_namespace WHERE nspname = %s", missing) == []


def test_privileges_revoked_while_open_spool_the_run_instead_of_losing_it(
    pg_dsn: str, reader: Reader, tmp_path: Path
) -> None:
    grants = sql.SQL("{} INSERT, UPDATE ON ALL TABLES IN SCHEMA {} {} {}")
    schema, role = sql.Identifier(reader.schema), sql.Identifier(reader.role)
    admin(pg_dsn, grants.format(sql.SQL("GRANT"), schema, sql.SQL("TO"), role))
    spool = tmp_path / "spool"
    store = open_store(reader.dsn, schema=reader.schema, spool_dir=spool)
    assert store.backend.read_only is False  # type: ignore[attr-defined]
    admin(pg_dsn, grants.format(sql.SQL("REVOKE"), schema, sql.SQL("FROM"), role))
    store._sink.retry_seconds = 0.2  # the database answers at once; no need to wait long
    with store.record(name="cut off", durability="sync") as rec:  # raises nothing
        rec.record("tool", "t", {"i": 1}, 1)
        rec.record("tool", "t", {"i": 2}, 2)
    store.close()
    assert rec.stats.spooled == 2 and rec.stats.lost == 0
    with open_store(pg_dsn, schema=reader.schema, spool_dir=spool) as owner:
        assert owner.flush_spool() == {rec.run_id: 2}
        assert owner.verify(rec.run_id).ok
