"""Random values under secrets' names, written as text the way tools return them (JSON,
indented JSON, a dict's repr, JSON inside JSON, ASCII-escaped or not): no string a dict's
secret field would lose survives in the text, JSON text stays readable JSON, and redacting
again changes nothing. (Run with many more examples, this found five ways a secret stayed in
clear or JSON broke: angle brackets, long values, short words past the screen's window,
quotes one JSON level down, and scalars read as values.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay_core import Redactor

SECRET_NAMES = ("password", "api_key", "cookie", "access_token", "Authorization",
                "credentials", "secret", "DB_PASSWORD", "private_key")
CI = settings(derandomize=True, database=None, deadline=None, max_examples=300,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DEFAULTS = Redactor(key=b"text-properties")
WITH_FIELDS = Redactor(key=b"text-properties", fields=["note", "x"])

_NAMES = st.sampled_from([*SECRET_NAMES, "note", "x", "user"])
_STRINGS = st.one_of(
    st.sampled_from(["s3cr3t-v4lue", "a b c d e f g", "a<b>cdefg", "it's mine ok",
                     "line\nbreak-value", "ünïcödé-välüé", "x" * 300, "Bearer abcdefghij123",
                     "y " * 2000, "z " * 2500, "[not a list] really", "{not: obj} text",
                     "back\\slash-val", 'ab"cdefgh', '00000"']),
    st.text(st.characters(blacklist_categories=["Cs"]), min_size=6, max_size=30))
_LEAVES = st.one_of(_STRINGS, st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                    st.booleans(), st.none())
_VALUES = st.recursive(_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_NAMES, inner, max_size=3)), max_leaves=10)


def _strings(value: Any, secret: bool = False) -> list[tuple[str, bool]]:
    """Every string of `value` (keys too), and whether a dict's secret field holds it."""
    if isinstance(value, str):
        return [(value, secret)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item, secret)]
    if isinstance(value, dict):
        names = {n.lower() for n in SECRET_NAMES}
        return [*((k, False) for k in value),
                *(s for k, v in value.items() for s in _strings(v, secret or k.lower() in names))]
    return []


def _written(form: str, indent: int | None, ascii_: bool
             ) -> tuple[Callable[[Any], str], Callable[[str], str], Callable[[str], Any]]:
    """How a value is written as text, how a string is written inside it, how it is read."""
    def dumps(v: Any) -> str:
        return json.dumps(v, indent=indent, ensure_ascii=ascii_)
    if form == "json":
        return dumps, lambda s: dumps(s)[1:-1], json.loads
    if form == "json in json":
        return (lambda v: dumps(dumps(v)), lambda s: dumps(dumps(s))[2:-2],
                lambda t: json.loads(json.loads(t)))
    return repr, lambda s: repr(s)[1:-1], lambda t: None


@CI
@given(st.dictionaries(_NAMES, _VALUES, min_size=1, max_size=4), st.sampled_from([None, 2]),
       st.booleans(), st.sampled_from(["json", "json in json", "repr"]))
def test_text_keeps_no_secret_stays_readable_and_redacts_once(
        value: dict[str, Any], indent: int | None, ascii_: bool, form: str) -> None:
    write, inside, read = _written(form, indent, ascii_)
    text = write(value)
    redacted = DEFAULTS.redact(text)
    read(redacted)  # JSON text stays JSON
    assert DEFAULTS.redact(redacted) == redacted
    assert WITH_FIELDS.redact(WITH_FIELDS.redact(text)) == WITH_FIELDS.redact(text)
    found = _strings(value)
    elsewhere = [inside(s) for s, secret in found if not secret]
    for s, secret in found:
        # a secret of letters (digits could be part of a number), of the length the text
        # rules take, that is not also written where no secret field holds it
        if secret and len(s) >= 6 and any(c.isalpha() for c in s) and \
                not any(inside(s) in other for other in elsewhere):
            assert inside(s) not in redacted, s
