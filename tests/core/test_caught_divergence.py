"""A divergence the replayed code catches (a tool error handler, a try/except) is not lost:
a later divergence, which it likely caused, quotes it, and a replay that ends with recorded
steps unused raises it again instead of a bare `missing_call`."""

from __future__ import annotations

import contextlib
from uuid import UUID

import pytest

from agentreplay_core import ReplayDivergence, Store


def _two_tools(store: Store) -> UUID:
    with store.record() as rec:
        rec.record("tool", "weather", {"city": "Paris"}, "sunny")
        rec.record("llm", "chat_model", {"prompt": "sunny"}, "go out")
    return rec.run_id


def test_a_later_divergence_quotes_the_caught_one(any_store: Store) -> None:
    run_id = _two_tools(any_store)
    with pytest.raises(ReplayDivergence) as caught, any_store.replay(run_id) as player:
        with contextlib.suppress(ReplayDivergence):
            player.next("tool", "weather", {"city": "Lyon"})
        # what the agent does with the error it got instead of the tool's result
        player.next("llm", "chat_model", {"prompt": "error: no such city"})
    error = caught.value
    assert (error.classification, error.step, error.name) == ("prompt_changed", 2, "chat_model")
    assert "an earlier divergence, caught by the replayed code" in str(error)
    assert "step 1: tool 'weather'" in str(error) and "'Paris' -> 'Lyon'" in str(error)
    first = error.__cause__  # with its own traceback: where the replayed code caught it
    assert isinstance(first, ReplayDivergence) and first.classification == "tool_args_changed"


def test_a_caught_divergence_is_raised_again_in_place_of_the_steps_it_left(
        any_store: Store) -> None:
    run_id = _two_tools(any_store)
    with pytest.raises(ReplayDivergence) as caught, any_store.replay(run_id) as player, \
            contextlib.suppress(ReplayDivergence):
        player.next("tool", "weather", {"city": "Lyon"})
    error = caught.value
    assert (error.classification, error.step) == ("tool_args_changed", 1)
    assert "caught by the replayed code" in str(error)
    assert "2 recorded steps were never replayed" in str(error)


def test_a_caught_divergence_that_left_nothing_unused_ends_the_replay_quietly(
        any_store: Store) -> None:
    # the pattern of a test asserting that a change diverges, then going on
    run_id = _two_tools(any_store)
    with any_store.replay(run_id) as player:
        assert player.next("tool", "weather", {"city": "Paris"}) == "sunny"
        with pytest.raises(ReplayDivergence):
            player.next("llm", "chat_model", {"prompt": "rain"})
        assert player.next("llm", "chat_model", {"prompt": "sunny"}) == "go out"


def test_a_tentative_miss_is_no_divergence(any_store: Store) -> None:
    # a backend that asks for one form of a request, then another
    run_id = _two_tools(any_store)
    with any_store.replay(run_id) as player:
        with pytest.raises(ReplayDivergence):
            player.next("tool", "weather", {"town": "Paris"}, tentative=True)
        assert player.next("tool", "weather", {"city": "Paris"}) == "sunny"
        assert player.next("llm", "chat_model", {"prompt": "sunny"}) == "go out"


def test_a_divergence_answered_by_going_live_is_not_raised_again(any_store: Store) -> None:
    run_id = _two_tools(any_store)
    with any_store.replay(run_id, on_divergence="live") as player:
        assert player.next("tool", "weather", {"city": "Lyon"}, live=lambda: "rain") == "rain"
        assert player.next("llm", "chat_model", {"prompt": "rain"},
                           live=lambda: "stay in") == "stay in"
    assert player.fork is not None and player.diverged is None
