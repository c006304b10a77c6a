"""docs/canonical-json.md section 1, implemented again from the text alone and compared.

`reference_canonical` is deliberately naive (stdlib only, no orjson, no json module): if it and
`canonical_bytes` ever disagree, either the document or the implementation is wrong, and a
verifier written in another language from the document would disagree too.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_core._codec import canonical_bytes, encode
from tests.core.test_codec_properties import CI, values

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                  "\f": "\\f", "\r": "\\r"}


def _string(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _shortest_digits(x: float) -> tuple[str, int]:
    """Digits d1..dn and exponent E with |x| = d1.d2...dn * 10**E (Python's repr is shortest)."""
    text = repr(abs(x))
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    point = len(whole) + int(exponent or 0)  # position of the decimal point in whole+fraction
    leading_zeros = len(whole + fraction) - len((whole + fraction).lstrip("0"))
    digits = digits.rstrip("0")
    if not digits:
        return "0", 0
    return digits, point - leading_zeros - 1


def _float(x: float) -> str:
    digits, e = _shortest_digits(x)
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    if -5 <= e <= 15:
        if e >= 0:
            whole = digits[: e + 1].ljust(e + 1, "0")
            return f"{sign}{whole}.{digits[e + 1:] or '0'}"
        return f"{sign}0.{'0' * (-e - 1)}{digits}"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return _float(value)
    if type(value) is str:
        return _string(value)
    if type(value) is list:
        return "[" + ",".join(_text(item) for item in value) + "]"
    if type(value) is dict:
        # code point order is what sorting Python str does
        members = (_string(k) + ":" + _text(value[k]) for k in sorted(value))
        return "{" + ",".join(members) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def reference_canonical(value: Any) -> bytes:
    return _text(value).encode("utf-8")


# --- checks -----------------------------------------------------------------------------------

_finite_floats = st.floats(allow_nan=False, allow_infinity=False)
_all_bits_floats = st.integers(0, 2**64 - 1).map(
    lambda n: struct.unpack("<d", n.to_bytes(8, "little"))[0])


def _json_text(alphabet: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.text(alphabet, max_size=10)


_chars = st.characters(codec="utf-8") | st.sampled_from(
    ['"', "\\", "/", "\x00", "\x08", "\x0b", "\x1f", "\x7f", "\u2028", "\uffff", "😀", "é"])
json_trees = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _finite_floats
    | _json_text(_chars),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_json_text(_chars), inner,
                                                                 max_size=4),
    max_leaves=20,
)


@CI
@given(json_trees)
def test_reference_matches_on_json_trees(tree: Any) -> None:
    assert reference_canonical(tree) == canonical_bytes(tree)


@CI
@given(values)
def test_reference_matches_on_encoded_values(value: Any) -> None:
    tree = encode(value)
    assert reference_canonical(tree) == canonical_bytes(tree)


@settings(CI, max_examples=2000)
@given(_finite_floats | _all_bits_floats.filter(math.isfinite))
def test_reference_matches_on_any_finite_float(x: float) -> None:
    assert reference_canonical(x) == canonical_bytes(x)


@pytest.mark.parametrize(
    ("x", "text"),
    [(0.0, "0.0"), (1.0, "1.0"), (0.1, "0.1"), (1e-05, "0.00001"), (2.5e-05, "0.000025"),
     (1e-06, "1e-6"), (1e-07, "1e-7"), (1.5e-07, "1.5e-7"), (5e-324, "5e-324"),
     (1e15, "1000000000000000.0"), (1e16, "1e+16"), (-0.0, "-0.0"),
     (1.2345678901234568e17, "1.2345678901234568e+17"), (12340000000.0, "12340000000.0"),
     (0.00001234, "0.00001234"), (9999999999999998.0, "9999999999999998.0")],
)
def test_the_documented_float_examples(x: float, text: str) -> None:
    assert canonical_bytes(x) == text.encode()
    assert reference_canonical(x) == text.encode()


def test_the_documented_string_and_key_rules() -> None:
    tree = {"😀": 1, "\uffff": 2, "b": 3, "a": 4, "é": 5, "B": 6}
    expected = '{"B":6,"a":4,"b":3,"é":5,"\uffff":2,"😀":1}'.encode()
    assert canonical_bytes(tree) == expected == reference_canonical(tree)
    text = '"\\/\b\t\n\f\r\x0b\x1f\x7f\u2028'
    expected_text = '"\\"\\\\/\\b\\t\\n\\f\\r\\u000b\\u001f\x7f\u2028"'.encode()
    assert canonical_bytes(text) == expected_text == reference_canonical(text)
