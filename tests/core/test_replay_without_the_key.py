"""A run replays on a machine without the redaction key it was recorded with (a laptop, CI)
when the replay lets placeholders match any text (`check_secrets=False`, or
`AGENTREPLAY_CHECK_SECRETS=0`): the rest of each request is still compared."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

import pytest

from agentreplay_core import Redactor, ReplayDivergence

PRODUCTION = Redactor(key=b"production's redaction key")
LAPTOP = Redactor(key=b"a laptop's own key")
TOKEN, PASSWORD = "Bearer prod-token-0123456789", "hunter2hunter2"
#: what the same agent sends on the laptop: its own token, the text around it the same
LAPTOP_PROMPT = {"headers": {"authorization": "Bearer laptop-token-9876543210"},
                 "prompt": "connect with password=laptop-pass-42 now"}


def _recorded(stores: Any) -> UUID:
    with stores(PRODUCTION).record() as rec:
        rec.record("llm", "m", {"headers": {"authorization": TOKEN},
                                "prompt": f"connect with password={PASSWORD} now"}, "hi")
        rec.record("tool", "t", {"q": "plain"}, "ok")
    run_id: UUID = rec.run_id
    return run_id


def test_placeholders_match_any_text_when_secrets_are_not_checked(
        stores: Any, caplog: pytest.LogCaptureFixture) -> None:
    run_id = _recorded(stores)
    with caplog.at_level(logging.WARNING, logger="agentreplay"), \
            stores(LAPTOP).replay(run_id, check_secrets=False) as player:
        assert player.next("llm", "m", LAPTOP_PROMPT) == "hi"
        assert player.next("tool", "t", {"q": "plain"}) == "ok"
    [warning] = [r.getMessage() for r in caplog.records if "unchecked" in r.getMessage()]
    assert f"run {run_id}" in warning and "step 1" in warning
    assert "laptop-token" not in caplog.text and "laptop-pass" not in caplog.text


def test_checked_by_default_and_the_divergence_says_how_to_replay_without_the_key(
        stores: Any) -> None:
    run_id = _recorded(stores)
    with pytest.raises(ReplayDivergence) as err, stores(LAPTOP).replay(run_id) as player:
        player.next("llm", "m", LAPTOP_PROMPT)
    message = str(err.value)
    assert "but for its secrets" in message and "check_secrets=False" in message
    assert "laptop-token" not in message and "laptop-pass" not in message


@pytest.mark.parametrize("changed", [
    {**LAPTOP_PROMPT, "prompt": "connect with password=laptop-pass-42 later"},
    {**LAPTOP_PROMPT, "prompt": "connect with pass=laptop-pass-42 now"},
    {"headers": {"authorization": 12345678}, "prompt": LAPTOP_PROMPT["prompt"]},
    {**LAPTOP_PROMPT, "extra": None},
])
def test_the_rest_of_the_request_is_still_compared(stores: Any, changed: Any) -> None:
    run_id = _recorded(stores)
    with pytest.raises(ReplayDivergence) as err, \
            stores(LAPTOP).replay(run_id, check_secrets=False) as player:
        player.next("llm", "m", changed)
    assert "step 1" in str(err.value) or "llm 'm'" in str(err.value)


def test_a_request_whose_secret_checks_out_is_preferred(stores: Any) -> None:
    # Recorded where a field name was known that this replay's rules lack, so neither request
    # finds its key and both are compared as sent: the second one's secret is the first
    # step's under the same key, which wins over the first step, equal but for its secret.
    recording = Redactor(key=b"k", fields=["x-session"])
    with stores(recording).record() as rec:
        rec.record("tool", "t", {"x-session": "session-value-a"}, "a")
        rec.record("tool", "t", {"x-session": "session-value-b"}, "b")
    with stores(Redactor(key=b"k")).replay(rec.run_id, check_secrets=False) as player:
        assert player.next("tool", "t", {"x-session": "session-value-b"}) == "b"
        assert player.next("tool", "t", {"x-session": "session-value-a"}) == "a"


def test_sequential_replay_takes_the_step_expected_next(stores: Any) -> None:
    run_id = _recorded(stores)
    with stores(LAPTOP).replay(run_id, check_secrets=False, match="sequential") as player:
        assert player.next("llm", "m", LAPTOP_PROMPT) == "hi"
        assert player.next("tool", "t", {"q": "plain"}) == "ok"


def test_a_store_without_redaction_matches_placeholders_unchecked_too(stores: Any) -> None:
    run_id = _recorded(stores)
    with pytest.raises(ReplayDivergence), stores(None).replay(run_id) as player:
        player.next("llm", "m", LAPTOP_PROMPT)
    with stores(None).replay(run_id, check_secrets=False) as player:
        assert player.next("llm", "m", LAPTOP_PROMPT) == "hi"
        assert player.next("tool", "t", {"q": "plain"}) == "ok"


def test_the_environment_turns_the_check_off_unless_the_code_says(
        stores: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = _recorded(stores)
    monkeypatch.setenv("AGENTREPLAY_CHECK_SECRETS", " Off ")
    with stores(LAPTOP).replay(run_id) as player:
        assert player.next("llm", "m", LAPTOP_PROMPT) == "hi"
        assert player.next("tool", "t", {"q": "plain"}) == "ok"
    with pytest.raises(ReplayDivergence), \
            stores(LAPTOP).replay(run_id, check_secrets=True) as player:
        player.next("llm", "m", LAPTOP_PROMPT)
    monkeypatch.setenv("AGENTREPLAY_CHECK_SECRETS", "1")
    with pytest.raises(ReplayDivergence), stores(LAPTOP).replay(run_id) as player:
        player.next("llm", "m", LAPTOP_PROMPT)


def test_an_unreadable_environment_value_is_explained(
        stores: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = _recorded(stores)
    monkeypatch.setenv("AGENTREPLAY_CHECK_SECRETS", "sometimes")
    with pytest.raises(ValueError, match=r"AGENTREPLAY_CHECK_SECRETS='sometimes': use 1"), \
            stores(LAPTOP).replay(run_id):
        pass
