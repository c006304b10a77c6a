"""Fixtures for the LangChain adapter tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentreplay_core import Store, current_path


@pytest.fixture
def store(pg_store: Store) -> Store:
    """A PostgreSQL store on the test's own schema (see tests/conftest.py)."""
    return pg_store


@pytest.fixture(autouse=True)
def _no_leaked_path() -> Iterator[None]:
    """The handlers set the core's current path while a run is under way; no test may leave
    it set in the host's context (later recordings would be filed under a finished run)."""
    yield
    assert current_path() == "", f"a run left the current path set: {current_path()!r}"
