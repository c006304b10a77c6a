"""Random values under secrets' names, written as text the way tools return them (JSON,
indented JSON, a dict's repr, JSON inside JSON, ASCII-escaped or not): no string a dict's
secret field would lose survives in the text, JSON text stays readable JSON, and redacting
again changes nothing. (Run with many more examples, this found five ways a secret stayed in
clear or JSON broke: angle brackets, long values, short words past the screen's window,
quotes one JSON level down, and scalars read as values.)"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay_core import RedactionRule, Redactor
from tests.support.text_forms import (
    FORMS,
    SECRET_NAMES,
    assert_text_redacted,
    default_secret_name,
    written,
)

CI = settings(derandomize=True, database=None, deadline=None, max_examples=300,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DEFAULTS = Redactor(key=b"text-properties")
WITH_FIELDS = Redactor(key=b"text-properties", fields=["note", "x"])

_NAMES = st.sampled_from([*SECRET_NAMES, "note", "x", "user"])
_STRINGS = st.one_of(
    st.sampled_from(["s3cr3t-v4lue", "a b c d e f g", "a<b>cdefg", "it's mine ok",
                     "line\nbreak-value", "ünïcödé-välüé", "x" * 300, "Bearer abcdefghij123",
                     "y " * 2000, "z " * 2500, "[not a list] really", "{not: obj} text",
                     "back\\slash-val", 'ab"cdefgh', '00000"',
                     'password: {"user": "ann", "pass": "hunter2-xyz"}',
                     "password'='x{{{hunter2", "note: [password: 'it"]),
    st.text(st.characters(blacklist_categories=["Cs"]), min_size=6, max_size=30))
_LEAVES = st.one_of(_STRINGS, st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                    st.booleans(), st.none())
_VALUES = st.recursive(_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_NAMES, inner, max_size=3)), max_leaves=10)


@CI
@given(st.dictionaries(_NAMES, _VALUES, min_size=1, max_size=4), st.sampled_from([None, 2]),
       st.booleans(), st.sampled_from(FORMS))
def test_text_keeps_no_secret_stays_readable_and_redacts_once(
        value: dict[str, Any], indent: int | None, ascii_: bool, form: str) -> None:
    assert_text_redacted(DEFAULTS, value, indent=indent, ascii_=ascii_, form=form)
    text = written(form, indent, ascii_)[0](value)
    assert WITH_FIELDS.redact(WITH_FIELDS.redact(text)) == WITH_FIELDS.redact(text)


#: a user's field names, as `fields=` lists them and as a field regex finds them: some not
#: ASCII, which JSON text escapes (`json.dumps` does by default)
_OWN_NAMES = ("x-acme-ref", "contraseña", "пароль", "clé.api")
LISTED = Redactor(key=b"text-properties", fields=_OWN_NAMES)
BY_REGEX = Redactor(key=b"text-properties", rules=[
    RedactionRule("acme", fields=r"^(?:x-acme-ref|contraseña|пароль|clé\.api)$")])
_OWN_KEYS = st.sampled_from([*_OWN_NAMES, "X-ACME-REF", "CONTRASEÑA", "Пароль", "CLÉ.API",
                             "password", "note"])
#: strings holding the names before a value, after escapes JSON writes (`\n`, `\u00e9`)
_OWN_STRINGS = st.one_of(
    st.sampled_from(["s3cr3t-v4lue", "a b c d e f g", "line\nbreak-value", "ünïcödé-välüé"]),
    st.builds(lambda before, name, sep, value: f"{before}{name}{sep}{value}",
              st.sampled_from(["", "Host: a\n", "é ", "—", "\t", "x\r\n", "note: "]),
              _OWN_KEYS, st.sampled_from([": ", "=", ': "', " = '"]),
              st.sampled_from(["hunter2-xyz", "correct horse battery", "välüé-sécrète"])),
    st.text(st.characters(blacklist_categories=["Cs"]), min_size=6, max_size=30))
_OWN_VALUES = st.recursive(st.one_of(_OWN_STRINGS, st.integers(), st.none()),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(_OWN_KEYS, inner,
                                                                   max_size=3)),
                           max_leaves=8)
_OWN = {n.lower() for n in _OWN_NAMES}


def _own_or_default(name: str) -> bool:
    return name.lower() in _OWN or default_secret_name(name)


@CI
@given(st.dictionaries(_OWN_KEYS, _OWN_VALUES, min_size=1, max_size=4),
       st.sampled_from([None, 2]), st.booleans(), st.sampled_from(FORMS),
       st.sampled_from(["listed", "regex"]))
def test_a_users_field_names_in_text_keep_no_secret(
        value: dict[str, Any], indent: int | None, ascii_: bool, form: str, how: str) -> None:
    """A user's field names, listed or found by a regex, some not ASCII: in text as a dict,
    JSON-escaped or not, or inside a string after a line break or other escape."""
    redactor, rule = (LISTED, "custom_field") if how == "listed" else (BY_REGEX, "acme")
    assert_text_redacted(redactor, value, indent=indent, ascii_=ascii_, form=form,
                         named=_own_or_default, name_rules=("assignment", rule))
