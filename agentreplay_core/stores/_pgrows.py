"""Rows to and from the PostgreSQL tables: column values, vectors, loaded runs and steps.

Loaded rows are taken as stored, without validation: a row changed behind agentreplay's back
must reach verification, which reports it, instead of failing the load. Only a value that
cannot be decoded at all raises, as a `StoreError` naming its run (and step).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from agentreplay_core import _codec
from agentreplay_core._errors import StoreError
from agentreplay_core._model import Run, RunStatus, Step
from agentreplay_core.stores import _sql
from agentreplay_core.stores._backend import PendingStep

__all__ = [
    "MAX_VECTOR_DIMS",
    "ODD_METADATA_KEY",
    "fetch_rows",
    "gc_paused",
    "run_from_row",
    "step_from_row",
    "step_values",
    "vector_text",
]

MAX_VECTOR_DIMS = 16_000  # pgvector's limit for the `vector` type
_FLOAT32_MAX = 3.4028234663852886e38
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
    values = [float(x) for x in vector]
    if not 1 <= len(values) <= MAX_VECTOR_DIMS:
        return None
    if not all(math.isfinite(x) and abs(x) <= _FLOAT32_MAX for x in values):
        return None
    return "[" + ",".join(map(repr, values)) + "]"


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
        Jsonb(s.input_json, dumps=_as_is), Jsonb(s.output_json, dumps=_as_is), s.is_error,
        s.started_at, s.duration_ms, s.checksum,
    )  # fmt: skip


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


def step_from_row(r: tuple[Any, ...]) -> Step:
    """A loaded `run_log` row; raises `StoreError` naming the step if its JSON cannot be parsed."""
    loads = _codec.loads
    try:
        input_, output = loads(r[6]), loads(r[7])
    except ValueError as exc:  # orjson's JSONDecodeError: 1e400, nesting deeper than 1024
        column = "output" if _parses(r[6]) else "input"
        raise StoreError(f"step {r[1]} of run {r[0]} cannot be read: its {column} is JSON "
                         f"agentreplay cannot parse ({exc}); {_CHANGED_HINT}") from exc
    return Step.model_construct(
        run_id=r[0], step=r[1], kind=r[2], name=r[3], match_key=r[4], path=r[5],
        input=input_, output=output, is_error=r[8], started_at=r[9], duration_ms=r[10],
        checksum=r[11],
    )  # fmt: skip


def _parses(text: str) -> bool:
    try:
        _codec.loads(text)
    except ValueError:
        return False
    return True
