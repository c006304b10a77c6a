"""An object or array written in text after a secret's name (`"credentials": {...}` in JSON a
tool returned, a dict's repr in a log line) loses its strings, as a dict's secret field does,
whatever the inner keys are called: before, the text rules read the bracket as no value and
kept them in clear."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_core import Redactor
from agentreplay_core._redact_rules import PLACEHOLDER
from tests.support.redaction_rules import first_word_rules

KEY = b"containers-test-key"
CI = settings(derandomize=True, database=None, deadline=None, max_examples=150)

_TEXTS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
#: what a secret field can hold: strings (any, quotes and backslashes too), numbers, nesting
_HELD = st.recursive(
    _TEXTS | st.integers(-5, 10**6) | st.booleans() | st.none(),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["user", "pass", "note", "a b", 'q"k']), inner,
                      max_size=3),
    max_leaves=8,
)
_CONTAINERS = st.lists(_HELD, max_size=3) | st.dictionaries(
    st.sampled_from(["user", "pass", "region"]), _HELD, min_size=1, max_size=3)
_NAMES = st.sampled_from(["credentials", "password", "api_key", "Authorization", "secret",
                          "access_token"])


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _without_strings(value: Any) -> Any:
    """`value` with every string value (not key) made one mark: what redaction may change."""
    if isinstance(value, str):
        return "*"
    if isinstance(value, dict):
        return {k: _without_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_strings(v) for v in value]
    return value


def _check(held: Any, back: Any) -> None:
    """`back` is `held` with each non-empty string a placeholder, and nothing else changed."""
    assert _without_strings(back) == _without_strings(held)
    for before, after in zip(_strings(held), _strings(back), strict=True):
        assert after == before if before == "" else PLACEHOLDER.fullmatch(after), (before, after)


@CI
@given(_NAMES, _CONTAINERS, st.booleans(), st.sampled_from([None, 2]))
def test_json_text_loses_every_string_under_a_secret_name(name: str, held: Any, ascii_only: bool,
                                                           indent: int | None) -> None:
    redactor = Redactor(key=KEY)
    text = json.dumps({"id": 7, name: held, "city": "Paris"}, ensure_ascii=ascii_only,
                      indent=indent)
    out = redactor.redact_text(text)
    back = json.loads(out)
    assert back["id"] == 7 and back["city"] == "Paris"
    _check(held, back[name])
    assert redactor.redact_text(out) == out  # idempotent: placeholders are left alone


@CI
@given(_NAMES, _CONTAINERS, st.integers(1, 2))
def test_json_text_inside_json_text_loses_them_too(name: str, held: Any, levels: int) -> None:
    text = json.dumps({name: held, "city": "Paris"})
    for _ in range(levels):  # a tool's JSON result holding JSON, as json.dumps writes it
        text = json.dumps({"result": text})
    out = Redactor(key=KEY).redact_text(text)
    back = out
    for _ in range(levels):
        back = json.loads(back)["result"]
    back = json.loads(back)
    assert back["city"] == "Paris"
    _check(held, back[name])


@CI
@given(_NAMES, _CONTAINERS)
def test_a_python_repr_loses_them(name: str, held: Any) -> None:
    # str(dict): a log line, or a LangChain tool's result that was a dict
    out = Redactor(key=KEY).redact_text(f"result: {({name: held, 'city': 'Paris'})}")
    back = ast.literal_eval(out.removeprefix("result: "))
    assert back["city"] == "Paris"
    _check(held, back[name])


def test_the_placeholder_is_the_one_a_dict_field_gets() -> None:
    # the same digest as under the field in a dict (the rule's name differs, as for a
    # quoted value after `"password": `): a secret keeps one identity across forms
    redactor = Redactor(key=KEY)
    as_dict = redactor.redact({"credentials": {"user": "svc-reporting", "pin": "4411"}})
    as_text = json.loads(redactor.redact_text(
        json.dumps({"credentials": {"user": "svc-reporting", "pin": "4411"}})))
    for inner in ("user", "pin"):
        digests = [PLACEHOLDER.fullmatch(tree["credentials"][inner])
                   for tree in (as_dict, as_text)]
        assert digests[0] and digests[1] and digests[0].group(2) == digests[1].group(2)


@pytest.mark.parametrize("text", [
    'credentials: {"user": "svc", "pass": "unterminated',
    '{"api_key": ["k-1", "k-2"',
])
def test_a_text_cut_inside_the_object_keeps_its_secrets(text: str) -> None:
    out = Redactor(key=KEY).redact_text(text)
    for clear in ("svc", "unterminated", "k-1", "k-2"):
        assert clear not in out


def test_the_object_ends_at_its_closing_bracket() -> None:
    redactor = Redactor(key=KEY)
    for text in ('{"credentials": {}, "user": "bob", "list": ["a", "b"]}',
                 '{"credentials": [], "password_policy": "12 characters"}'):
        assert redactor.redact_text(text) == text
    prose = redactor.redact_text('the secret: [see "notes" below] is "out" of scope')
    assert "notes" not in prose and prose.endswith('] is "out" of scope')
    # an apostrophe no other closes opens no string (which would run to the end of the text)
    prose = "the password: [it's in the vault, ask Sam] and that is all"
    assert redactor.redact_text(prose) == prose


def test_a_request_recorded_before_the_rule_replays_under_it(stores: Any) -> None:
    # recorded by rules that left the object in clear; the defaults redact it now: the
    # request is still the recorded one
    request = {"messages": [{"role": "tool", "content": json.dumps(
        {"credentials": {"user": "svc", "pass": "hunter2-but-longer"}})}]}
    with stores(first_word_rules(KEY)).record() as rec:
        rec.record("llm", "m", request, "ok")
    (step,) = stores(first_word_rules(KEY)).load_steps(rec.run_id)
    assert "hunter2-but-longer" in step.input["messages"][0]["content"]
    with stores(Redactor(key=KEY)).replay(rec.run_id) as player:
        assert player.next("llm", "m", request) == "ok"


def test_an_object_under_a_custom_field_gets_the_dicts_placeholders() -> None:
    redactor = Redactor(key=KEY, fields=["x-acme-session"])
    held = {"x-acme-session": {"id": "s-8841", "scopes": ["read", "write"]}, "z": "kept"}
    assert json.loads(redactor.redact_text(json.dumps(held))) == redactor.redact(held)


def test_names_nested_in_a_scanned_object_are_not_scanned_again() -> None:
    # each nested name used to scan to the end of its own object: quadratic in the depth
    # (12 KB took 1.2 s; benchmarks, not this test, time it). What it finds stays the same.
    depth = 300
    text = '{"secret": {"note": "n", "secret": ' * depth + '"x1"' + "}}" * depth
    out = Redactor(key=KEY).redact_text(text)
    assert len(PLACEHOLDER.findall(out)) == depth + 1 and out.count('"note": "<secret:') == depth
    assert PLACEHOLDER.sub("", out) == text.replace('"n"', '""').replace('"x1"', '""')
