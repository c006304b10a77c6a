"""Generated values round-trip exactly through the codec, in memory and through JSONB."""

from __future__ import annotations

import dataclasses
import enum
import math
import pathlib
import struct
from datetime import datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from psycopg import sql
from pydantic import BaseModel, ConfigDict

from agentreplay_core._codec import TAG, canonical_bytes, decode, dumps, encode, loads

# deterministic for CI: fixed derandomised search, no example database written to the repo
CI = settings(derandomize=True, database=None, deadline=None, max_examples=150,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Perm(enum.IntFlag):
    R = 4
    W = 2


class Item(BaseModel):
    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    name: str
    payload: Any = None
    tags: list[Any] = []


@dataclasses.dataclass
class Box:
    value: Any
    label: str = "box"


class Pair(NamedTuple):
    left: Any
    right: Any


# --- an exact comparison: same types all the way down -------------------------------------


def _float_same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return struct.pack(">d", a) == struct.pack(">d", b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _tz_same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, ZoneInfo):
        return isinstance(b, ZoneInfo) and a.key == b.key
    return bool(type(a) is type(b) and a.utcoffset(None) == b.utcoffset(None)
                and a.tzname(None) == b.tzname(None))


def _numpy_same(a: Any, b: Any) -> bool:
    if a.dtype != b.dtype or a.dtype.str != b.dtype.str or np.shape(a) != np.shape(b):
        return False
    if a.dtype.kind == "O":
        return all(same(x, y) for x, y in zip(a.ravel(), b.ravel(), strict=True))
    if a.dtype.kind in "fc" and np.finfo(a.dtype).nmant == 63:  # x87 padding is garbage
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.asarray(a).tobytes() == np.asarray(b).tobytes())


