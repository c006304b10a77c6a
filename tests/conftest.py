"""Session-wide PostgreSQL for the tests.

By default the session starts its own PostgreSQL 16 + pgvector from the `pgserver` package.
`AGENTREPLAY_TEST_DSN` points the tests at an external server instead, and
`AGENTREPLAY_TEST_PGBIN` at another installation's binaries (e.g. Debian's PostgreSQL 15,
which has no pgvector, to prove that path).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import Redactor, Store, open_store
from tests.support.pgcluster import PgCluster, pgserver_bin_dir

# One redaction key for the whole suite: without it, recording a secret would create a key file
# in the user's config directory (and test processes must agree on placeholders anyway).
os.environ.setdefault("AGENTREPLAY_REDACTION_KEY", "agentreplay-test-suite-redaction-key")
# Compiled secret screens are cached for the suite's processes, not in the user's cache.
if "AGENTREPLAY_SCREEN_CACHE_DIR" not in os.environ:
    _SCREENS = tempfile.mkdtemp(prefix="agentreplay-screens-")
    os.environ["AGENTREPLAY_SCREEN_CACHE_DIR"] = _SCREENS
    atexit.register(shutil.rmtree, _SCREENS, True)


def _bin_dir() -> Path:
    configured = os.environ.get("AGENTREPLAY_TEST_PGBIN")
    return Path(configured) if configured else pgserver_bin_dir()


@pytest.fixture(scope="session")
def pg_bin_dir() -> Path:
    return _bin_dir()


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """DSN of the session's PostgreSQL."""
    external = os.environ.get("AGENTREPLAY_TEST_DSN")
    if external:
        yield external
        return
    cluster = PgCluster(_bin_dir())
    cluster.start()
    try:
        yield cluster.dsn
    finally:
        cluster.destroy()


def _fresh_schema(dsn: str) -> Iterator[str]:
    import psycopg
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A fresh schema name for one test, dropped afterwards."""
    yield from _fresh_schema(pg_dsn)


@pytest.fixture
def other_schema(pg_dsn: str) -> Iterator[str]:
    """A second fresh schema for the same test (the same run stored two ways)."""
    yield from _fresh_schema(pg_dsn)


@pytest.fixture
def private_cluster(pg_bin_dir: Path) -> Iterator[PgCluster]:
    """A cluster of the test's own, which the test may stop and start."""
    cluster = PgCluster(pg_bin_dir)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    return tmp_path / "spool"


@pytest.fixture
def stores(pg_dsn: str, pg_schema: str, spool_dir: Path) -> Iterator[Any]:
    """Opens stores on the test's schema, each with the `Redactor` it is given (a recording
    and a replay under other redaction rules or keys); closes them at the end."""
    opened: list[Store] = []

    def open_with(redactor: Redactor) -> Store:
        opened.append(open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir,
                                 redaction=redactor))
        return opened[-1]

    yield open_with
    for store in opened:
        store.close()


@pytest.fixture
def pg_store(pg_dsn: str, pg_schema: str, spool_dir: Path) -> Iterator[Store]:
    """A store on the test's own schema of the session's PostgreSQL."""
    store = open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir)
    try:
        yield store
    finally:
        store.close()
