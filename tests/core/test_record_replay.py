"""Recording and replaying through the public API, on every backend."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
import uuid
from decimal import Decimal
from typing import Any

import pytest

from agentreplay_core import (
    AgentReplayError,
    Player,
    ReplayDivergence,
    ReplayedCancellation,
    ReplayedError,
    RunStatus,
    SerializationError,
    Store,
    decode,
    path_scope,
)
from agentreplay_core._recorded_errors import keep_beside, recorded_error


def weather(city: str) -> dict[str, object]:
    return {"city": city, "temp_c": 21.5, "at": dt.datetime(2026, 1, 2, 3, 4, 5, 6,
                                                             tzinfo=dt.timezone.utc)}


def test_record_then_replay_returns_recorded_values(any_store: Store) -> None:
    with any_store.record(name="weather-agent", metadata={"team": "qa"}) as rec:
        live = rec.call("tool", "weather", {"city": "Paris"}, weather, "Paris")
        answer = rec.call("llm", "gpt", {"messages": ["hi"], "temperature": 0.2},
                          lambda: {"content": "It is 21.5C", "usage": Decimal("1.10")})
    run = any_store.get_run(rec.run_id)
    assert run.status == RunStatus.COMPLETE
    assert run.step_count == 2
    assert run.name == "weather-agent"
    assert run.metadata["team"] == "qa"
    assert run.metadata["python"]
    with any_store.replay(rec.run_id) as player:
        replayed = player.next("tool", "weather", {"city": "Paris"})
        replayed_answer = player.next("llm", "gpt", {"temperature": 0.2, "messages": ["hi"]})
    assert replayed == live
    assert type(replayed["at"]) is dt.datetime
    assert replayed_answer == answer
    assert str(replayed_answer["usage"]) == "1.10"
    assert any_store.verify(rec.run_id).ok
    assert f"run {rec.run_id}: 2 steps, chain intact" in str(any_store.verify(rec.run_id))
    with any_store.record() as one:
        one.record("tool", "weather", {"city": "Lyon"}, "sun")
    assert f"run {one.run_id}: 1 step, chain intact" in str(any_store.verify(one.run_id))


def test_replay_returns_fresh_copies(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "t", {"q": 1}, {"items": [1, 2]})
        rec.record("tool", "t", {"q": 1}, {"items": [1, 2]})
    with any_store.replay(rec.run_id) as player:
        first = player.next("tool", "t", {"q": 1})
        first["items"].append(3)
        assert player.next("tool", "t", {"q": 1}) == {"items": [1, 2]}


def test_recorded_error_is_replayed_as_the_same_type(any_store: Store) -> None:
    def boom() -> None:
        raise ValueError("bad city")

    with any_store.record() as rec:
        with pytest.raises(ValueError, match="bad city") as caught:
            rec.call("tool", "weather", {"city": "?"}, boom)
        original = caught.value
    assert any_store.get_run(rec.run_id).status == RunStatus.COMPLETE
    with any_store.replay(rec.run_id) as player, \
            pytest.raises(ValueError, match="bad city") as again:
        player.next("tool", "weather", {"city": "?"})
    assert again.value is not original


class RateLimited(Exception):
    """Shaped like an API client's error: its HTTP response is a keyword-only argument."""

    status_code = 429

    def __init__(self, message: str, *, response: object, retry_after: float) -> None:
        super().__init__(message)
        self.response = response
        self.retry_after = retry_after


class Coded(Exception):
    """An error whose text is made from its attributes by __str__."""

    def __init__(self, code: int, *, detail: str) -> None:
        super().__init__()
        self.code, self.detail = code, detail

    def __str__(self) -> str:
        return f"E{self.code}: {self.detail}"


def test_an_error_its_class_cannot_rebuild_from_a_message_keeps_its_type(
        any_store: Store) -> None:
    """Handlers pick errors by class (`except RateLimited`, a retry's exception types): an
    error whose constructor needs more than its message is still raised as its class, with
    its plain attributes (not the objects, which a recording does not hold)."""
    def limited() -> None:
        raise RateLimited("429 slow down", response=object(), retry_after=1.5)

    def coded() -> None:
        raise Coded(7, detail="quota")

    with any_store.record() as rec:
        for name, fails in (("limited", limited), ("coded", coded)):
            with pytest.raises((RateLimited, Coded)):
                rec.call("tool", name, {}, fails)
    with any_store.replay(rec.run_id) as player:
        with pytest.raises(RateLimited, match="429 slow down") as limited_again:
            player.next("tool", "limited", {})
        with pytest.raises(Coded) as coded_again:
            player.next("tool", "coded", {})
    assert limited_again.value.retry_after == 1.5 and limited_again.value.status_code == 429
    assert not hasattr(limited_again.value, "response")
    assert str(coded_again.value) == "E7: quota" and coded_again.value.code == 7


