"""Hostile input for the codec (issue 8): exact round trips of nasty values, and a decoder that
answers any JSON tree with a value or a `SerializationError`, never another exception.

The trees fed to `decode` are what a damaged or hand-edited run log can hold: tagged objects
with every known tag and random, half-plausible payloads (wrong types, bad base64, huge
numbers, impossible shapes). Only `SerializationError` is documented for `decode`.
"""

from __future__ import annotations

import base64
import math
import struct
import sys
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay_core._codec import TAG, canonical_bytes, decode, dumps, encode, loads
from agentreplay_core._codec_base import MAX_NESTING
from agentreplay_core._errors import SerializationError
from tests.core.test_codec_properties import Box, Color, Item, Pair, same

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

# --- values: the nasty corners of every type the codec promises to keep exactly ------------

_specials = st.sampled_from(["\x00", "\x00\x00", "\ud800", "\udfff", "\ud83d\ude00", "\ufeff",
                             "\u2028", '"', "\\", "\x1f", "\x7f", "\uffff", "\U0010ffff"])
nasty_text = (st.text(st.characters(exclude_categories=()), max_size=16)
              | st.lists(_specials | st.text(max_size=3), max_size=6).map("".join)
              | st.sampled_from([TAG, "", "__ar__ ", "v", "\x00" + TAG]))
nasty_ints = st.integers() | st.sampled_from([
    2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, -(2**64),
]) | st.sampled_from([4299, 4300, -4301, 6000]).map(  # past int <-> str's digit limit
    lambda n: 10**n if n > 0 else -(7 ** -n))
nan_payloads = st.integers(0, 2**52 - 1).flatmap(
    lambda mantissa: st.sampled_from([0, 1]).map(
        lambda sign: struct.unpack(">d", struct.pack(">Q", sign << 63 | 0x7FF << 52
                                                    | (mantissa or 1)))[0]))
nasty_floats = st.floats() | nan_payloads | st.sampled_from([
    -0.0, 0.0, math.inf, -math.inf, 5e-324, -5e-324, 2.2250738585072014e-308, 1e16, -1e16,
    9999999999999998.0, 1.7976931348623157e308, 1e-7, 0.1])
nasty_decimals = st.decimals() | st.sampled_from([
    Decimal("sNaN"), Decimal("-sNaN12"), Decimal("NaN123"), Decimal("-0"), Decimal("1E+999999"),
    Decimal("1.10"), Decimal("-Infinity"), Decimal("0E-1000"),
])
nasty_datetimes = st.one_of(
    st.datetimes(timezones=st.none() | st.timezones() | st.just(timezone.utc)),
    st.sampled_from([datetime.min, datetime.max, datetime(2024, 10, 27, 2, 30, fold=1,
                                                         tzinfo=ZoneInfo("Europe/Berlin")),
                     datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=23, minutes=59)))]),
)
leaves = st.one_of(
    st.none(), st.booleans(), nasty_ints, nasty_floats, nasty_text, nasty_decimals,
    st.binary(max_size=64), st.binary(max_size=16).map(bytearray), nasty_datetimes,
    st.dates(), st.times(timezones=st.none() | st.timezones()), st.timedeltas(), st.uuids(),
    st.sampled_from([date.min, date.max, time.max, timedelta.max, timedelta.min, *Color]),
    st.lists(nasty_floats, min_size=32, max_size=40),  # a packed vector, NaN payloads and all
)
hashable = st.one_of(st.none(), st.booleans(), nasty_ints, nasty_text, st.binary(max_size=8),
                     st.uuids(), st.floats(allow_nan=False))


