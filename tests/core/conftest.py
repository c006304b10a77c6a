"""Stores for the core tests: each behavioural test runs on memory, files and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentreplay_core import Store, open_store


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
