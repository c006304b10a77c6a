"""A replay whose code sets no paths takes what the recording filed deeper in recorded order.

A framework's tracker sets the core's current path while recording (a LangGraph node's draws
sit at the node's path); a replay that tracks nothing asks for every draw at the root. Served
"same path first", the root's own steps would be handed out before the deeper ones recorded
earlier, and values would swap.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pytest

from agentreplay_core import Store, open_store, path_scope


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory:") as opened:
        yield opened


def scoped_then_root() -> tuple[uuid.UUID, uuid.UUID, float, float]:
    """Draws in a scope (a node, as a tracker files it), then at the root (the program)."""
    with path_scope("chain:graph/chain:node[graph:step:1]"):
        inside, started = uuid.uuid4(), time.time()
    return inside, uuid.uuid4(), started, time.time()


def test_an_untracked_replay_serves_draws_recorded_deeper_in_recorded_order(
        store: Store) -> None:
    with store.record(entropy=True) as rec:
        live = scoped_then_root()
    with store.replay(rec.run_id):  # nothing sets the path: every draw asks at the root
        inside, outside = uuid.uuid4(), uuid.uuid4()
        started, ended = time.time(), time.time()
    assert (inside, outside, started, ended) == live


def test_a_tracked_replay_still_serves_each_path_its_own_steps(store: Store) -> None:
    with store.record(entropy=True) as rec:
        live = scoped_then_root()
    with store.replay(rec.run_id) as player:
        player.track_paths()  # as instrument(player) does: paths are set as recorded
        outside = uuid.uuid4()  # asked first, at the root: the root's own step
        with path_scope("chain:graph/chain:node[graph:step:1]"):
            inside = uuid.uuid4()
            started = time.time()
        ended = time.time()
    assert (inside, outside, started, ended) == live


def test_a_replay_that_sets_paths_itself_keeps_the_same_path_preference(
        store: Store) -> None:
    with store.record(entropy=True) as rec:
        with path_scope("a"):
            first_a = uuid.uuid4()
        root = uuid.uuid4()
        with path_scope("a"):
            second_a = uuid.uuid4()
    with store.replay(rec.run_id):
        with path_scope("a"):  # a draw below the root: this replay sets paths
            assert uuid.uuid4() == first_a
        with path_scope("a"):
            assert uuid.uuid4() == second_a
        assert uuid.uuid4() == root


def test_a_call_at_an_unrecorded_scope_takes_the_steps_of_the_scope_around_it(
        store: Store) -> None:
    with store.record() as rec:
        rec.record("uuid", "uuid.uuid4", {}, "x0", path="x/uuid:uuid.uuid4")
        rec.record("uuid", "uuid.uuid4", {}, "y1", path="y/uuid:uuid.uuid4")
    with store.replay(rec.run_id) as player:
        # `y/branch` was not a scope when recording (an older version did not track it)
        assert player.next("uuid", "uuid.uuid4", {}, path="y/branch/uuid:uuid.uuid4") == "y1"
        assert player.next("uuid", "uuid.uuid4", {}, path="y/branch/uuid:uuid.uuid4") == "x0"


def test_an_untracked_replay_says_once_that_it_serves_in_recorded_order(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    with store.record(entropy=True) as rec:
        scoped_then_root()
    with caplog.at_level(logging.INFO, logger="agentreplay"), store.replay(rec.run_id):
        uuid.uuid4(), uuid.uuid4(), time.time(), time.time()
    told = [r.getMessage() for r in caplog.records if "recorded order" in r.getMessage()]
    assert len(told) == 1
    assert "instrument(player)" in told[0] and "chain:node[graph:step:1]" in told[0]
