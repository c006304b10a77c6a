"""Schema migrations of the PostgreSQL store: layout, idempotence, concurrency, pgvector."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from agentreplay_core._errors import StoreError
from agentreplay_core.stores._migrate import load_migrations, migrate, migration_status
from agentreplay_core.stores._postgres import PostgresBackend

ROOT = Path(__file__).resolve().parents[2]


def server_offers_vector(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
        return bool(row.fetchone() == (1,))


def expected_versions(offers_vector: bool) -> list[int]:
    """Every migration, but those that need pgvector where the server lacks it."""
    return [1, 2, 3, 4, 5] if offers_vector else [1, 3, 4]


def recorded_versions(dsn: str, schema: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        query = sql.SQL("SELECT version FROM {}.schema_migrations ORDER BY version")
        return [r[0] for r in conn.execute(query.format(sql.Identifier(schema))).fetchall()]


def test_migration_files_ship_in_the_package() -> None:
    files = sorted(p.name for p in (ROOT / "agentreplay_core" / "migrations").glob("*.sql"))
    assert [f"{m.version:04d}_{m.name}.sql" for m in load_migrations()] == files
    assert files[:2] == ["0001_runs_and_run_log.sql", "0002_embeddings.sql"]
    assert load_migrations()[1].requires == ("vector",)


def test_migrate_is_idempotent_and_reports_status(pg_dsn: str, pg_schema: str) -> None:
    expected = expected_versions(server_offers_vector(pg_dsn))

    assert migrate(pg_dsn, pg_schema) == expected
    assert migrate(pg_dsn, pg_schema) == []
    PostgresBackend(pg_dsn, schema=pg_schema).close()

    assert recorded_versions(pg_dsn, pg_schema) == expected
    states = {s.version: s for s in migration_status(pg_dsn, pg_schema)}
    assert states[1].state == "applied" and states[1].applied_at is not None
    if expected == [1, 3, 4]:
        assert states[2].state == "waiting" and "vector" in states[2].note
    else:
        assert states[2].state == "applied"


def test_status_of_a_fresh_schema_is_pending(pg_dsn: str, pg_schema: str) -> None:
    states = migration_status(pg_dsn, pg_schema)
    assert states[0].state == "pending"
    with pytest.raises(StoreError, match="agentreplay db migrate"):
        PostgresBackend(pg_dsn, schema=pg_schema, migrate=False)


def columns(conn: psycopg.Connection[Any], schema: str, table: str) -> dict[str, tuple[str, str]]:
    rows = conn.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s",
        (schema, table),
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def test_tables_follow_the_design(pg_dsn: str, pg_schema: str) -> None:
    migrate(pg_dsn, pg_schema)
    with psycopg.connect(pg_dsn) as conn:
        runs = columns(conn, pg_schema, "runs")
        assert runs["run_id"] == ("uuid", "NO")
        assert runs["metadata"] == ("jsonb", "NO")
        assert runs["status"] == ("text", "NO")
        assert runs["finished_at"] == ("timestamp with time zone", "YES")
        assert runs["chain"] == ("text", "NO")
        log = columns(conn, pg_schema, "run_log")
        assert log["input"][0] == log["output"][0] == "jsonb"
        assert log["duration_ms"][0] == "double precision"
        indexes = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'run_log'",
            (pg_schema,),
        ).fetchall()
        assert len(indexes) == 1 and "(run_id, step)" in indexes[0][0]
        foreign = conn.execute(
            "SELECT count(*) FROM information_schema.table_constraints "
            "WHERE table_schema = %s AND constraint_type = 'FOREIGN KEY'",
            (pg_schema,),
        ).fetchone()
        assert foreign == (0,)
        for bad in (
            "INSERT INTO {}.runs (run_id, status, started_at, metadata, format_version) "
            "VALUES (gen_random_uuid(), 'bogus', now(), '{{}}', 1)",
            "INSERT INTO {}.run_log VALUES (gen_random_uuid(), 0, 'llm', 'n', 'k', '', "
            "'1', '1', false, now(), 1.0, 'c')",
        ):
            with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
                conn.execute(sql.SQL(bad).format(sql.Identifier(pg_schema)))


@pytest.mark.parametrize("schema", ["", "1runs", "run-log", 'a"b', "x" * 64, "ünï", "a;drop"])
def test_invalid_schema_names_are_rejected_before_connecting(schema: str) -> None:
    with pytest.raises(ValueError, match="invalid schema name"):
        PostgresBackend("postgresql://nobody@/nowhere?host=/nonexistent", schema=schema)
    with pytest.raises(ValueError, match="invalid schema name"):
        migrate("postgresql://nobody@/nowhere?host=/nonexistent", schema)


@pytest.fixture
def odd_schema(pg_dsn: str) -> Iterator[str]:
    """A reserved word in mixed case: only correct quoting makes it work."""
    name = f"Select_{uuid.uuid4().hex[:6]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        conn.execute('DROP SCHEMA IF EXISTS "select" CASCADE')


def test_hostile_looking_but_valid_schema_names_work(pg_dsn: str, odd_schema: str) -> None:
    from datetime import datetime, timezone

    from agentreplay_core._model import Run

    for schema in (odd_schema, "select"):
        with PostgresBackend(pg_dsn, schema=schema) as store:
            run = Run(run_id=uuid.uuid4(), started_at=datetime.now(timezone.utc))
            store.create_run(run)
            assert [r.run_id for r in store.list_runs()] == [run.run_id]
    with psycopg.connect(pg_dsn) as conn:
        names = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname IN (%s, 'select', %s)",
            (odd_schema, odd_schema.lower()),
        ).fetchall()
    assert sorted(n[0] for n in names) == sorted([odd_schema, "select"])


_OPENER = textwrap.dedent(
    """
    import sys, time
    from agentreplay_core.stores._postgres import PostgresBackend
    dsn, schema, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    time.sleep(max(0.0, start - time.time()))
    PostgresBackend(dsn, schema=schema, max_size=1).close()
    print("opened")
    """
)


def test_many_processes_and_threads_open_a_fresh_schema_at_once(
    pg_dsn: str, pg_schema: str
) -> None:
    start = time.time() + 4.0  # time for the interpreters to start and import
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, pg_dsn, pg_schema, repr(start)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    errors: list[BaseException] = []

    def open_in_thread() -> None:
        time.sleep(max(0.0, start - time.time()))
        try:
            PostgresBackend(pg_dsn, schema=pg_schema, max_size=1).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_in_thread) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    outputs = [proc.communicate(timeout=60) for proc in procs]

    assert errors == []
    assert [out for out, _ in outputs] == ["opened\n", "opened\n"], [err for _, err in outputs]
    expected = expected_versions(server_offers_vector(pg_dsn))
    assert recorded_versions(pg_dsn, pg_schema) == expected


@pytest.fixture
def unprivileged_db(pg_dsn: str) -> Iterator[tuple[str, str]]:
    """A fresh database (no extensions yet) owned by a role that may not create pgvector."""
    suffix = uuid.uuid4().hex[:8]
    role, db = f"ar_role_{suffix}", f"ar_db_{suffix}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(*map(sql.Identifier, (db, role)))
        )
    admin = make_conninfo(pg_dsn, dbname=db)
    yield admin, make_conninfo(admin, user=role)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(db)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_waiting_migration_is_applied_once_pgvector_appears(
    unprivileged_db: tuple[str, str],
) -> None:
    admin_dsn, user_dsn = unprivileged_db
    offers_vector = server_offers_vector(admin_dsn)

    with PostgresBackend(user_dsn, schema="agentreplay") as store:
        assert store.has_pgvector is False
    waiting = [s for s in migration_status(user_dsn) if s.state != "applied"]
    # Offered but not creatable by this role: retried at each open; not offered: waits.
    assert [(s.version, s.state) for s in waiting] == \
        [(v, "pending" if offers_vector else "waiting") for v in (2, 5)]
    assert all("'vector' extension" in s.note for s in waiting)

    if offers_vector:  # an administrator installs it later
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")

    with PostgresBackend(user_dsn, schema="agentreplay") as store:
        assert store.has_pgvector is offers_vector
    assert recorded_versions(user_dsn, "agentreplay") == expected_versions(offers_vector)
