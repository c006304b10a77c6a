"""A step whose canonical JSON the screen calls clean is one that redaction leaves unchanged.

`Redactor.may_hold_secrets` lets the recorder skip walking a step's trees. It may raise false
alarms, never miss: whenever `redact_trees` would change a tree, the screen must say "maybe".
The walk is the reference here; the trees come from secrets, field names, tagged values and
the characters where bytes, JSON escapes and case-folding part ways.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay_core import RedactionRule, Redactor, canonical_bytes, encode, open_store
from agentreplay_core._redact_fast import Compiled
from agentreplay_core._redact_json import FOLDS_TO_ASCII, JsonScreen, json_screen
from tests.core.test_redaction_screen import PIECES, _FailingDatabase
from tests.support.secret_leaks import FakeSecret, fake_secrets

CI = settings(derandomize=True, database=None, deadline=None, max_examples=500,
              suppress_health_check=[HealthCheck.too_slow])
KEY = b"json-screen-test-key"

#: dict keys: ordinary, secret fields of the default rules and of `fields=`, keys that match
#: them only case-insensitively across Unicode, and keys holding a secret themselves
KEYS = ["role", "content", "usage", "API_KEY", "my-Password", "x-acme-token", "X-ACME-TOKEN",
        "api_\u212aey", "\u0130d_token", "pa\u017f\u017fword", "note", "",
        "sk-proj-" + "A" * 30, 'quote"d', "back\\slash", "tab\tkey"]
LEAVES: st.SearchStrategy[Any] = (
    st.sampled_from(PIECES) | st.text(max_size=20) | st.integers() | st.none()
    | st.binary(max_size=40).map(lambda b: b + b"password: hunter2hunter2")
    | st.sampled_from(PIECES).map(lambda p: (p, 1))
    | st.sampled_from(PIECES).map(lambda p: p.encode("utf-8", "surrogatepass"))
    | st.lists(st.sampled_from(PIECES), max_size=3).map(" \x00 ".join))
TREES: st.SearchStrategy[Any] = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4), max_leaves=10)


#: a keyword rule whose word no default rule covers (the default field rule's words are
#: also the default keyword rule's)
PIN = RedactionRule("pin", pattern=r"(?i:pin)[\"']?\s*[:=]\s*(?P<secret>[0-9]{6,})",
                    needles=(":", "="), keywords=("pin",))


def _redactor() -> Redactor:
    redactor = Redactor(key=KEY, fields=["x-acme-token"], rules=[
        RedactionRule("ticket", pattern=r"TCK-[0-9]{8}", needles=("TCK-",)), PIN])
    assert redactor.may_hold_secrets(b"{}") is False, "no JSON screen: is Hyperscan installed?"
    return redactor


def _changed_by_walk(redactor: Redactor, *values: Any) -> bool:
    trees = [encode(v) for v in values]
    return any(redactor.redact_trees(trees)[1])


@CI
@given(TREES, TREES)
def test_whatever_redaction_would_change_the_screen_flags(request: Any, response: Any) -> None:
    redactor = _redactor()
    flagged = redactor.may_hold_secrets(canonical_bytes(encode(request)),
                                        canonical_bytes(encode(response)))
    assert flagged or not _changed_by_walk(redactor, request, response)


@pytest.mark.parametrize("fake", fake_secrets(), ids=lambda f: f.kind)
def test_each_kind_of_secret_is_flagged_wherever_it_sits(fake: FakeSecret) -> None:
    redactor = _redactor()
    for value in ({"content": fake.in_text}, [fake.in_text, 1], {"b": fake.in_text.encode()},
                  {"t": (fake.in_text,)}, {"line": f'say "{fake.in_text}"\n\tplease'}):
        assert _changed_by_walk(redactor, value), value
        assert redactor.may_hold_secrets(canonical_bytes(encode(value))), value


@pytest.mark.parametrize("value", [
    {"API_KEY": "not-a-shaped-secret"},
    {"x-acme-token": "v"},                      # a `fields=` name
    {"api_\u212aey": "v"},                      # matches api_key case-insensitively in `re`
    {"note": "password\u3000=\u00a0hunter2hunter2"},
    {"note": 'the "secret"\t: hunter2hunter2'},  # an escaped quote and tab before the `:`
    {"note": 'the "PIN"\t: 12345678'},
    {"note": "pin\u3000=\u00a012345678"},
    {"note": "pin\x1c: 12345678"},
    {"note": "API_\u212aEY = hunter2hunter2"},   # lower-cases to "api_key = "
    {"note": "postgresql://agent:pw\\\\x@db"},  # a backslash (escaped in JSON) in the password
    {"note": "password\\t: hunter2hunter2"},   # JSON text: an escaped tab before the `:`
    {"note": "x-acme-token\\r\\n= hunter2hunter2"},
])
def test_contexts_where_json_and_text_differ_are_flagged(value: dict[str, str]) -> None:
    redactor = _redactor()
    assert _changed_by_walk(redactor, value)
    assert redactor.may_hold_secrets(canonical_bytes(encode(value)))


def test_ordinary_steps_are_passed_without_a_walk() -> None:
    """The point of the screen: a chat step of prose with no secret is not flagged."""
    redactor = _redactor()
    request = {"model": "gpt-4o-mini", "messages": [
        {"role": "system", "content": "You answer questions about the weather."},
        {"role": "user", "content": "Will it rain in Paris tomorrow? Mail me at a@b.example"}]}
    response = {"role": "assistant", "content": "Probably not: see https://weather.example.",
                "usage": {"input_tokens": 40, "output_tokens": 9}, "ids": (1, 2)}
    assert not _changed_by_walk(redactor, request, response)
    assert not redactor.may_hold_secrets(canonical_bytes(encode(request)),
                                         canonical_bytes(encode(response)))


def test_rules_the_screen_cannot_stand_in_for_make_it_flag_everything() -> None:
    """A pattern without needles or keywords, or a field regex whose meaning on bytes differs
    (`\\w` is Unicode in `re`), leaves every step to the walk."""
    for redactor in (Redactor(key=KEY, patterns=[r"ticket-\d+"]),
                     Redactor(key=KEY, rules=[RedactionRule("f", fields=r"\w+_secret")]),
                     Redactor(key=KEY, rules=[RedactionRule("v", fields=r"(?x) pass word")])):
        assert json_screen(redactor.rules) is None
        assert redactor.may_hold_secrets(b'{"content":"hello"}')


def test_a_failing_scan_flags_the_step() -> None:
    assert JsonScreen(Compiled(_FailingDatabase())).may_hold_secrets([b'{"a":"b"}']) is True


def test_the_case_folding_facts_the_screen_relies_on_hold_for_this_python() -> None:
    """FOLDS_TO_ASCII holds every character other than ASCII that `str.lower` maps to ASCII
    or that case-insensitive `re` matches to an ASCII letter."""
    letter = re.compile("[a-z]", re.IGNORECASE)
    folds = [chr(c) for c in range(0x80, sys.maxunicode + 1)
             if any(x.isascii() for x in chr(c).lower()) or letter.fullmatch(chr(c))]
    assert tuple(folds) == FOLDS_TO_ASCII


def test_recorded_steps_lose_their_secrets_whether_screened_or_walked(tmp_path: Path) -> None:
    """Small steps are screened from their JSON; large ones (mostly history the redactor has
    seen) are walked: both store their secrets as placeholders and the rest as it was."""
    fake = fake_secrets()[0]
    small: dict[str, Any] = {"content": f"note {fake.in_text}"}
    large: dict[str, Any] = {"history": ["earlier turn " * 40] * 60,
                             "content": f"note {fake.in_text}"}
    clean: dict[str, Any] = {"content": "nothing to hide " * 10}
    assert len(canonical_bytes(encode(large))) > 16_384 > len(canonical_bytes(encode(small)))
    with open_store(f"file:{tmp_path / 'runs'}") as store:
        store.redaction = Redactor(key=KEY)
        with store.record(name="secrets") as rec:
            for value in (small, large, clean):
                rec.record("llm", "chat", value, value)
        steps = store.load_steps(rec.run_id)
    for step, value in zip(steps, (small, large, clean), strict=True):
        for stored in (step.input, step.output):
            assert fake.marker not in repr(stored)
            assert stored["content"] == value["content"].replace(
                fake.value, Redactor(key=KEY).placeholder(fake.value, "openai"))
    assert steps[1].input["history"] == large["history"]
