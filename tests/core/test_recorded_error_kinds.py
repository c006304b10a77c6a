"""Errors of every kind survive a recording and a replay: agentreplay's own errors crossing a
process boundary, exception groups, `BaseException`s other than the interrupts, and
exceptions whose message cannot be shown."""

from __future__ import annotations

import asyncio
import builtins
import multiprocessing
import pickle
import threading
import uuid
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from agentreplay_core import (
    AbandonedStreamReplayed,
    AgentReplayError,
    IntegrityError,
    NetworkAccessDuringReplay,
    ReplayDivergence,
    ReplayedCancellation,
    ReplayedError,
    RunNotFound,
    SerializationError,
    Store,
    StoreError,
    open_store,
)
from agentreplay_core._diff_candidates import Candidate
from agentreplay_core._integrity import Problem, VerifyReport
from agentreplay_core._recorded_errors import error_to_record

RUN = uuid.UUID("12345678-1234-5678-1234-567812345678")
#: `ExceptionGroup` and `BaseExceptionGroup`, built in from Python 3.11
GROUPS: Any = getattr(builtins, "ExceptionGroup", None)
BASE_GROUPS: Any = getattr(builtins, "BaseExceptionGroup", None)
needs_groups = pytest.mark.skipif(GROUPS is None, reason="exception groups: Python 3.11+")


@pytest.fixture
def store() -> Iterator[Store]:
    store = open_store("memory:")
    try:
        yield store
    finally:
        store.close()


def agent(call: Callable[[], Any]) -> str:
    """Agent code that handles tool failures and carries on."""
    try:
        return str(call())
    except Exception as exc:
        return f"tool failed, continuing: {type(exc).__name__}"


# -- agentreplay's errors cross process boundaries ------------------------------------------

def _divergence(**changes: Any) -> ReplayDivergence:
    fields: dict[str, Any] = {
        "run_id": RUN, "step": 3, "kind": "tool", "name": "search",
        "classification": "tool_args_changed", "expected": {"q": "lyon"},
        "actual": {"q": "paris"}, "diff": "q: 'lyon' -> 'paris'",
        "candidates": [Candidate(3, "tool", "search", 0.5, "q differs")],
        "detail": "the request differs from the recorded one"}
    return ReplayDivergence(**{**fields, **changes})


def _pickled(exc: BaseException) -> Any:
    return pickle.loads(pickle.dumps(exc))


@pytest.mark.parametrize(("error", "text", "attributes"), [
    (AgentReplayError("plain"), "plain", {}),
    (StoreError("store down"), "store down", {}),
    (SerializationError("cannot encode", path="input.x", type_name="Lock"),
     "cannot encode (at input.x)", {"path": "input.x", "type_name": "Lock"}),
    (IntegrityError("chain broken", report=VerifyReport(RUN, 2, [Problem(RUN, 1, "c", "m")])),
     "chain broken", {"report": VerifyReport(RUN, 2, [Problem(RUN, 1, "c", "m")])}),
    (RunNotFound(RUN, "did you mean x?"),
     f"no run with id {RUN}; did you mean x?", {"run_id": RUN}),
    (NetworkAccessDuringReplay("connect to example.org:443"), "connect to example.org:443", {}),
    (ReplayedCancellation("step 2 was cancelled"), "step 2 was cancelled", {}),
    (AbandonedStreamReplayed("stream closed"), "stream closed", {}),
    (ReplayedError("RateLimitError", "slow down", "openai"), "openai.RateLimitError: slow down",
     {"type_name": "RateLimitError", "message": "slow down", "original_module": "openai"}),
    (_divergence(), "replay diverged (tool_args_changed) in run "
     "12345678-1234-5678-1234-567812345678, step 3: tool 'search'\n"
     "the request differs from the recorded one\ndiff (recorded -> actual):\n"
     "  q: 'lyon' -> 'paris'\nnearest recorded steps:\n"
     "  step 3 tool 'search' (50% similar): q differs",
     {"run_id": RUN, "step": 3, "kind": "tool", "name": "search",
      "classification": "tool_args_changed", "expected": {"q": "lyon"},
      "actual": {"q": "paris"}, "detail": "the request differs from the recorded one",
      "candidates": [Candidate(3, "tool", "search", 0.5, "q differs")]}),
], ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else "")
def test_agentreplay_errors_survive_pickling(error: BaseException, text: str,
                                             attributes: dict[str, Any]) -> None:
    copy = _pickled(error)
    assert type(copy) is type(error)
    assert str(copy) == text
    for name, value in attributes.items():
        assert getattr(copy, name) == value, name


