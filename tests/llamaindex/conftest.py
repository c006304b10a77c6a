"""A PostgreSQL run store per test, and a check that no test leaves handlers attached."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from llama_index_instrumentation import get_dispatcher

from agentreplay_core import Store, current_path
from agentreplay_llamaindex import RecordingEventHandler, RecordingSpanHandler
from agentreplay_llamaindex._routing import (
    RoutingEventHandler,
    RoutingSpanHandler,
    open_instrumentations,
    tracked_tree,
)
from agentreplay_llamaindex._tracking import TrackingSpanHandler


@pytest.fixture
def li_store(pg_store: Store) -> Store:
    """A PostgreSQL store on the test's own schema (see tests/conftest.py)."""
    return pg_store


@pytest.fixture(autouse=True)
def _no_leftover_handlers() -> Iterator[None]:
    yield
    root = get_dispatcher()
    leftovers = [h for h in [*root.event_handlers, *root.span_handlers]
                 if isinstance(h, (RecordingEventHandler, RecordingSpanHandler,
                                   TrackingSpanHandler, RoutingEventHandler,
                                   RoutingSpanHandler))]
    assert not leftovers, "a test left agentreplay handlers attached to the root dispatcher"
    assert not open_instrumentations(), "a test left an instrumentation open"
    assert tracked_tree() is None, "a test left a replay tracked"
    assert current_path() == "", f"a test left the current path set: {current_path()!r}"
