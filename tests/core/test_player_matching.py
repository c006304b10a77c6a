"""The player's matching bookkeeping: replay boundaries consume exactly the steps recorded
inside the served call, keyed matching prefers the call's own path, and serving a call costs
the same whatever the length of the run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from agentreplay_core import Redactor, ReplayDivergence, Store, open_store, path_scope

KEY = b"test-player-key"


@pytest.fixture
def memory_store() -> Iterator[Store]:
    store = open_store("memory:")
    yield store
    store.close()


def test_each_call_at_a_repeated_path_consumes_only_its_own_inner_steps(
        any_store: Store) -> None:
    # a tool called three times at the same path, each time embedding inside it
    with any_store.record() as rec, path_scope("agent"):
        for i in range(3):
            with path_scope("tool:search"):
                rec.record("embedding", "embed", {"texts": [f"q{i}"]}, [float(i)])
            rec.record("tool", "search", {"q": i}, f"doc{i}", path="agent/tool:search")
    with any_store.replay(rec.run_id) as player:
        assert player.next("tool", "search", {"q": 0}) == "doc0"
        # steps 1-2: the first embedding and the first tool call; the later embeddings,
        # recorded inside later calls, are still expected
        assert [s.step for s in player.unconsumed()] == [3, 4, 5, 6]
        assert player.next("tool", "search", {"q": 1}) == "doc1"
        assert [s.step for s in player.unconsumed()] == [5, 6]
        assert player.next("tool", "search", {"q": 2}) == "doc2"
        assert player.unconsumed() == []


def test_a_boundary_consumes_steps_at_any_depth_below_it_and_nothing_beside_it(
        any_store: Store) -> None:
    with any_store.record() as rec:
        with path_scope("chain:outer"):
            with path_scope("tool:t"), path_scope("retriever:r"):
                rec.record("embedding", "e", {"t": "deep"}, [1.0])        # 1: outer/tool/retr
            rec.record("tool", "t", {"x": 1}, "inner tool",
                       path="chain:outer/tool:t")                          # 2: outer/tool
        rec.record("llm", "side", {"p": 1}, "beside", path="chain:outer2/llm:side")  # 3
        rec.record("chain", "outer", {"in": 1}, "outer result", path="chain:outer")  # 4
        rec.record("llm", "after", {"p": 2}, "after", path="chain:outer/llm:after")  # 5
    with any_store.replay(rec.run_id, allow_unused=True) as player:
        assert player.next("chain", "outer", {"in": 1}, path="chain:outer") == "outer result"
        # 1 and 2 were inside; 3 is at a path that merely starts with the same text; 5 lies
        # at the path but was recorded after the call returned
        assert [s.step for s in player.unconsumed()] == [3, 5]


def test_a_call_that_ran_for_real_with_its_insides_replayed_is_not_missing(
        any_store: Store) -> None:
    # an agent's tool whose model is replayed inside it, the tool itself running for real
    with any_store.record() as rec:
        for question in ("q1", "q2"):
            with path_scope("tool:docs"), path_scope("tool:search"):
                rec.record("llm", "m", {"p": question}, f"a {question}")
            rec.record("tool", "search", {"q": question}, "found",
                       path="tool:docs/tool:search")
            rec.record("tool", "docs", {"q": question}, f"docs {question}", path="tool:docs")
    # the second tool call, nested tools included, is missing: its model was not asked
    with pytest.raises(ReplayDivergence) as caught, any_store.replay(rec.run_id) as player:
        assert player.next("llm", "m", {"p": "q1"}, path="tool:docs/tool:search/llm:m") \
            == "a q1"
    assert "3 recorded steps were never replayed: 4 (llm 'm'), 5 (tool 'search'), 6 (tool " \
        "'docs')" in str(caught.value)
    with any_store.replay(rec.run_id) as player:
        for question in ("q1", "q2"):  # everything inside both calls replayed: nothing missing
            assert player.next("llm", "m", {"p": question}) == f"a {question}"
        assert [s.kind for s in player.unconsumed()] == ["tool"] * 4  # not asked for, though


def test_keyed_matching_prefers_the_calls_own_path_then_the_first_pending(
        any_store: Store) -> None:
    with any_store.record() as rec:
        for i, where in enumerate(["a", "b", "a", "c", "b"]):
            rec.record("uuid", "uuid4", {}, f"{where}{i}", path=where)
    with any_store.replay(rec.run_id) as player:
        assert player.next("uuid", "uuid4", {}, path="b") == "b1"
        assert player.next("uuid", "uuid4", {}, path="z") == "a0"  # no step at z: first pending
        assert player.next("uuid", "uuid4", {}, path="b") == "b4"
        assert player.next("uuid", "uuid4", {}, path="b") == "a2"  # b used up
        assert player.next("uuid", "uuid4", {}, path="c") == "c3"


def test_identical_requests_are_served_in_recorded_order(memory_store: Store) -> None:
    with memory_store.record() as rec:
        for i in range(500):
            rec.record("time", "time", {}, i)
    with memory_store.replay(rec.run_id) as player:
        assert [player.next("time", "time", {}) for _ in range(500)] == list(range(500))


def test_identical_requests_are_served_in_the_order_they_started(any_store: Store) -> None:
    # a call a timeout cancelled is recorded when the run ends, after the retry that followed
    # it: the replay's first attempt is the cancelled one, as it was live
    began = datetime.now(timezone.utc)
    with any_store.record() as rec:
        rec.record("tool", "fetch", {"url": "u"}, "retried: ok",
                   started_at=began + timedelta(seconds=1))
        rec.record("tool", "fetch", {"url": "v"}, "other")
        rec.record("tool", "fetch", {"url": "u"}, "first: failed", started_at=began)
    with any_store.replay(rec.run_id) as player:
        assert player.next("tool", "fetch", {"url": "u"}) == "first: failed"
        assert player.next("tool", "fetch", {"url": "v"}) == "other"
        assert player.next("tool", "fetch", {"url": "u"}) == "retried: ok"


def test_start_times_with_and_without_a_zone_compare(memory_store: Store) -> None:
    # the recorder's times are in UTC; one a program gives without a zone is local time
    with memory_store.record() as rec:
        rec.record("tool", "fetch", {}, "later", started_at=datetime.now() + timedelta(hours=1))
        rec.record("tool", "fetch", {}, "earlier")  # now, in UTC
    with memory_store.replay(rec.run_id) as player:
        assert [player.next("tool", "fetch", {}) for _ in range(2)] == ["earlier", "later"]


def _seconds_per_call(store: Store, steps: int) -> float:
    """Best time per `player.next` over a run of `steps` calls, each with an inner step."""
    with store.record() as rec:
        for i in range(steps):
            with path_scope(f"tool:t{i % 7}"):
                rec.record("embedding", "e", {"i": i}, [0.5])
            rec.record("tool", f"t{i % 7}", {"i": i}, i, path=f"tool:t{i % 7}")
    best = float("inf")
    for _ in range(3):
        with store.replay(rec.run_id) as player:
            start = time.perf_counter()
            for i in range(steps):
                player.next("tool", f"t{i % 7}", {"i": i}, path=f"tool:t{i % 7}")
            best = min(best, (time.perf_counter() - start) / steps)
            assert player.unconsumed() == []
    return best


def test_serving_a_call_does_not_get_slower_as_the_run_gets_longer(
        memory_store: Store) -> None:
    short, long = _seconds_per_call(memory_store, 100), _seconds_per_call(memory_store, 4000)
    # walking every earlier step per call made the long run ~40x slower per call; a bound
    # far above noise on a busy machine and far below that
    assert long < 6 * short, (short, long)


def test_requests_holding_secrets_match_call_after_call_and_never_show(tmp_path: Path) -> None:
    secrets = ["sk-proj-" + f"Kk{i}" * 10 for i in range(3)]
    with open_store(f"file:{tmp_path / 'runs'}", redaction=Redactor(key=KEY)) as store:
        with store.record() as rec:
            for i, secret in enumerate(secrets):
                rec.record("llm", "m", {"prompt": f"use {secret} now"}, f"answer {i}")
                rec.record("tool", "t", {"n": i}, i)  # plain requests between them
        with store.replay(rec.run_id, allow_unused=True) as player:
            for i, secret in enumerate(secrets):
                assert player.next("llm", "m", {"prompt": f"use {secret} now"}) == f"answer {i}"
                assert player.next("tool", "t", {"n": i}) == i
            with pytest.raises(ReplayDivergence) as err:
                player.next("llm", "m", {"prompt": f"use {secrets[0]} again"})
    shown = f"{err.value} {err.value.actual!r} {err.value.diff!r}"
    assert secrets[0] not in shown and "<secret:openai:" in repr(err.value.actual)


def test_a_request_recorded_verbatim_matches_whatever_the_replay_would_redact(
        tmp_path: Path) -> None:
    # recorded with redaction off, the prompt's key is stored as it is; replaying with
    # redaction on finds the same request in the recording and serves it
    secret = "sk-proj-" + "Zz9" * 10
    url = f"file:{tmp_path / 'runs'}"
    with open_store(url, redaction=None) as plain, plain.record() as rec:
        rec.record("llm", "m", {"prompt": f"key {secret}"}, "ok")
    with open_store(url, redaction=Redactor(key=KEY)) as store, \
            store.replay(rec.run_id) as player:
        assert player.next("llm", "m", {"prompt": f"key {secret}"}) == "ok"
