"""A `RedactionRule(fields=regex)` of a user's finds its fields in text too: a tool's JSON
result or a header dump holds the same data as the dict it would redact, under a name the
regex finds something in (searched as in a dict key: anchors are the name's ends)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay_core import RedactionRule, Redactor
from tests.support.placeholders import documented_placeholder
from tests.support.text_forms import json_nested, read_nested

KEY = b"field-regex-text-key"
REF = "ord-7f3a9c2e1b"
ANCHORED = RedactionRule("acme", fields=r"^acme-.*-ref$")
CI = settings(derandomize=True, database=None, deadline=None, max_examples=150,
              suppress_health_check=[HealthCheck.too_slow])


def placeholder(secret: str, rule: str = "acme") -> str:
    """The documented placeholder, computed from its definition."""
    return documented_placeholder(KEY, secret, rule)


def redactor(*rules: RedactionRule) -> Redactor:
    return Redactor(key=KEY, rules=list(rules or (ANCHORED,)), defaults=False)


def test_json_text_gets_the_placeholders_the_dict_gets() -> None:
    value = {"acme-order-ref": REF, "acme-user-ref": {"id": "u-0042-xyz", "n": 7},
             "note": "plain", "my-acme-order-ref": "stays-as-it-is"}
    as_dict = redactor().redact(value)
    assert as_dict["acme-order-ref"] == placeholder(REF)
    assert as_dict["acme-user-ref"] == {"id": placeholder("u-0042-xyz"), "n": 7}
    assert as_dict["my-acme-order-ref"] == "stays-as-it-is"  # `^`: the name's start
    for text in (json.dumps(value), json.dumps(value, indent=2), json.dumps(json.dumps(value))):
        assert redactor().redact(text) == text.replace(REF, placeholder(REF)).replace(
            "u-0042-xyz", placeholder("u-0042-xyz"))


@pytest.mark.parametrize(("text", "secret"), [
    (f"Acme-Order-Ref: {REF}\r\nAccept: */*", REF),  # a header dump, any case
    (f"acme-order-ref={REF}&page=2", f"{REF}&page=2"),  # unquoted: up to a space
    ("acme-order-ref: 'a reference of words'", "a reference of words"),  # quoted: whole
    (f'{{"note": "see acme-order-ref={REF} here"}}', REF),  # in another name's value
    (f"{{'acme-order-ref': '{REF}'}}", REF),  # a dict's repr in a log line
])
def test_a_name_the_regex_finds_is_redacted_in_text(text: str, secret: str) -> None:
    assert redactor().redact(text) == text.replace(secret, placeholder(secret))


@pytest.mark.parametrize("text", [
    f"my-acme-order-ref: {REF}",  # the regex's `^` is the name's start
    f"acme-order-ref-id: {REF}",  # ... and its `$` the name's end
    "acme-order-ref: short",  # too short to be a secret, as for `password=`
    "the acme-order-ref header names the order",
])
def test_other_names_and_prose_are_left_alone(text: str) -> None:
    assert redactor().redact(text) is text


def test_a_regex_with_flags_or_anchors_is_applied_to_the_name_alone() -> None:
    # anchors at a regex's ends are dropped to screen a whole text with it; nothing can be
    # made of a verbose regex or a `\b` (kept out of screens): each name is checked alone
    verbose = RedactionRule("acme", fields=re.compile(r"acme - \w+ - ref \Z", re.VERBOSE))
    for rule in (verbose, ANCHORED, RedactionRule("acme", fields=r"\bacme-\w+-ref\b")):
        text = f'{{"acme-order-ref": "{REF}", "acme-order-refs": "{REF}x"}}'
        redacted = redactor(rule).redact(text)
        assert redacted.startswith(f'{{"acme-order-ref": "{placeholder(REF)}"'), rule
        assert f'"acme-order-refs": "{REF}x"' in redacted or rule.fields == \
            r"\bacme-\w+-ref\b"


def test_rules_with_the_same_label_keep_their_own_names() -> None:
    both = redactor(RedactionRule("acme", fields=r"^acme-order-ref$"),
                    RedactionRule("acme", fields=r"^acme-user-ref$"))
    text = f"acme-order-ref={REF} acme-user-ref={REF}2 acme-team-ref={REF}3"
    assert both.redact(text) == (f"acme-order-ref={placeholder(REF)} "
                                 f"acme-user-ref={placeholder(REF + '2')} "
                                 f"acme-team-ref={REF}3")


_NAMES = st.builds(lambda parts: "-".join(parts), st.lists(
    st.sampled_from(["acme", "order", "ref", "Acme", "x", "user", "REF", "id"]),
    min_size=1, max_size=4))
_REGEXES = st.sampled_from([r"^acme-.*-ref$", r"order", r"ref\Z", r"^x-", r"acme-(order|user)",
                            r"id$", r"(?i:USER)-ref"])


@CI
@given(st.dictionaries(_NAMES, st.one_of(
    st.just("s3cr3t-v4lue"), st.integers(),
    st.dictionaries(st.sampled_from(["a", "b"]), st.just("inner-s3cr3t"), max_size=2)),
    min_size=1, max_size=4), _REGEXES, st.sampled_from([None, 2]))
def test_json_text_and_the_dict_redact_the_same_strings(value: dict[str, Any], regex: str,
                                                        indent: int | None) -> None:
    # the dict walk is the reference: the text form finds the fields it finds, no others
    rule = redactor(RedactionRule("acme", fields=regex))
    text = json.dumps(value, indent=indent)
    assert json.loads(rule.redact(text)) == rule.redact(value)


def test_a_recorded_step_holds_no_such_field_in_clear(stores: Any) -> None:
    # the recorder screens a step from its canonical JSON first: the text form must reach it
    result = json.dumps({"acme-user-ref": "u-0042-xyz", "config": json.dumps({
        "acme-team-ref": "team-secret-99"}), "n": 5})
    with stores(redactor()).record(name="field regex") as rec:
        rec.record("tool", "lookup", {"acme-order-ref": REF, "q": 1}, result)
        rec.record("tool", "headers", {"q": 2}, "Acme-Order-Ref: ord-0000-aaaa\nAccept: */*")
    first, second = stores(redactor()).load_steps(rec.run_id)
    assert first.input == {"acme-order-ref": placeholder(REF), "q": 1}
    output = json.loads(first.output)
    assert output["acme-user-ref"] == placeholder("u-0042-xyz") and output["n"] == 5
    assert json.loads(output["config"]) == {"acme-team-ref": placeholder("team-secret-99")}
    assert second.output == f"Acme-Order-Ref: {placeholder('ord-0000-aaaa')}\nAccept: */*"


def test_a_value_that_is_none_hides_no_name_after_it() -> None:
    # `acme-order-ref='` closing its string seemed to open a value running over the next
    # name to an apostrophe in its value; the search went on after that "value", and the
    # next name's object was kept in clear
    value = {"note": ["acme-order-ref='"], "acme-x-ref": {"": ["it's-ord-7f3a"]}}
    redacted = json.loads(redactor().redact(json.dumps(value)))
    assert redacted == {"note": ["acme-order-ref='"],
                        "acme-x-ref": {"": [placeholder("it's-ord-7f3a")]}}


#: a field regex for names that are not ASCII, which JSON text escapes (`json.dumps` does by
#: default): `\u00f1`, a level down `\\u00f1`
OWN = RedactionRule("acme", fields=r"^(?:acme-.*-ref|contraseña|пароль)$")


@pytest.mark.parametrize("name", ["contraseña", "CONTRASEÑA", "Пароль", "acme-señal-ref"])
@pytest.mark.parametrize("levels", [0, 1])
def test_a_name_json_escapes_is_read_unescaped(name: str, levels: int) -> None:
    value = {name: REF, "contraseñas": "kept-as-it-is"}
    text = json_nested(value, levels)
    assert "\\u" in text
    redacted = redactor(OWN).redact(text)
    assert read_nested(redacted, levels) == redactor(OWN).redact(value) == {
        name: placeholder(REF), "contraseñas": "kept-as-it-is"}


@pytest.mark.parametrize("before", ["Host: a\n", "a\r\n", "\t", "\u2014", "«"])
@pytest.mark.parametrize("levels", [0, 1])
def test_a_name_after_an_escape_in_json_text_is_found(before: str, levels: int) -> None:
    # `\n` in JSON text is a backslash and an `n` (a level down, two and an `n`): the name
    # after it is no word's end there, as it is not in the string itself
    for name in ("Acme-Order-Ref", "contraseña"):
        line = f"{before}{name}: {REF}"
        redacted = redactor(OWN).redact(json_nested({"headers": line}, levels))
        assert read_nested(redacted, levels)["headers"] == redactor(OWN).redact(line) \
            == f"{before}{name}: {placeholder(REF)}"


def test_a_name_joined_to_a_word_behind_an_escape_is_another_name() -> None:
    line = f"\u00e9acme-order-ref: {REF} \u00f1contraseña: {REF}"  # `éacme-order-ref`
    assert redactor(OWN).redact(line) == line
    assert redactor(OWN).redact(json.dumps({"h": line})) == json.dumps({"h": line})