def _look_alike(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Plain user dicts shaped exactly like tagged objects: they must stay plain dicts."""
    return st.builds(lambda tag, v, extra: {TAG: tag, "v": v, **extra},
                     st.sampled_from([*_TAGS, "nope", ""]) | nasty_text, inner,
                     st.dictionaries(nasty_text, inner, max_size=2))


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(inner, max_size=5), st.tuples(inner, inner),
        st.dictionaries(nasty_text, inner, max_size=5),
        st.dictionaries(hashable, inner, max_size=3),  # keys JSON objects cannot hold
        st.frozensets(hashable, max_size=4), st.sets(hashable, max_size=4),
        _look_alike(inner),
        st.builds(Item, name=nasty_text, payload=inner), st.builds(Box, inner, nasty_text),
        st.builds(Pair, inner, inner),
    )


_TAGS = ["str", "float", "int", "floats", "bytes", "bytearray", "datetime", "date", "time",
         "timedelta", "decimal", "uuid", "complex", "path", "tuple", "set", "frozenset", "dict",
         "map", "enum", "pydantic", "dataclass", "namedtuple", "npscalar", "ndarray", "ext",
         "unencodable"]
values = st.recursive(leaves, _containers, max_leaves=20)


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@FUZZ
@given(values)
def test_nasty_values_round_trip_exactly(value: Any) -> None:
    encoded = encode(value)
    stored = canonical_bytes(encoded)
    assert b"\\u0000" not in stored  # PostgreSQL's jsonb would refuse the row
    back = decode(loads(stored))
    assert same(back, value)
    assert canonical_bytes(encode(back)) == stored  # a checksum never moves


@FUZZ
@given(st.integers(1, MAX_NESTING), leaves)
def test_nesting_up_to_the_limit_round_trips_and_beyond_it_is_refused(depth: int,
                                                                      leaf: Any) -> None:
    deep = _nested(depth, leaf)
    try:
        encoded = encode(deep)
    except SerializationError as exc:  # a tagged leaf adds levels: only at the very top
        assert depth > MAX_NESTING - 3 and "nested more than" in str(exc)
    else:
        assert same(decode(loads(dumps(encoded))), deep)
    with pytest.raises(SerializationError, match="nested more than 252 levels"):
        encode(_nested(MAX_NESTING + 1 + depth, leaf))


class _Hostile:
    """Objects that fight back while being encoded."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __repr__(self) -> str:
        raise RuntimeError("repr is broken")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq is broken")

    __hash__ = None  # type: ignore[assignment]


class _BadDict(dict[str, Any]):
    def items(self) -> Any:
        raise OSError("items() is broken")


class _BadList(list[Any]):
    def __iter__(self) -> Any:
        raise MemoryError("iteration is broken")


def _cyclic() -> Any:
    loop: list[Any] = [1]
    loop.append({"again": loop})
    return loop


hostile = st.one_of(
    st.builds(_Hostile, st.text(max_size=3)), st.builds(lambda: _BadDict(a=1)),
    st.builds(lambda: _BadList([1, 2])), st.builds(_cyclic), st.builds(object),
    st.builds(lambda: (lambda: None)), st.just(sys), st.just(Ellipsis), st.just(NotImplemented),
    st.builds(lambda: iter([1])), st.builds(lambda: memoryview(b"ab")),
)


@FUZZ
@given(st.recursive(leaves | hostile, _containers, max_leaves=12))
def test_encode_raises_only_serialization_errors_that_name_a_path(value: Any) -> None:
    try:
        encoded = encode(value, path="output")
    except SerializationError as exc:
        assert exc.path.startswith("output")
        assert str(exc).endswith(f"(at {exc.path})")
        return
    decode(encoded)  # subclasses come back as their base type, so only "it decodes"


# --- decoding whatever a damaged run log can hold -----------------------------------------

json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
)
json_trees = st.recursive(  # what JSON text can hold: 64-bit integers only
    json_leaves.filter(lambda x: type(x) is not int or -(2**63) <= x < 2**63),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=6).filter(lambda key: key != TAG), inner, max_size=4),
    max_leaves=10,
)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