def test_what_cannot_be_pickled_arrives_as_its_text() -> None:
    """A divergence's request, or a report, may hold anything; the error still arrives."""
    lock = threading.Lock()
    copy = _pickled(_divergence(actual={"q": "paris", "lock": lock}))
    assert copy.actual == str({"q": "paris", "lock": lock})
    assert copy.expected == {"q": "lyon"} and copy.step == 3
    unpicklable = IntegrityError("chain broken", report=lock)
    assert _pickled(unpicklable).report == str(lock)


#: the replay a pool worker forked from the test process diverges in
_PLAYER: Any = None


def _replay_in_worker(city: str) -> Any:
    return _PLAYER.next("tool", "weather", {"city": city})


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs the fork start method")
def test_a_divergence_in_a_pool_worker_reaches_the_caller(store: Store) -> None:
    """Unpickling the divergence failed in the pool's result thread, which died: `get`
    then waited for ever (here: the timeout)."""
    global _PLAYER
    with store.record() as rec:
        rec.call("tool", "weather", {"city": "Lyon"}, lambda: {"temp_c": 12})
    with (store.replay(rec.run_id, allow_unused=True) as _PLAYER,
          multiprocessing.get_context("fork").Pool(1) as pool):
        pending = pool.apply_async(_replay_in_worker, ("Paris",))
        with pytest.raises(ReplayDivergence) as caught:
            pending.get(timeout=60)
    _PLAYER = None
    assert caught.value.run_id == rec.run_id
    assert (caught.value.step, caught.value.kind, caught.value.name) == (1, "tool", "weather")
    assert caught.value.classification == "tool_args_changed"
    assert caught.value.actual == {"city": "Paris"}


# -- exception groups ----------------------------------------------------------------------

async def _fetch_all() -> None:
    """A tool fanning out with a TaskGroup, one of whose sources fails."""
    async def one(i: int) -> int:
        if i == 1:
            raise ValueError("source 1 returned garbage")
        return i

    async with asyncio.TaskGroup() as tasks:  # type: ignore[attr-defined,unused-ignore]
        for i in range(3):
            tasks.create_task(one(i))


def _handled(call: Callable[[], Any]) -> str:
    """What `except* ValueError` does (a syntax error before 3.11)."""
    try:
        call()
    except GROUPS as group:
        matched, rest = group.split(ValueError)
        if rest is not None:
            raise
        return f"handled {len(matched.exceptions)} bad source(s)"
    return "ok"


@needs_groups
def test_a_task_group_failure_replays_as_the_same_exception_group(store: Store) -> None:
    with store.record() as rec:
        live = _handled(lambda: rec.call("tool", "fetch_all", {},
                                         lambda: asyncio.run(_fetch_all())))
    assert live == "handled 1 bad source(s)"
    with store.replay(rec.run_id) as player:
        assert _handled(lambda: player.next("tool", "fetch_all", {})) == live


class Failures(GROUPS or Exception):  # type: ignore[misc]
    """A program's own exception group class."""


@needs_groups
def test_nested_groups_replay_with_their_classes_messages_and_exceptions(
        store: Store) -> None:
    def fails() -> None:
        raise Failures("batch failed", [
            ValueError("bad input"), KeyError("gone"),
            GROUPS("retries exhausted", [TimeoutError("slow"), ReplayedError("X", "y")])])

    with store.record() as rec, pytest.raises(Failures):
        rec.call("tool", "batch", {}, fails)
    with store.replay(rec.run_id) as player, pytest.raises(Failures) as caught:
        player.next("tool", "batch", {})
    group = caught.value
    assert group.message == "batch failed"
    assert str(group) == "batch failed (3 sub-exceptions)"
    value, key, inner = group.exceptions
    assert (type(value), str(value)) == (ValueError, "bad input")
    assert (type(key), key.args) == (KeyError, ("gone",))
    assert type(inner) is GROUPS and inner.message == "retries exhausted"
    slow, replayed = inner.exceptions
    assert (type(slow), str(slow)) == (TimeoutError, "slow")
    assert (type(replayed), str(replayed)) == (ReplayedError, "X: y")


@needs_groups
def test_a_base_exception_group_replays_with_its_interrupt(store: Store) -> None:
    with store.record() as rec:
        group = BASE_GROUPS("stopped", [KeyboardInterrupt(), ValueError("v")])
        rec.record("tool", "stop", {}, error_to_record(group), is_error=True)
    with store.replay(rec.run_id) as player, pytest.raises(BASE_GROUPS) as caught:
        agent(lambda: player.next("tool", "stop", {}))
    assert type(caught.value) is BASE_GROUPS
    assert [type(e) for e in caught.value.exceptions] == [KeyboardInterrupt, ValueError]


def test_a_group_recorded_before_groups_were_still_replays_as_before(store: Store) -> None:
    with store.record() as rec:
        rec.record("tool", "t", {}, {"type": "ExceptionGroup", "module": "builtins",
                                     "message": "failed (1 sub-exception)"}, is_error=True)
    with store.replay(rec.run_id) as player, pytest.raises(ReplayedError) as caught:
        player.next("tool", "t", {})
    assert (caught.value.type_name, caught.value.message) == (
        "ExceptionGroup", "failed (1 sub-exception)")


