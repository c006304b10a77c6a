"""Rows to and from the PostgreSQL tables: column values, vectors, loaded runs and steps.

Loaded rows are taken as stored, without validation: a row changed behind agentreplay's back
must reach verification, which reports it, instead of failing the load. Only a value that
cannot be decoded at all raises, as a `StoreError` naming its run (and step).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import struct
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, Literal, cast
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from agentreplay_core import _codec
from agentreplay_core._delta import DeltaResolver
from agentreplay_core._errors import StoreError
from agentreplay_core._model import Run, RunStatus, Step, loaded_step
from agentreplay_core.stores import _sql
from agentreplay_core.stores._backend import PendingStep

__all__ = [
    "MAX_VECTOR_DIMS",
    "ODD_METADATA_KEY",
    "STREAM_CHUNK",
    "RowUnreadable",
    "binary_step_rows",
    "binary_vector_rows",
    "can_stream_chunks",
    "fetch_rows",
    "fetch_steps",
    "gc_paused",
    "run_from_row",
    "step_from_row",
    "step_values",
    "stream_steps",
    "vector_binary",
    "vector_text",
]

MAX_VECTOR_DIMS = 16_000  # pgvector's limit for the `vector` type
_FLOAT32_MAX = 3.4028234663852886e38
_F32_MAX_BE = struct.pack(">f", _FLOAT32_MAX)
_F32_MIN_BE = struct.pack(">f", -_FLOAT32_MAX)
#: where a `runs.metadata` value that is not a JSON object (or not parseable) is kept
ODD_METADATA_KEY = "invalid_metadata"
#: what converting a fetched value can raise (UnicodeDecodeError is a ValueError)
_UNDECODABLE = (psycopg.DataError, ValueError)
_CHANGED_HINT = (
    "agentreplay never writes such a value: the row was changed outside it. Restore the row "
    "from a backup or delete the run"
)


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


def binary_step_rows(steps: Iterable[PendingStep], session_zone: tzinfo
                     ) -> Iterator[bytearray]:
    """`steps` as binary COPY data in `STEP_COLUMNS` order, in chunks of ~`COPY_CHUNK`
    bytes. A naive `started_at` is read in the session's time zone, as the server reads a
    naive timestamp sent as text.

    PostgreSQL 16 inserts binary COPY rows only every 1,000 tuples (it sizes its insert
    buffer by the input line, which binary input does not have), so a batch is inserted at
    its end, not while later rows arrive. Text COPY is inserted every ~64 KB, but costs twice
    the client CPU to render (4.7 against 2.4 us a row) and more on the server; the client's
    CPU is the agent's, so binary it is, but for rows still being made as they are sent
    (`_pgtext.text_step_rows`).

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
        started = s.started_at
        if started.tzinfo is None:
            started = started.replace(tzinfo=session_zone)
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
        out += tail(1, s.is_error, 8, (started - _PG_EPOCH) // _MICROSECOND, 8,
                    s.duration_ms, len(checksum))
        out += checksum
        if len(out) >= COPY_CHUNK:
            yield out
            out = bytearray()
    out += COPY_TRAILER
    yield out


def binary_vector_rows(rows: Sequence[tuple[UUID, int, int, bytes]]) -> Iterator[bytearray]:
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


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off the cyclic GC while building many acyclic rows and JSON trees.

    Each collection would rescan every object made so far: for 10,000 steps of 2 KB the pause
    cuts load time by about a third. Re-enabled only if it was enabled, so a host's own
    setting stands.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


#: rows per chunk when a run's steps are streamed: the server reads and sends the next chunks
#: while this process parses the last (measured on a 10,000-step run: 20 rows took 30% less
#: time than one whole result; 500 rows, or row by row, lose most of the gain)
STREAM_CHUNK = 20


class RowUnreadable(Exception):
    """A streamed row held a value the driver cannot convert: read the run again whole, which
    names the row (`fetch_rows`)."""


def can_stream_chunks() -> bool:
    """Whether the driver can fetch a result in chunks (psycopg 3.2 with libpq 17 or later)."""
    capabilities = getattr(psycopg, "capabilities", None)
    return capabilities is not None and bool(capabilities.has_stream_chunked())


