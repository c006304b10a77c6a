"""Rows to the PostgreSQL tables: column values, binary COPY rows of steps and vectors
(what loads them back is `_pgload`)."""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from agentreplay_core.stores._backend import PendingStep

__all__ = [
    "MAX_VECTOR_DIMS",
    "binary_step_rows",
    "binary_vector_rows",
    "in_column_range",
    "pg_micros",
    "step_values",
    "vector_binary",
    "vector_text",
]

MAX_VECTOR_DIMS = 16_000  # pgvector's limit for the `vector` type
_FLOAT32_MAX = 3.4028234663852886e38
_F32_MAX_BE = struct.pack(">f", _FLOAT32_MAX)
_F32_MIN_BE = struct.pack(">f", -_FLOAT32_MAX)


@contextmanager
def in_column_range(what: str) -> Iterator[None]:
    """Binary rows of `what` made inside: a value its column cannot hold (a step number beyond
    int4) fails as the server would fail it, a `DataError`, which is not retried."""
    try:
        yield
    except struct.error as exc:
        raise psycopg.DataError(f"a {what} row has a value out of its column's range: {exc}"
                                ) from exc


def vector_text(vector: Sequence[float]) -> str | None:
    """pgvector's text form of `vector`, or None if pgvector cannot hold it."""
    if vector_binary(vector) is None:
        return None
    return "[" + ",".join(map(repr, map(float, vector))) + "]"


@functools.lru_cache(maxsize=64)
def _vector_struct(dims: int) -> struct.Struct:
    return struct.Struct(f">hh{dims}f")


def vector_binary(vector: Sequence[float]) -> bytes | None:
    """pgvector's binary form of `vector` (int16 dims, int16 0, big-endian float4 values), or
    None if pgvector cannot hold it: 1 to `MAX_VECTOR_DIMS` finite values within float32's
    range.

    Packing checks the range (struct refuses a finite value that overflows float4) and one
    `sum` finds NaN and infinities, which propagate; both loops run in C.
    """
    dims = len(vector)
    if not 1 <= dims <= MAX_VECTOR_DIMS:
        return None
    try:
        packed = _vector_struct(dims).pack(dims, 0, *vector)
    except (OverflowError, struct.error):  # beyond float32, or not numbers at all
        return None
    if not math.isfinite(sum(vector)):
        return None
    # A value just above float32's largest rounds to it instead of overflowing: rare, so the
    # exact per-value check runs only when that bit pattern shows up at all.
    if (_F32_MAX_BE in packed or _F32_MIN_BE in packed) and not all(
            abs(float(x)) <= _FLOAT32_MAX for x in vector):
        return None
    return packed


def _as_is(data: bytes) -> bytes:
    return data


def step_values(s: PendingStep) -> tuple[Any, ...]:
    """A step's column values, in `STEP_COLUMNS` order.

    Input and output go out as the canonical JSON bytes they already are: decoding them to
    `str` first would cost a copy of each (four times its size for text beyond Latin-1) that
    psycopg would only encode back to UTF-8.
    """
    return (
        s.run_id, s.step, s.kind, s.name, s.match_key, s.path,
        Jsonb(s.stored_input, dumps=_as_is), Jsonb(s.output_json, dumps=_as_is), s.is_error,
        s.started_at, s.duration_ms, s.checksum,
    )  # fmt: skip


#: binary COPY framing: signature, flags, header extension length; the end-of-data marker
COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
COPY_TRAILER = b"\xff\xff"
#: rendered COPY data is handed to psycopg in pieces of about this size
COPY_CHUNK = 128 * 1024
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
_I4 = struct.Struct(">i")
# field count, uuid, int4 step, length of `kind` / jsonb length + version byte / the tail:
# bool is_error, int8 timestamptz (microseconds since 2000), float8 duration, checksum length
_STEP_HEAD = struct.Struct(">hi16siii")
_JSONB = struct.Struct(">ib")
_STEP_TAIL = struct.Struct(">i?iqidi")
_VECTOR_HEAD = struct.Struct(">hi16siiiiiii")


def pg_micros(when: datetime, session_zone: tzinfo) -> int:
    """`when` as a binary timestamptz: microseconds since PostgreSQL's epoch; a naive time is
    read in the session's time zone, as the server reads a naive timestamp sent as text."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=session_zone)
    return (when - _PG_EPOCH) // _MICROSECOND


def binary_step_rows(steps: Iterable[PendingStep], session_zone: tzinfo
                     ) -> Iterator[bytearray]:
    """`steps` as binary COPY data in `STEP_COLUMNS` order, in chunks of ~`COPY_CHUNK`
    bytes. A naive `started_at` is read in the session's time zone, as the server reads a
    naive timestamp sent as text.

    PostgreSQL 16 inserts binary COPY rows only every 1,000 tuples (it sizes its insert
    buffer by the input line, which binary input does not have), so a batch is inserted at
    its end, not while later rows arrive. Text COPY is inserted every ~64 KB, but costs the
    client two to four times the CPU to render and more on the server; the client's CPU is
    the agent's, so binary it is, also for rows still being made as they are sent.

    Each value is written once, as it is: the JSON bytes need no escaping in binary COPY
    (jsonb's binary form is a version byte and the text), and there is no wrapper object or
    per-value dispatch as in `write_row`.
    """
    out = bytearray(COPY_HEADER)
    i4, head, jsonb, tail = _I4.pack, _STEP_HEAD.pack, _JSONB.pack, _STEP_TAIL.pack
    ids: dict[UUID, bytes] = {}
    for s in steps:
        run = ids.get(s.run_id)
        if run is None:
            run = ids[s.run_id] = s.run_id.bytes
        kind, name = s.kind.encode(), s.name.encode()
        key, path, checksum = s.match_key.encode(), s.path.encode(), s.checksum.encode()
        stored_in = s.stored_input
        out += head(12, 16, run, 4, s.step, len(kind))
        out += kind
        out += i4(len(name))
        out += name
        out += i4(len(key))
        out += key
        out += i4(len(path))
        out += path
        out += jsonb(len(stored_in) + 1, 1)
        out += stored_in
        out += jsonb(len(s.output_json) + 1, 1)
        out += s.output_json
        out += tail(1, s.is_error, 8, pg_micros(s.started_at, session_zone), 8,
                    s.duration_ms, len(checksum))
        out += checksum
        if len(out) >= COPY_CHUNK:
            yield out
            out = bytearray()
    out += COPY_TRAILER
    yield out


def binary_vector_rows(rows: Iterable[tuple[UUID, int, int, bytes]]) -> Iterator[bytearray]:
    """(run id, step, position, `vector_binary` bytes) rows as binary COPY data for the
    embeddings table's columns (run_id, step, position, dims, embedding)."""
    out = bytearray(COPY_HEADER)
    head = _VECTOR_HEAD.pack
    for run_id, step, position, vector in rows:
        dims = (len(vector) - 4) // 4
        out += head(5, 16, run_id.bytes, 4, step, 4, position, 4, dims, len(vector))
        out += vector
        if len(out) >= COPY_CHUNK:
            yield out
            out = bytearray()
    out += COPY_TRAILER
    yield out