def same(a: Any, b: Any) -> bool:
    """True when `b` is `a` rebuilt exactly: equal values of identical types, recursively."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (np.ndarray, np.generic)):
        return _numpy_same(a, b)
    if isinstance(a, float):
        return _float_same(a, b)
    if isinstance(a, complex):
        return _float_same(a.real, b.real) and _float_same(a.imag, b.imag)
    if isinstance(a, Decimal):
        return bool(a.as_tuple() == b.as_tuple())
    if isinstance(a, (datetime, time)):
        return (a.replace(tzinfo=None) == b.replace(tzinfo=None) and a.fold == b.fold
                and _tz_same(a.tzinfo, b.tzinfo))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(any(same(x, y) for y in b) for x in a)
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        keys_b = {k: k for k in b}
        return all(k in keys_b and same(k, keys_b[k]) and same(v, b[k]) for k, v in a.items())
    if isinstance(a, BaseModel):
        return (same(a.__dict__, b.__dict__) and same(a.__pydantic_extra__, b.__pydantic_extra__)
                and a.model_fields_set == b.model_fields_set)
    if dataclasses.is_dataclass(a):
        fields = [f.name for f in dataclasses.fields(a)]
        return all(same(getattr(a, f), getattr(b, f)) for f in fields)
    return bool(a == b)


# --- strategies -----------------------------------------------------------------------------

_tricky_chars = st.sampled_from(["\x00", "\ud800", "\udfff", "\ud83d", "\ude00", "é", "😀",
                                 "\u2028", '"', "\\", "\x1f", "\x7f", "\uffff"])
texts = (st.text(st.characters(exclude_categories=()), max_size=12)
         | st.text(_tricky_chars | st.sampled_from("ab "), min_size=1, max_size=6)
         | st.just(TAG))
zones = (st.none() | st.timezones() | st.just(timezone.utc)
         | st.builds(timezone, st.timedeltas(min_value=timedelta(hours=-23),
                                             max_value=timedelta(hours=23)))
         | st.builds(timezone, st.just(timedelta(hours=5, minutes=30)), st.just("IST")))
_any_int = st.integers() | st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64])
_floats = st.floats() | st.sampled_from([1e16, -1e16, 9999999999999998.0, 5e-324, 1e-7, -0.0])
_path = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)

hashable_leaves = st.one_of(
    st.none(), st.booleans(), _any_int, st.floats(allow_nan=False), texts, st.binary(max_size=8),
    st.dates(), st.datetimes(timezones=zones), st.uuids(),
    st.decimals(allow_nan=False), st.complex_numbers(allow_nan=False),
    st.sampled_from([*Color, Perm.R | Perm.W]),
    st.builds(pathlib.PurePosixPath, _path), st.builds(pathlib.PureWindowsPath, _path),
)
hashables = st.recursive(
    hashable_leaves,
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=4,
)
numpy_scalars = hnp.arrays(
    hnp.scalar_dtypes() | hnp.byte_string_dtypes() | hnp.unicode_string_dtypes(), ()
).map(lambda a: a[()])
numpy_arrays = hnp.arrays(
    hnp.scalar_dtypes() | hnp.integer_dtypes(endianness=">") | hnp.floating_dtypes(endianness=">")
    | hnp.unicode_string_dtypes(),
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
)
leaves = st.one_of(
    hashable_leaves, st.floats(), _floats, st.decimals(), st.times(timezones=zones),
    st.timedeltas(), st.binary(max_size=8).map(bytearray), st.builds(pathlib.Path, _path),
    numpy_scalars, numpy_arrays, st.lists(st.floats(), min_size=32, max_size=40),
    st.lists(st.floats(), min_size=32, max_size=34).map(tuple),
)


def _object_array(items: list[Any]) -> Any:
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    str_keys = texts | st.sampled_from([TAG, "a", "weird key", "content"])
    return st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(str_keys, inner, max_size=4),
        st.dictionaries(hashables, inner, max_size=3),
        st.sets(hashables, max_size=3),
        st.frozensets(hashables, max_size=3),
        st.builds(Item, name=texts, payload=inner, tags=st.lists(inner, max_size=2)),
        st.builds(lambda v, x: Item(name="x", payload=v, **{"extra field": x}), inner, inner),
        st.builds(Box, inner, texts),
        st.builds(Pair, inner, inner),
        st.lists(inner, max_size=3).map(_object_array),
    )


values = st.recursive(leaves, _containers, max_leaves=12)


# --- properties -----------------------------------------------------------------------------


@CI
@given(values)
def test_round_trip_in_memory(value: Any) -> None:
    encoded = encode(value)
    assert same(decode(encoded), value)
    assert same(decode(loads(dumps(encoded))), value)


@CI
@given(values)
def test_encoding_is_a_normal_form(value: Any) -> None:
    """Decoding and encoding again gives the same canonical bytes (checksums are stable)."""
    first = canonical_bytes(encode(value))
    assert canonical_bytes(encode(decode(loads(first)))) == first


@CI
@given(st.dictionaries(texts, values, max_size=6))
def test_key_order_does_not_matter(value: dict[str, Any]) -> None:
    backwards = dict(reversed(list(value.items())))
    assert canonical_bytes(encode(backwards)) == canonical_bytes(encode(value))


@CI
@given(values)
def test_plain_restore_needs_no_classes_and_keeps_the_data(value: Any) -> None:
    plain = decode(encode(value), restore_objects=False)
    assert same(decode(encode(plain), restore_objects=False), plain)


def test_round_trip_through_a_jsonb_column(pg_dsn: str, pg_schema: str) -> None:
    table = sql.Identifier(pg_schema, "docs")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(pg_schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, doc jsonb NOT NULL)")
                     .format(table))
        next_id = [0]

        @settings(CI, max_examples=60)
        @given(st.lists(values, min_size=1, max_size=20))
        def check(batch: list[Any]) -> None:
            encoded = [encode(v) for v in batch]
            ids = list(range(next_id[0], next_id[0] + len(batch)))
            next_id[0] += len(batch)
            conn.execute(
                sql.SQL("INSERT INTO {} (id, doc) SELECT i, d::jsonb "
                        "FROM unnest(%s::int[], %s::text[]) AS u(i, d)").format(table),
                (ids, [dumps(e).decode() for e in encoded]),
            )
            rows = conn.execute(
                sql.SQL("SELECT doc::text FROM {} WHERE id = ANY(%s) ORDER BY id").format(table),
                (ids,),
            ).fetchall()
            assert len(rows) == len(batch)
            for value, tree, (text,) in zip(batch, encoded, rows, strict=True):
                assert same(decode(loads(text)), value), text
                assert canonical_bytes(loads(text)) == canonical_bytes(tree)

        check()


@pytest.mark.parametrize("value", [1e16, 1e17, -0.0, "a\x00b"])
def test_jsonb_changes_these_values_when_written_natively(pg_dsn: str, value: Any) -> None:
    """Why the tags exist: PostgreSQL turns 1e16 into an int, drops the sign of -0.0 and
    rejects NUL; encoded, the same values come back exactly."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        try:
            row = conn.execute("SELECT %s::jsonb::text", (dumps(value).decode(),)).fetchone()
            assert row is not None
            assert not same(loads(row[0]), value)
        except psycopg.DataError as exc:
            assert "\\u0000" in str(exc)
        row = conn.execute("SELECT %s::jsonb::text", (dumps(encode(value)).decode(),)).fetchone()
    assert row is not None
    assert same(decode(loads(row[0])), value)