def _open_missing() -> None:
    with open("/nonexistent-agentreplay/notes.txt", encoding="utf-8"):
        pass


def _tuple_key() -> None:
    index: dict[tuple[str, int], str] = {}
    index[("user", 42)]


def _bad_utf8() -> None:
    b"\xff\xfe".decode("utf-8")


def _process_failed() -> None:
    raise subprocess.CalledProcessError(128, ["git", "push"], output=b"denied")


def _denied() -> None:
    raise PermissionError(13, "Permission denied", "/etc/shadow", None, "/etc/gshadow")


@pytest.mark.parametrize("fails", [_open_missing, _tuple_key, _bad_utf8, _process_failed,
                                   _denied], ids=lambda f: f.__name__.strip("_"))
def test_built_in_errors_replay_as_their_own_class(any_store: Store, fails: Any) -> None:
    """`except FileNotFoundError:`, `except KeyError:` in the agent must run in replay as they
    did live: errors whose args are no plain values, or whose message shows a file name that
    their args do not hold, were replayed as `ReplayedError`."""
    with any_store.record() as rec, pytest.raises(Exception) as caught:
        rec.call("tool", "t", {}, fails)
    live = caught.value
    with any_store.replay(rec.run_id) as player, pytest.raises(type(live)) as again:
        player.next("tool", "t", {})
    replayed = again.value
    assert type(replayed) is type(live) and str(replayed) == str(live)
    assert replayed.args == live.args
    if isinstance(live, OSError):
        assert isinstance(replayed, OSError)
        assert (replayed.errno, replayed.filename, replayed.filename2) == (
            live.errno, live.filename, live.filename2)


class Delegating(Exception):
    """An API error that reads its payload's fields as attributes: its `__getattr__` raises
    KeyError, not AttributeError, for a name the payload lacks."""

    def __init__(self, message: str, fields: dict[str, object]) -> None:
        super().__init__(message)
        self.fields = fields

    def __getattr__(self, name: str) -> object:
        fields: dict[str, object] = self.__dict__.get("fields", {})
        return fields[name]


def test_an_error_whose_getattr_raises_reaches_the_user_as_it_is(any_store: Store) -> None:
    def limited() -> None:
        raise Delegating("rate limited", {"status": 429})

    # (not `pytest.raises`: pytest reads `__notes__` of what it catches, which this class's
    # `__getattr__` answers with a KeyError)
    def outcome(call: Any) -> object:
        try:
            call()
        except Exception as exc:  # what the user's code sees
            return exc
        return None

    with any_store.record() as rec:
        live = outcome(lambda: rec.call("tool", "api", {}, limited))
    assert type(live) is Delegating and live.status == 429
    assert rec.stats.steps == 1 and rec.stats.internal_errors == 0
    with any_store.replay(rec.run_id) as player:
        again = outcome(lambda: player.next("tool", "api", {}))
    assert type(again) is Delegating and str(again) == "rate limited"


def test_unimportable_error_type_becomes_replayed_error(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "t", {}, {"type": "Gone", "module": "no_such_module_x",
                                     "message": "it broke"}, is_error=True)
    with any_store.replay(rec.run_id) as player, pytest.raises(ReplayedError) as caught:
        player.next("tool", "t", {})
    assert caught.value.type_name == "Gone"
    assert "it broke" in str(caught.value)


def test_an_error_of_a_module_the_program_has_not_imported_is_not_imported(
        any_store: Store) -> None:
    """A run log must not make a replay import a module (its top-level code would run): an
    error whose class lives in an installed module the program never imported comes back as
    `ReplayedError`."""
    assert "tabnanny" not in sys.modules  # a standard-library module nothing here imports
    with any_store.record() as rec:
        rec.record("tool", "t", {}, {"type": "NannyNag", "module": "tabnanny",
                                     "message": "ambiguous indentation", "args": [1, "m", "l"]},
                   is_error=True)
    with any_store.replay(rec.run_id) as player, pytest.raises(ReplayedError) as caught:
        player.next("tool", "t", {})
    assert caught.value.type_name == "NannyNag" and "tabnanny" not in sys.modules


