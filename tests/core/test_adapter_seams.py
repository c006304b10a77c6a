"""What framework adapters build on: custom match keys through a fork, going live by hand,
whether a recorder is sealed, and reading a run the batched writer has not written yet."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from agentreplay_core import ReplayDivergence, Run, RunNotFound, Store, match_key


def test_a_fork_records_live_calls_under_the_adapters_match_key(any_store: Store) -> None:
    key_one = match_key("llm", "m", {"stable": 1})
    key_two = match_key("llm", "m", {"stable": 2})
    with any_store.record() as rec:
        rec.record("llm", "m", {"stable": 1, "run_id": "a"}, "one", match_key=key_one)
    with any_store.replay(rec.run_id, on_divergence="live") as player:
        # a changed request with another volatile id diverges and goes live...
        assert player.next("llm", "m", {"stable": 2, "run_id": "b"}, match_key=key_two,
                           live=lambda: "live two") == "live two"
        assert player.fork is not None
        fork_id = player.fork.run_id
    # ...and the forked run holds it under the same key, so it replays with new volatile ids
    with any_store.replay(fork_id) as player:
        assert player.next("llm", "m", {"stable": 2, "run_id": "c"}, match_key=key_two) \
            == "live two"


def test_go_live_starts_the_fork_only_when_the_replay_allows_it(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "t", {"x": 1}, "recorded")
    with any_store.replay(rec.run_id, allow_unused=True) as player:
        assert not player.can_go_live
        with pytest.raises(ReplayDivergence) as caught:
            player.next("tool", "t", {"x": 2})
        with pytest.raises(ReplayDivergence):
            player.go_live(caught.value)
    with any_store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player:
        assert player.can_go_live
        with pytest.raises(ReplayDivergence) as caught:
            player.next_step("tool", "t", {"x": 2})
        fork = player.go_live(caught.value)
        assert player.go_live(caught.value) is fork  # joined, not started twice
        fork.record("tool", "t", {"x": 2}, "made live by the adapter")
        fork_id = fork.run_id
    with any_store.replay(fork_id) as player:
        assert player.next("tool", "t", {"x": 2}) == "made live by the adapter"


def test_recorder_says_when_it_is_sealed(any_store: Store) -> None:
    with any_store.record() as rec:
        assert not rec.closed
    assert rec.closed


def test_a_run_not_found_is_explained_by_where_it_is(any_store: Store) -> None:
    """Every id not found was said to be a batched run still being written, also one never
    recorded and one whose rows wait in the spool."""
    never = uuid.uuid4()
    with pytest.raises(RunNotFound) as caught:
        any_store.get_run(never)
    assert "rec.flush()" not in str(caught.value)
    assert "`agentreplay runs` lists the runs" in str(caught.value)
    spooled = Run(run_id=uuid.uuid4(), started_at=datetime.now(timezone.utc))
    any_store.spool.write_run(spooled)
    with pytest.raises(RunNotFound) as caught:
        any_store.get_run(spooled.run_id)
    assert f"rows wait in the spool {any_store.spool.directory}" in str(caught.value)
    assert "agentreplay spool flush" in str(caught.value)
    any_store.spool.discard(spooled.run_id)


def test_a_run_not_found_explains_batched_recording(any_store: Store) -> None:
    with any_store.record() as rec:
        missing = rec.run_id
    any_store.delete_run(missing)
    with pytest.raises(RunNotFound) as caught:
        any_store.get_run(missing)
    assert "rec.flush()" in str(caught.value)
