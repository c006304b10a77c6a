"""Fixtures for the LangChain adapter tests: a PostgreSQL store and the scripted parts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentreplay_core import Store, open_store


@pytest.fixture
def store(pg_dsn: str, pg_schema: str, tmp_path: Path) -> Iterator[Store]:
    """A store on the test's own schema of the session's PostgreSQL."""
    opened = open_store(pg_dsn, schema=pg_schema, spool_dir=tmp_path / "spool")
    try:
        yield opened
    finally:
        opened.close()