def test_a_replayed_error_keeps_what_an_adapter_recorded_beside_it(any_store: Store) -> None:
    """Adapters record more than type and message for some errors (LangGraph's interrupt
    values): the rebuilt exception, of the recorded class or not, hands them back."""
    gone = {"type": "Gone", "module": "no_such_module_x", "message": "x", "extra": [1]}
    value = {"type": "ValueError", "module": "builtins", "message": "bad", "args": ["bad"],
             "extra": {"k": "v"}}
    with any_store.record() as rec:
        rec.record("tool", "gone", {}, gone, is_error=True)
        rec.record("tool", "value", {}, value, is_error=True)
    with any_store.replay(rec.run_id) as player:
        with pytest.raises(ReplayedError) as replayed:
            player.next("tool", "gone", {})
        with pytest.raises(ValueError) as rebuilt:
            player.next("tool", "value", {})
    assert recorded_error(replayed.value) == gone
    assert recorded_error(rebuilt.value) == value
    assert recorded_error(ValueError("never recorded")) is None


def test_what_an_adapter_keeps_beside_a_live_error_is_recorded_with_it(
        any_store: Store) -> None:
    """A call made by `Recorder.call` (a fork's live call) records its error itself: an
    adapter that knows more (what the call reported before it raised) keeps it beside the
    exception, and the record holds it, never in place of the error's own fields."""
    def failing() -> None:
        error = KeyError("gone")
        keep_beside(error, {"events": [{"name": "progress"}]})
        keep_beside(error, {"type": "not the error's", "more": 1})
        raise error

    with any_store.record() as rec, pytest.raises(KeyError):
        rec.call("tool", "failing", {}, failing)
    [step] = any_store.load_steps(rec.run_id)
    assert step.is_error and step.output["type"] == "KeyError"
    assert step.output["events"] == [{"name": "progress"}] and step.output["more"] == 1
    with any_store.replay(rec.run_id) as player, pytest.raises(KeyError) as again:
        player.next("tool", "failing", {})
    assert recorded_error(again.value) == step.output


def test_user_exception_propagates_unchanged_and_run_is_failed(any_store: Store) -> None:
    class Custom(Exception):
        pass

    marker = Custom("mine")
    with pytest.raises(Custom) as caught, any_store.record() as rec:
        rec.record("tool", "t", {}, 1)
        raise marker
    assert caught.value is marker
    run = any_store.get_run(rec.run_id)
    assert run.status == RunStatus.FAILED
    assert run.step_count == 1
    assert any_store.verify(rec.run_id).ok


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_request_is_recorded_as_sent_when_the_callee_changes_it(
        any_store: Store, mode: str) -> None:
    """A chat client that appends its answer to the history it was given: what was sent is
    the history without the answer, and replay of the unchanged agent must match it."""
    def chat(history: list[dict[str, str]]) -> dict[str, str]:
        answer = {"role": "assistant", "content": "hi"}
        history.append(answer)
        return answer

    async def achat(history: list[dict[str, str]]) -> dict[str, str]:
        return chat(history)

    history = [{"role": "user", "content": "hello"}]
    with any_store.record() as rec:
        request = {"messages": history}
        if mode == "sync":
            rec.call("llm", "chat", request, chat, history)
        else:
            asyncio.run(rec.acall("llm", "chat", request, achat, history))
    assert len(history) == 2  # the live call did change it
    [step] = any_store.load_steps(rec.run_id)
    assert step.input == {"messages": [{"role": "user", "content": "hello"}]}
    with any_store.replay(rec.run_id) as player:
        sent = {"messages": [{"role": "user", "content": "hello"}]}
        assert player.next("llm", "chat", sent) == {"role": "assistant", "content": "hi"}


def test_recording_under_the_id_of_a_stored_run_is_refused(any_store: Store) -> None:
    """The new run's rows were dropped as already stored and its seal replaced the stored
    run's, which then failed to verify: nothing said so."""
    with any_store.record() as first:
        first.call("tool", "t", {"n": 1}, lambda: 1)
    with pytest.raises(AgentReplayError, match=f"run {first.run_id} already exists"), \
            any_store.record(run_id=first.run_id) as again:
        again.call("tool", "t", {"n": 2}, lambda: 2)
    assert any_store.verify(first.run_id).ok
    assert [s.output for s in any_store.load_steps(first.run_id)] == [1]


def test_async_calls_are_recorded(any_store: Store) -> None:
    async def fetch(n: int) -> int:
        await asyncio.sleep(0)
        return n * 10

    async def agent() -> list[int]:
        with any_store.record() as rec:
            results = await asyncio.gather(*(rec.acall("tool", "fetch", {"n": n}, fetch, n)
                                              for n in range(20)))
        self_run.append(rec.run_id)
        return list(results)

    self_run: list[uuid.UUID] = []
    results = asyncio.run(agent())
    steps = any_store.load_steps(self_run[0])
    assert sorted(s.step for s in steps) == list(range(1, 21))
    with any_store.replay(self_run[0]) as player:
        assert [player.next("tool", "fetch", {"n": n}) for n in reversed(range(20))] == list(
            reversed(results))