_huge = st.sampled_from([2**31, 2**63, 10**12, -1, -(2**63), 2**200, 10**30])
_plausible: dict[str, st.SearchStrategy[Any]] = {
    "v": st.text(max_size=12) | st.lists(st.integers() | st.text(max_size=4), max_size=4)
    | st.sampled_from(["nan", "-0.0", "1e+16", "1.10", "sNaN", "2024-05-01T10:00:00+02:00",
                       "12:30:00", "0x1f", "12345678-1234-5678-1234-567812345678", "C:\\x",
                       "abc", "1E+999999999"]),
    "bits": st.text("0123456789abcdef", min_size=14, max_size=18) | st.text(max_size=4),
    "hex": st.sampled_from(["0x", "0x1", "-0xff", "0xzz", "1f"]) | st.text(max_size=6),
    "f64le": st.binary(max_size=40).map(_b64) | st.text(max_size=8),
    "b64": st.binary(max_size=24).map(_b64) | st.text(max_size=8),
    "days": st.integers() | _huge, "seconds": st.integers() | _huge, "us": st.integers() | _huge,
    "tz": st.sampled_from(["UTC", "Europe/Berlin", "Nope/Zone", "../etc/passwd", "", "a\x00b"]),
    "tzname": st.text(max_size=4) | st.integers(), "fold": st.integers(-2, 3) | st.text(),
    "cls": st.sampled_from([
        "PurePosixPath", "WindowsPath", "Path", "builtins:int", "decimal:Decimal",
        "collections:OrderedDict", "enum:Enum", "tests.core.test_codec_properties:Item",
        "tests.core.test_codec_properties:Box", "tests.core.test_codec_properties:Pair",
        "tests.core.test_codec_properties:Color", "no_such_module_xyz:Thing",
        "tests.core.test_codec_properties:<locals>.X", "", ":", "..x:Y",
    ]),
    "dtype": st.sampled_from(["<f8", ">i4", "|b1", "<c16", "|S0", "<U0", "|V0", "|V8", "<M8[ns]",
                              "|O", "O", "<f16", "bogus", "", "<U3"]),
    "shape": st.lists(st.integers(-2, 4) | _huge, max_size=3),
    "name": st.text(max_size=6), "set": st.lists(st.text(max_size=3), max_size=3) | json_leaves,
    "type": st.text(max_size=6), "repr": st.text(max_size=6), "error": st.text(max_size=6),
    "path": st.text(max_size=6),
}


def _tagged(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    payload = {key: strategy | inner for key, strategy in _plausible.items()}
    return st.builds(
        lambda tag, fields, items, extra: {TAG: tag, **fields, **items, **extra},
        st.sampled_from(_TAGS) | json_leaves,
        st.fixed_dictionaries({}, optional=payload),
        st.fixed_dictionaries({}, optional={"items": st.lists(inner, max_size=4),
                                            "extra": st.dictionaries(st.text(max_size=4),
                                                                     inner, max_size=2)}),
        st.dictionaries(st.text(max_size=4), inner, max_size=1),
    )


hostile_trees = st.recursive(
    json_leaves | _tagged(json_leaves),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3),
                            _tagged(inner)),
    max_leaves=12,
)


@FUZZ
@given(hostile_trees, st.booleans())
def test_decode_answers_any_tree_with_a_value_or_a_serialization_error(
    tree: Any, restore: bool
) -> None:
    try:
        value = decode(tree, restore_objects=restore)
    except SerializationError as exc:
        assert exc.path.startswith("$")
        return
    # whatever came out is an ordinary value: it encodes again (or is refused cleanly), and
    # that encoding is a fixed point, so its checksum can never drift
    try:
        again = canonical_bytes(encode(value))
    except SerializationError:
        return
    assert canonical_bytes(encode(decode(loads(again), restore_objects=restore))) == again


@FUZZ
@given(json_trees)
def test_plain_json_decodes_to_itself(tree: Any) -> None:
    """No silent change: JSON without the reserved key comes back exactly as it went in."""
    assert decode(tree) == tree
    assert decode(loads(dumps(tree))) == tree


@pytest.mark.parametrize("tree", [
    {TAG: "timedelta", "days": 10**10, "seconds": 0, "us": 0},
    {TAG: "str", "v": ["a", 2**70]},
    {TAG: "decimal", "v": "not a number"},
    {TAG: "ndarray", "dtype": "|S0", "shape": [10**12], "b64": ""},
    {TAG: "ndarray", "dtype": "<f8", "shape": [10**6, 10**6], "b64": ""},
    {TAG: "floats", "f64le": _b64(b"\x00" * 7)},
    {TAG: "npscalar", "dtype": "|S8", "v": 10**8},
    {TAG: "npscalar", "dtype": "|V8", "v": 10**8},
    {TAG: "npscalar", "dtype": "<U3", "v": 7},
], ids=["timedelta overflow", "code point overflow", "decimal syntax", "zero-size items",
        "huge shape", "torn vector", "bytes of a count", "void of a count", "text of a number"])
def test_found_by_fuzzing_each_is_a_serialization_error(tree: Any) -> None:
    """Once OverflowError, decimal.InvalidOperation and MemoryError escaped from `decode`
    (`np.bytes_(n)` allocates n bytes: a readable value belongs to numeric dtypes only)."""
    with pytest.raises(SerializationError, match=r"cannot decode tagged object") as caught:
        decode({"output": [tree]})
    assert caught.value.path == "$.output[0]"


def test_a_tree_too_deep_for_the_stack_is_a_serialization_error() -> None:
    with pytest.raises(SerializationError, match="nested too deeply"):
        decode(_nested(20_000, 1))
