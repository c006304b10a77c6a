"""Many steps screened for secrets in one scan decide each step as its own scan would, or
leave it undecided; never call a step clean that its own screen would flag.

The batch screen exists because every Hyperscan scan releases the GIL, and the agent's thread,
which takes it meanwhile, then loses it again to the writer: a switch of threads per step.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentreplay_core import Redactor, Store, canonical_bytes, encode
from agentreplay_core._redact_fast import Compiled
from agentreplay_core._redact_json import _MOST_ALARMS, JsonScreen, json_screen
from tests.core.test_redaction_json_screen import CI, KEY, TREES, _changed_by_walk, _redactor
from tests.core.test_redaction_screen import _FailingDatabase
from tests.support.secret_leaks import fake_secrets

CLEAN = {"role": "user", "content": "Will it rain in Paris tomorrow?"}


def _piece(request: Any, response: Any) -> bytes:
    """What the recorder screens of a step: its canonical input and output."""
    return canonical_bytes(encode(request)) + b" " + canonical_bytes(encode(response))


@CI
@given(st.lists(st.tuples(TREES, TREES), min_size=1, max_size=8))
def test_a_step_the_batch_calls_clean_is_clean_alone_and_to_the_walk(
        steps: list[tuple[Any, Any]]) -> None:
    redactor = _redactor()
    pieces = [_piece(request, response) for request, response in steps]
    verdicts = redactor.screen_each(pieces)
    assert verdicts is not None and len(verdicts) == len(steps)
    for (request, response), piece, verdict in zip(steps, pieces, verdicts, strict=True):
        if verdict is False:
            assert not redactor.may_hold_secrets(piece)
            assert not _changed_by_walk(redactor, request, response)
        elif verdict is None:
            raise AssertionError("fewer alarms than the limit leave no step undecided")


def test_the_same_secret_in_several_steps_flags_each_of_them() -> None:
    """The step screen reports each pattern once (single-match); a batch must not let one
    step's match hide a later step's."""
    redactor = _redactor()
    for fake in fake_secrets():
        secret = _piece({"content": fake.in_text}, CLEAN)
        clean = _piece(CLEAN, CLEAN)
        assert redactor.screen_each([secret, clean, secret, clean, secret]) == [
            True, False, True, False, True], fake.kind


def test_after_too_many_alarms_the_rest_is_left_undecided_never_clean() -> None:
    redactor = _redactor()
    secret = _piece({"api_key": "sk-" + "A" * 40}, CLEAN)
    clean = _piece(CLEAN, CLEAN)
    pieces = [secret, clean] * (2 * _MOST_ALARMS)
    verdicts = redactor.screen_each(pieces)
    assert verdicts is not None
    assert all(v is not False for p, v in zip(pieces, verdicts, strict=True) if p is secret)
    assert verdicts.count(True) >= _MOST_ALARMS
    assert None in verdicts  # the scan stopped: what it did not reach is for the step screen


def test_a_failing_scan_decides_nothing() -> None:
    patterns = [(b"secret", 0)]
    screen = JsonScreen(Compiled(_FailingDatabase()), patterns)
    screen._every = Compiled(_FailingDatabase())
    assert screen.screen_each([b'{"a":"b"}', b'{"c":"d"}']) == [None, None]


def test_no_screen_or_a_screen_of_its_own_leaves_the_steps_to_may_hold_secrets() -> None:
    unscreenable = Redactor(key=KEY, patterns=[r"ticket-\d+"])  # no needles: no JSON screen
    assert json_screen(unscreenable.rules) is None
    assert unscreenable.screen_each([b"{}", b"{}"]) is None

    class Stricter(Redactor):
        def may_hold_secrets(self, *canonical: bytes) -> bool:
            return True

    assert Stricter(key=KEY).screen_each([b"{}", b"{}"]) is None


class _CountingRedactor(Redactor):
    """A real redactor that notes the batches it screened (sizes) and on which thread."""

    def __init__(self) -> None:
        super().__init__(key=b"k" * 32)
        self.batches: list[tuple[int, str]] = []

    def screen_each(self, pieces: Sequence[bytes]) -> list[bool | None] | None:
        self.batches.append((len(pieces), threading.current_thread().name))
        return super().screen_each(pieces)


def test_a_burst_of_steps_is_screened_in_one_scan_and_redacted_as_alone(
        pg_store: Store) -> None:
    counting = _CountingRedactor()
    pg_store.redaction = counting
    secrets = {i: fake for i, fake in zip(range(3, 40, 7), fake_secrets(), strict=False)}
    with pg_store.record(name="burst") as rec:
        writer = pg_store._batched
        assert writer is not None
        writer.linger = 30.0  # the burst waits for the flush: one batch, whatever the load
        for i in range(40):
            fake = secrets.get(i)
            rec.record("llm", "chat", {"i": i, "content": fake.in_text if fake else "hello"},
                       {"content": f"answer {i}", "big": "x" * (20_000 if i == 11 else 10)})
        assert rec.flush()
    # the step of 20 KB is walked without a screen; the other 39 are screened together
    assert counting.batches == [(39, "agentreplay-writer")]
    steps = pg_store.load_steps(rec.run_id)
    for step in steps:
        fake = secrets.get(step.input["i"])
        if fake is None:
            assert step.input["content"] == "hello"
        else:
            assert fake.marker not in str(step.input) and "<secret:" in str(step.input)
    assert pg_store.verify(rec.run_id).ok


@pytest.mark.parametrize("durability", ["batched", "sync"])
def test_steps_recorded_one_at_a_time_are_screened_alone(any_store: Store,
                                                          durability: str) -> None:
    counting = _CountingRedactor()
    any_store.redaction = counting
    with any_store.record(name="one by one", durability=durability) as rec:
        for i in range(3):
            rec.record("tool", "t", {"i": i}, {"token": "sk-" + "b" * 40})
            assert rec.flush()
    assert counting.batches == []
    assert all("sk-" not in str(s.output) for s in any_store.load_steps(rec.run_id))