def stream_steps(conn: psycopg.Connection[Any], query: Any, run_id: UUID) -> list[Step]:
    """The steps of `query`'s rows (a run's, in step order), parsed as they arrive.

    Raises `RowUnreadable` for a value the driver cannot convert.
    """
    with conn.cursor() as cur:
        # a generator: closing it on a failure cancels what the server still sends
        rows = cast("Generator[Any, None, None]",
                    cur.stream(query, (run_id,), size=STREAM_CHUNK))
        with contextlib.closing(rows):
            try:
                return _steps(rows)
            except _UNDECODABLE as exc:
                raise RowUnreadable(str(exc)) from exc


def fetch_steps(conn: psycopg.Connection[Any], query: Any, run_id: UUID) -> list[Step]:
    """The steps of `query`'s rows (a run's, in step order), read as one result: a value the
    driver cannot convert raises `StoreError` naming its step."""
    return _steps(fetch_rows(conn.execute(query, (run_id,)), "run_log"))


def _steps(rows: Iterable[Any]) -> list[Step]:
    """The steps of a run's rows, which come in step order: bases before their deltas."""
    deltas = DeltaResolver()
    return [step_from_row(row, deltas) for row in rows]


def fetch_rows(cur: psycopg.Cursor[Any], table: Literal["runs", "run_log"]) -> list[Any]:
    """All rows of an executed query on `table` whose first columns are its key.

    A value the driver cannot convert (a timestamp changed to 'infinity', which Python's
    datetime cannot hold) raises `StoreError` naming its row instead of a bare driver error.
    """
    try:
        return cur.fetchall()
    except _UNDECODABLE as exc:
        where = _find_bad_row(cur, table)
        raise StoreError(f"{where} cannot be read: {exc}; {_CHANGED_HINT}") from exc


def _find_bad_row(cur: psycopg.Cursor[Any], table: str) -> str:
    result = cur.pgresult  # the whole result is here: converting it row by row finds the bad one
    if result is None:
        return f"a row of {table}"
    for i in range(result.ntuples):
        cur.scroll(i, "absolute")
        try:
            cur.fetchone()
        except _UNDECODABLE:
            run, step = ((result.get_value(i, c) or b"?").decode() for c in (0, 1))  # raw text
            return f"run {run}" if table == "runs" else f"step {step} of run {run}"
    return f"a row of {table}"


def run_from_row(row: tuple[Any, ...]) -> Run:
    """A loaded `runs` row. Metadata that is not a JSON object this library can parse is kept
    under `ODD_METADATA_KEY`: it is descriptive only, and one odd run must not stop a listing."""
    values = dict(zip(_sql.RUN_COLUMNS, row, strict=True))
    try:
        metadata = _codec.loads(values["metadata"])
    except ValueError:  # valid JSON orjson refuses: 1e400, nesting deeper than 1024
        metadata = values["metadata"]
    values["metadata"] = metadata if isinstance(metadata, dict) else {ODD_METADATA_KEY: metadata}
    try:
        values["status"] = RunStatus(values["status"])
    except ValueError as exc:
        raise StoreError(f"run {values['run_id']} cannot be read: unknown status "
                         f"{values['status']!r}; {_CHANGED_HINT}") from exc
    return Run.model_construct(**values)


def step_from_row(r: tuple[Any, ...], deltas: DeltaResolver | None = None) -> Step:
    """A loaded `run_log` row; raises `StoreError` naming the step if its JSON cannot be parsed.

    Rows must come in step order through one `deltas` per run: an input stored as a delta
    on an earlier step comes back as the logical input (see `agentreplay_core._delta`).
    """
    loads = _codec.loads
    try:
        input_, output = loads(r[6]), loads(r[7])
    except ValueError as exc:  # orjson's JSONDecodeError: 1e400, nesting deeper than 1024
        column = "output" if _parses(r[6]) else "input"
        raise StoreError(f"step {r[1]} of run {r[0]} cannot be read: its {column} is JSON "
                         f"agentreplay cannot parse ({exc}); {_CHANGED_HINT}") from exc
    if deltas is not None:
        input_ = deltas.resolve(r[1], input_, output)
    return loaded_step(r[0], r[1], r[2], r[3], r[4], r[5], input_, output, r[8], r[9], r[10],
                       r[11])


def _parses(text: str) -> bool:
    try:
        _codec.loads(text)
    except ValueError:
        return False
    return True
