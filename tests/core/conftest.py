"""Stores for the core tests: each behavioural test runs on memory, files and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from agentreplay_core import Store, open_store
from agentreplay_core.stores import PostgresBackend


@pytest.fixture(params=["memory", "file", "postgres"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path, spool_dir: Path) -> Iterator[Store]:
    """The same behaviour must hold on every backend."""
    if request.param == "postgres":
        store = open_store(request.getfixturevalue("pg_dsn"),
                           schema=request.getfixturevalue("pg_schema"), spool_dir=spool_dir)
    elif request.param == "file":
        store = open_store(f"file:{tmp_path / 'runs'}", spool_dir=spool_dir)
    else:
        store = open_store("memory:", spool_dir=spool_dir)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(scope="session")
def server_has_pgvector(pg_dsn: str) -> bool:
    """Asked of the server directly, not of the code under test."""
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return bool(row and row[0])


@pytest.fixture
def backend(pg_dsn: str, pg_schema: str) -> Iterator[PostgresBackend]:
    """A PostgreSQL backend of its own on the test's schema."""
    store = PostgresBackend(pg_dsn, schema=pg_schema, max_size=2)
    yield store
    store.close()