# -- other BaseExceptions ------------------------------------------------------------------

class Skipped(BaseException):
    """What `pytest.skip()` raises (its outcomes are `BaseException`s)."""


def test_a_recorded_base_exception_replays_past_except_exception(store: Store) -> None:
    """Replay does not rebuild a library's own `BaseException` (see
    test_recorded_interrupts), but what it raises instead passes the agent's
    `except Exception:` as the original did, and names it."""
    with store.record() as rec:
        rec.record("tool", "probe", {}, error_to_record(Skipped("not configured")),
                   is_error=True)
    with store.replay(rec.run_id) as player, pytest.raises(BaseException) as caught:
        agent(lambda: player.next("tool", "probe", {}))
    from agentreplay_core._errors import ReplayedInterruption
    assert type(caught.value) is ReplayedInterruption
    assert (caught.value.type_name, caught.value.original_module, caught.value.message) == (
        "Skipped", __name__, "not configured")
    assert str(caught.value) == f"{__name__}.Skipped: not configured"
    copy = _pickled(caught.value)
    assert type(copy) is ReplayedInterruption and copy.type_name == "Skipped"


def test_which_exceptions_a_call_records_as_its_outcome() -> None:
    from agentreplay_core._recorded_errors import records_as_outcome
    assert records_as_outcome(Skipped())
    assert records_as_outcome(KeyboardInterrupt()) and records_as_outcome(ValueError())
    assert not records_as_outcome(GeneratorExit())


def test_a_call_ended_by_another_base_exception_is_recorded_and_replayed(
        store: Store) -> None:
    skipped = Skipped("service not configured")

    def probe() -> None:
        raise skipped

    with store.record() as rec, pytest.raises(Skipped) as live:
        agent(lambda: rec.call("tool", "probe", {}, probe))
    assert live.value is skipped  # propagated unchanged
    [step] = store.load_steps(rec.run_id)
    assert step.is_error and step.output["type"] == "Skipped"
    with store.replay(rec.run_id) as player, pytest.raises(BaseException) as caught:
        agent(lambda: player.next("tool", "probe", {}))
    assert type(caught.value).__name__ == "ReplayedInterruption"


class _Suspend:
    def __await__(self) -> Generator[None, None, None]:
        yield


def test_a_call_whose_coroutine_is_closed_records_nothing(store: Store) -> None:
    """A `GeneratorExit` only says that the coroutine running the call was closed
    (abandoned, or collected, at a moment of the collector's choosing)."""
    async def never() -> None:
        await _Suspend()

    with store.record() as rec:
        call = rec.acall("tool", "never", {}, never)
        call.send(None)
        call.close()
    assert store.load_steps(rec.run_id) == []


# -- exceptions whose message cannot be shown ----------------------------------------------

class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str exploded")


def test_an_exception_whose_str_fails_replays_as_its_own_class(store: Store) -> None:
    def fails() -> None:
        raise BadStr("x")

    with store.record() as rec, pytest.raises(BadStr):
        rec.call("tool", "bad", {}, fails)
    with store.replay(rec.run_id) as player, pytest.raises(BadStr) as caught:
        player.next("tool", "bad", {})
    assert caught.value.args == ("x",)
    with pytest.raises(RuntimeError, match="str exploded"):
        str(caught.value)



class SearchAPIError(Exception):
    """The shape of an HTTP client's status error: its parsed JSON body as an attribute."""

    def __init__(self, status: int, body: Any, response: Any = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = body
        self.response = response


def test_an_errors_parsed_body_is_replayed_for_its_handler(store: Store) -> None:
    """A retry handler reads `e.body["error"]["retry_after"]`: the body, a dict of plain
    values, must come back with the error; an object (the HTTP response) still does not."""
    body = {"error": {"type": "rate_limit", "retry_after": 3, "hints": ["wait", 1.5, None]}}
    huge = {"rows": list(range(1_000))}  # more values than an error record keeps

    def search(payload: Any) -> None:
        raise SearchAPIError(429, payload, response=threading.Lock())

    for payload in (body, huge):
        with store.record() as rec, pytest.raises(SearchAPIError):
            rec.call("retriever", "search", {"q": 1}, search, payload)
        with store.replay(rec.run_id) as player, pytest.raises(SearchAPIError) as caught:
            player.next("retriever", "search", {"q": 1})
        assert caught.value.status == 429
        assert not hasattr(caught.value, "response") or caught.value.response is None
        if payload is body:
            assert caught.value.body == body
            assert caught.value.body["error"]["retry_after"] == 3
        else:
            assert getattr(caught.value, "body", None) is None