def test_unencodable_value_does_not_break_the_agent_and_replay_says_why(any_store: Store) -> None:
    class Opaque:
        pass

    with any_store.record() as rec:
        value = rec.call("tool", "opaque", {"x": 1}, Opaque)
        rec.record("tool", "fine", {}, "ok")
    assert isinstance(value, Opaque)
    assert rec.stats.unencodable == 1
    assert any_store.verify(rec.run_id).ok
    with any_store.replay(rec.run_id) as player:
        with pytest.raises(Exception, match="Opaque") as caught:
            player.next("tool", "opaque", {"x": 1})
        assert "could not" in str(caught.value).lower()
        assert player.next("tool", "fine", {}) == "ok"


def test_keyed_replay_matches_branches_in_any_order(any_store: Store) -> None:
    with any_store.record() as rec:
        for city in ("Paris", "Lyon", "Nice"):
            with path_scope(f"branch:{city}"):
                rec.record("tool", "weather", {"city": city}, f"sunny in {city}")
    with any_store.replay(rec.run_id, match="keyed") as player:
        for city in ("Nice", "Paris", "Lyon"):
            assert player.next("tool", "weather", {"city": city}) == f"sunny in {city}"


def test_path_disambiguates_identical_requests(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("llm", "m", {"p": "same"}, "first", path="graph/a")
        rec.record("llm", "m", {"p": "same"}, "second", path="graph/b")
    with any_store.replay(rec.run_id) as player:
        assert player.next("llm", "m", {"p": "same"}, path="graph/b") == "second"
        assert player.next("llm", "m", {"p": "same"}, path="graph/a") == "first"


def test_sequential_replay_detects_order_change(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "a", {}, 1)
        rec.record("tool", "b", {}, 2)
    with pytest.raises(ReplayDivergence) as caught, \
            any_store.replay(rec.run_id, match="sequential", allow_unused=True) as player:
        player.next("tool", "b", {})
    assert caught.value.classification == "order_changed"
    assert caught.value.step == 1


def test_divergences_are_classified(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("llm", "gpt", {"messages": [{"role": "user", "content": "weather in Paris?"}],
                                  "temperature": 0.0}, "call weather")
        rec.record("tool", "weather", {"city": "Paris"}, "sunny")
    with any_store.replay(rec.run_id, allow_unused=True) as player:
        with pytest.raises(ReplayDivergence) as prompt:
            player.next("llm", "gpt", {"messages": [{"role": "user",
                                                     "content": "weather in Lyon?"}],
                                       "temperature": 0.0})
        with pytest.raises(ReplayDivergence) as params:
            player.next("llm", "gpt", {"messages": [{"role": "user",
                                                     "content": "weather in Paris?"}],
                                       "temperature": 0.7})
        with pytest.raises(ReplayDivergence) as args:
            player.next("tool", "weather", {"city": "Lyon"})
        with pytest.raises(ReplayDivergence) as unexpected:
            player.next("tool", "stocks", {"ticker": "X"})
    assert prompt.value.classification == "prompt_changed"
    assert "Lyon" in str(prompt.value) and "Paris" in str(prompt.value)
    assert prompt.value.step == 1
    assert prompt.value.run_id == rec.run_id
    assert params.value.classification == "params_changed"
    assert args.value.classification == "tool_args_changed"
    assert args.value.step == 2
    assert unexpected.value.classification == "unexpected_call"
    assert unexpected.value.candidates, "nearest recorded steps are listed"


def test_extra_call_after_all_replayed_is_unexpected(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "t", {"a": 1}, 1)
    with any_store.replay(rec.run_id) as player:
        player.next("tool", "t", {"a": 1})
        with pytest.raises(ReplayDivergence) as caught:
            player.next("tool", "t", {"a": 1})
    assert caught.value.classification == "unexpected_call"
    assert "already replayed" in str(caught.value)


def test_unconsumed_steps_raise_missing_call_at_exit(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "a", {}, 1)
        rec.record("tool", "b", {}, 2)
    with pytest.raises(ReplayDivergence) as caught, any_store.replay(rec.run_id) as player:
        player.next("tool", "a", {})
        assert [s.step for s in player.unconsumed()] == [2]
    assert caught.value.classification == "missing_call"
    assert caught.value.step == 2
    assert "1 recorded step was never replayed: 2 (tool 'b')" in str(caught.value)
    with any_store.replay(rec.run_id, allow_unused=True) as player:
        player.next("tool", "a", {})


def test_missing_call_is_named_after_the_outermost_call(any_store: Store) -> None:
    # what a call records inside it comes first (a call is recorded when it returns)
    with any_store.record() as rec:
        rec.record("llm", "m", {"p": 1}, "plan", path="agent/llm:m")
        rec.record("random", "os.urandom", {"n": 4}, b"abcd",
                   path="agent/tool:weather/random:os.urandom")
        rec.record("tool", "weather", {"city": "Paris"}, "sunny", path="agent/tool:weather")
        rec.record("time", "time.time", {}, 1.5, path="agent/time:time.time")
    with pytest.raises(ReplayDivergence) as caught, any_store.replay(rec.run_id) as player:
        player.next("llm", "m", {"p": 1}, path="agent/llm:m")
    error = caught.value
    assert (error.step, error.kind, error.name) == (3, "tool", "weather")
    assert "3 recorded steps were never replayed: 2 (random 'os.urandom'), 3 (tool " \
           "'weather'), 4 (time 'time.time')" in str(error)


def test_missing_call_says_which_calls_ran_for_real(any_store: Store) -> None:
    # an adapter's tracker reports where calls started: a recorded step at such a path that
    # nobody asked for is a call that was not swapped for its replay backend
    with any_store.record() as rec:
        rec.record("llm", "m", {"p": 1}, "plan", path="agent/llm:m")
        rec.record("tool", "search", {"q": "a"}, "doc a", path="agent/tool:search")
        rec.record("tool", "search", {"q": "b"}, "doc b", path="agent/tool:search#1")
        rec.record("retriever", "vs", {"query": "q"}, ["doc"], path="agent/retriever:vs")
        # what a call records inside it (vectors below its embedding span) runs with it
        rec.record("embedding", "e", {"text": "q"}, [0.5], path="agent/retriever:vs/e/0")
    with pytest.raises(ReplayDivergence) as caught, any_store.replay(rec.run_id) as player:
        player.next("llm", "m", {"p": 1}, path="agent/llm:m")
        player.started_at("agent/llm:m")
        player.started_at("agent/tool:search#1")
    detail = str(caught.value)
    assert "4 recorded steps were never replayed: 2 (tool 'search'), 3 (tool 'search'), " \
           "4 (retriever 'vs'), 5 (embedding 'e'); 3 (tool 'search') ran for real in this " \
           "replay, at the recorded path," in detail
    assert "replay_tools(player, tools)" in detail
    assert "allow_unused=True if running it for real is intended" in detail

    with pytest.raises(ReplayDivergence) as caught, any_store.replay(rec.run_id) as player:
        player.next("llm", "m", {"p": 1}, path="agent/llm:m")
        player.started_at("agent/retriever:vs/e")  # inside the retriever: not the retriever
    assert "; 5 (embedding 'e') ran for real in this replay" in str(caught.value)

    with pytest.raises(ReplayDivergence) as caught, any_store.replay(rec.run_id) as player:
        player.next("llm", "m", {"p": 1}, path="agent/llm:m")
        for path in ("agent/tool:search", "agent/tool:search#1", "agent/retriever:vs"):
            player.started_at(path)
    assert "; they ran for real in this replay, at the recorded paths," in str(caught.value)

    with pytest.raises(ReplayDivergence) as caught, any_store.replay(rec.run_id) as player:
        player.next("llm", "m", {"p": 1}, path="agent/llm:m")
    assert "ran for real" not in str(caught.value)
    assert str(caught.value).endswith("pass allow_unused=True if that is expected")


def test_a_call_whose_request_could_not_be_taken_is_not_said_to_have_run(
        any_store: Store) -> None:
    """A request the codec cannot keep (a client object) is recorded unencodable, and its
    replay raises SerializationError at the call; code that catches it left a missing_call
    saying the call ran for real for want of its replay backend."""
    class Client:
        pass

    with any_store.record() as rec:
        rec.call("tool", "fetch", {"client": Client()}, lambda: "page")
    with pytest.raises(ReplayDivergence) as caught, any_store.replay(rec.run_id) as player, \
            pytest.raises(SerializationError):
        player.next("tool", "fetch", {"client": Client()})
    detail = caught.value.detail or ""
    assert caught.value.classification == "missing_call"
    assert "could not take the request (cannot encode a value of type" in detail
    assert "ran for real" not in detail


def test_user_error_inside_replay_is_not_masked_by_missing_calls(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "a", {}, 1)
    with pytest.raises(KeyError), any_store.replay(rec.run_id):
        raise KeyError("user bug")


def test_calls_inside_a_replayed_tool_are_consumed(any_store: Store) -> None:
    with any_store.record() as rec, path_scope("agent"):
        with path_scope("tool:search"):
            rec.record("embedding", "embed", {"texts": ["q"]}, [[0.5] * 40])
            rec.record("retriever", "vs", {"query": "q"}, ["doc"])
        rec.record("tool", "search", {"q": "q"}, "doc", path="agent/tool:search")
        rec.record("llm", "m", {"p": "answer"}, "done")
    with any_store.replay(rec.run_id) as player:
        assert player.next("tool", "search", {"q": "q"}) == "doc"
        assert player.next("llm", "m", {"p": "answer"}) == "done"
        assert player.unconsumed() == []


def test_fork_continues_live_after_divergence(any_store: Store) -> None:
    with any_store.record(name="agent") as rec:
        rec.record("llm", "m", {"p": 1}, "one")
        rec.record("llm", "m", {"p": 2}, "two")
        rec.record("llm", "m", {"p": 3}, "three")
    live_calls: list[int] = []

    def live(p: int) -> str:
        live_calls.append(p)
        return f"live {p}"

    with any_store.replay(rec.run_id, on_divergence="live") as player:
        assert player.next("llm", "m", {"p": 1}, live=lambda: live(1)) == "one"
        assert player.next("llm", "m", {"p": 20}, live=lambda: live(20)) == "live 20"
        assert player.next("llm", "m", {"p": 3}, live=lambda: live(3)) == "live 3"
        assert player.fork is not None
        fork_id = player.fork.run_id
    assert live_calls == [20, 3]
    fork = any_store.get_run(fork_id)
    assert fork.parent_run_id == rec.run_id
    assert fork.fork_step == 2
    assert fork.status == RunStatus.COMPLETE
    with any_store.replay(fork_id) as player:
        assert player.next("llm", "m", {"p": 1}) == "one"
        assert player.next("llm", "m", {"p": 20}) == "live 20"
        assert player.next("llm", "m", {"p": 3}) == "live 3"


def test_embedding_vectors_replay_bit_identical(any_store: Store) -> None:
    import random

    rng = random.Random(7)
    vectors = [[rng.uniform(-1, 1) for _ in range(64)] for _ in range(3)]
    vectors[0][0] = 5e-324
    vectors[1][1] = -0.0
    with any_store.record() as rec:
        rec.record("embedding", "embed", {"texts": ["a", "b", "c"]}, vectors)
    with any_store.replay(rec.run_id) as player:
        again = player.next("embedding", "embed", {"texts": ["a", "b", "c"]})
    import struct

    assert [struct.pack("<64d", *v) for v in again] == [struct.pack("<64d", *v) for v in vectors]


def test_invalid_arguments_are_rejected_clearly(any_store: Store) -> None:
    with pytest.raises(ValueError, match="durability"), any_store.record(durability="fast"):
        pass
    with any_store.record() as rec:
        rec.record("tool", "t", {}, 1)
        assert rec.record("Not A Kind!", "t", {}, 1) is None  # never raises into the agent
    assert rec.stats.internal_errors == 1
    assert any_store.get_run(rec.run_id).step_count == 1
    with pytest.raises(ValueError, match="match"), any_store.replay(rec.run_id, match="fuzzy"):
        pass


def test_unknown_run_id_is_a_clear_error(any_store: Store) -> None:
    from agentreplay_core import RunNotFound

    with pytest.raises(RunNotFound, match="no run with id"):
        any_store.get_run(uuid.uuid4())
    with pytest.raises(RunNotFound):
        any_store.get_run("not-a-uuid")


def test_clock_read_inside_a_replayed_call_is_not_expected_again(any_store: Store) -> None:
    import time

    with any_store.record(entropy=True) as rec:
        stamp = rec.call("tool", "clock", {}, time.time)
        later = time.time()
    kinds = [(s.kind, s.path) for s in any_store.load_steps(rec.run_id)]
    assert ("time", "tool:clock/time:time.time") in kinds
    with any_store.replay(rec.run_id) as player:
        assert player.next("tool", "clock", {}) == stamp
        assert time.time() == later  # the read outside the tool is still replayed
    # leaving the replay raised no missing_call: the inner read was consumed with the tool


def test_fork_of_an_entropy_run_replays_with_entropy(any_store: Store) -> None:
    import time

    with any_store.record(entropy=True) as rec:
        rec.record("llm", "m", {"p": 1}, "one")
        time.time()
    with any_store.replay(rec.run_id, on_divergence="live") as player:
        assert player.next("llm", "m", {"p": 2}, live=lambda: "live two") == "live two"
        assert player.fork is not None
        fork_id = player.fork.run_id
        forked_clock = time.time()
    fork = any_store.get_run(fork_id)
    assert fork.metadata["agentreplay"]["entropy"] is True
    with any_store.replay(fork_id) as player:
        assert player.next("llm", "m", {"p": 2}) == "live two"
        assert time.time() == forked_clock


def test_a_run_outliving_its_store_is_still_written(any_store: Store) -> None:
    from agentreplay_core import StoreError

    with any_store.record(name="outlives") as rec:
        rec.record("tool", "t", {}, 1)
        any_store._batched.close(timeout=10)  # type: ignore[union-attr]  # e.g. at exit
        for i in range(20):  # more than nothing drains: must neither block nor be lost
            rec.record("tool", "t", {"i": i}, i)
    assert len(any_store.load_steps(rec.run_id)) == 21
    assert any_store.verify(rec.run_id).ok
    any_store.close()
    with pytest.raises(StoreError, match="closed"), any_store.record():
        pass


def test_match_key_is_the_hash_of_the_canonical_request() -> None:
    import hashlib
    import json

    from agentreplay_core import match_key

    request = {"b": [1, 2.5, "é"], "a": None}
    # canonical JSON written out by hand: sorted keys, no spaces, UTF-8
    expected = hashlib.sha256('["llm","m",{"a":null,"b":[1,2.5,"é"]}]'.encode()).hexdigest()
    assert match_key("llm", "m", request) == expected[:32]
    assert match_key("llm", "m", json.loads(json.dumps(request))) == expected[:32]


def test_replay_blocks_live_network_calls_but_not_the_store(any_store: Store) -> None:
    import socket

    from agentreplay_core import NetworkAccessDuringReplay

    original_connect = socket.socket.connect
    with any_store.record() as rec:
        rec.record("tool", "t", {}, 1)
    with any_store.replay(rec.run_id) as player:
        assert socket.socket.connect is not original_connect
        with pytest.raises(NetworkAccessDuringReplay, match=r"203\.0\.113\.7"):
            socket.create_connection(("203.0.113.7", 443), timeout=1)
        assert player.next("tool", "t", {}) == 1
        # the store itself still answers inside the replay (PostgreSQL over its socket)
        assert any_store.get_run(rec.run_id).run_id == rec.run_id
    with any_store.replay(rec.run_id, network_guard=False) as player:
        player.next("tool", "t", {})
        assert socket.socket.connect is original_connect
    assert socket.socket.connect is original_connect


def test_sequential_replay_of_a_call_with_steps_inside(any_store: Store) -> None:
    with any_store.record(entropy=True) as rec:
        import time

        rec.call("tool", "clock", {}, lambda: time.time())
        rec.record("llm", "m", {"p": 1}, "done")
    with any_store.replay(rec.run_id, match="sequential") as player:
        player.next("tool", "clock", {})
        assert player.next("llm", "m", {"p": 1}) == "done"


def test_an_exception_that_cannot_print_itself_still_propagates(any_store: Store) -> None:
    class Weird(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str for you")

    def fail() -> None:
        raise Weird("boom")

    with any_store.record() as rec, pytest.raises(Weird):
        rec.call("tool", "weird", {}, fail)
    with any_store.replay(rec.run_id) as player, pytest.raises(Exception, match="Weird"):
        player.next("tool", "weird", {})


def test_names_with_nul_characters_record_and_replay(any_store: Store) -> None:
    with any_store.record() as rec:
        rec.record("tool", "odd\x00name", {"a": "b\x00c"}, "ok", path="p\x00q")
    assert any_store.verify(rec.run_id).ok
    with any_store.replay(rec.run_id) as player:
        assert player.next("tool", "odd\x00name", {"a": "b\x00c"}, path="p\x00q") == "ok"


#: a file name decoded with errors="surrogateescape": text with a lone surrogate
ODD = b"report-\xff.csv".decode("utf-8", "surrogateescape")


def test_lone_surrogates_in_names_paths_keys_and_run_labels_lose_nothing(
        any_store: Store) -> None:
    """One step named so made the writer fail and every step of the run was lost, unsealed;
    a run named so was lost and made a healthy database look down."""
    with any_store.record(name=f"run {ODD}", tags=[ODD],
                          metadata={ODD: ODD, "file": ODD}) as rec:
        rec.call("tool", "search", {"q": "a"}, lambda: "good 1")
        rec.call("tool", ODD, {"q": ODD}, lambda: ODD)
        rec.call("tool", "read", {"q": "b"}, lambda: "path", path=f"agent/{ODD}")
        rec.call("tool", "read", {"q": "c"}, lambda: "key", match_key=ODD)
        rec.call("tool", "search", {"q": "d"}, lambda: "good 2")
    assert rec.stats.steps == 5 and rec.stats.internal_errors == rec.stats.lost == 0
    assert any_store.verify(rec.run_id).ok
    run = any_store.get_run(rec.run_id)
    assert run.name == "run report-\\udcff.csv" and ODD not in str(run.metadata.get("tags"))
    assert decode(run.metadata["file"]) == ODD  # a value keeps its text, encoded
    with any_store.replay(rec.run_id) as player:
        assert player.next("tool", "search", {"q": "a"}) == "good 1"
        assert player.next("tool", ODD, {"q": ODD}) == ODD
        assert player.next("tool", "read", {"q": "b"}, path=f"agent/{ODD}") == "path"
        assert player.next("tool", "read", {"q": "c"}, match_key=ODD) == "key"
        assert player.next("tool", "search", {"q": "d"}) == "good 2"


def test_a_match_key_that_is_no_text_is_stored_as_text(any_store: Store) -> None:
    """`match_key=5` was stored as given and checked as text by verify, which then failed
    the untouched run."""
    with any_store.record() as rec:
        rec.call("tool", "t", {}, lambda: 1, match_key=5)  # type: ignore[arg-type]
    assert any_store.verify(rec.run_id).ok
    with any_store.replay(rec.run_id) as player:
        assert player.next("tool", "t", {}, match_key="5") == 1


def test_custom_match_key_is_used_on_both_sides(any_store: Store) -> None:
    from agentreplay_core import match_key, strip_volatile

    request = {"prompt": "hi", "run_id": "abc"}
    key = match_key("llm", "m", strip_volatile(request))
    with any_store.record() as rec:
        rec.record("llm", "m", request, "hello", match_key=key)
    replay_request = {"prompt": "hi", "run_id": "xyz"}  # a new framework run id
    with any_store.replay(rec.run_id) as player:
        with pytest.raises(ReplayDivergence, match="match key"):
            player.next("llm", "m", {"prompt": "hi", "run_id": "abc"})
        again = match_key("llm", "m", strip_volatile(replay_request))
        assert player.next("llm", "m", replay_request, match_key=again) == "hello"


def test_divergence_report_survives_an_unreadable_pending_step(any_store: Store) -> None:
    class Opaque:
        pass

    with any_store.record() as rec:
        rec.record("tool", "opaque", {"o": Opaque()}, 1)
        rec.record("tool", "t", {"x": 1}, 2)
    with any_store.replay(rec.run_id, allow_unused=True) as player, \
            pytest.raises(ReplayDivergence) as caught:
        player.next("tool", "t", {"x": 2})
    assert caught.value.classification == "tool_args_changed"


def test_a_cancelled_call_is_recorded_so_replay_stays_aligned(any_store: Store) -> None:
    async def slow() -> str:
        await asyncio.sleep(5)
        return "slow"

    async def fast() -> str:
        return "fast"

    async def agent(rec_or_none: object) -> None:
        rec = rec_or_none
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(rec.acall("tool", "fetch", {}, slow), 0.05)  # type: ignore[attr-defined]
        assert await rec.acall("tool", "fetch", {}, fast) == "fast"  # type: ignore[attr-defined]

    with any_store.record() as rec:
        asyncio.run(agent(rec))
    steps = any_store.load_steps(rec.run_id)
    assert [(s.name, s.is_error) for s in steps] == [("fetch", True), ("fetch", False)]

    async def replayed_agent(player: Player) -> str:
        # the agent's own timeout-and-retry logic runs unchanged
        try:
            return str(await asyncio.wait_for(player.anext("tool", "fetch", {}), 0.05))
        except asyncio.TimeoutError:
            return str(await player.anext("tool", "fetch", {}))

    with any_store.replay(rec.run_id, match="sequential") as player:
        assert asyncio.run(replayed_agent(player)) == "fast"
    with any_store.replay(rec.run_id, allow_unused=True) as player, \
            pytest.raises(ReplayedCancellation, match="anext"):
        player.next("tool", "fetch", {})


def test_fork_serves_recorded_calls_without_live_and_keeps_them(any_store: Store) -> None:
    with any_store.record(name="agent") as rec:
        rec.record("llm", "m", {"p": 1}, "one")
        rec.record("tool", "t", {"q": 1}, "tool one")
    with any_store.replay(rec.run_id, on_divergence="live") as player:
        assert player.next("llm", "m", {"p": 9}, live=lambda: "live nine") == "live nine"
        assert player.next("tool", "t", {"q": 1}) == "tool one"  # no live=: from the recording
        assert player.fork is not None
        fork_id = player.fork.run_id
    with any_store.replay(fork_id) as again:
        assert again.next("llm", "m", {"p": 9}) == "live nine"
        assert again.next("tool", "t", {"q": 1}) == "tool one"
