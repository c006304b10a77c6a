"""Rows from the PostgreSQL tables: loaded runs and steps, read whole or streamed.

Loaded rows are taken as stored, without validation: a row changed behind agentreplay's back
must reach verification, which reports it, instead of failing the load. Only a value that
cannot be decoded at all raises, as a `StoreError` naming its run (and step).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, cast
from uuid import UUID

import psycopg

from agentreplay_core import _codec
from agentreplay_core._delta import DeltaResolver
from agentreplay_core._errors import StoreError
from agentreplay_core._model import Run, RunStatus, Step, loaded_step
from agentreplay_core.stores import _sql

#: where a `runs.metadata` value that is not a JSON object (or not parseable) is kept
ODD_METADATA_KEY = "invalid_metadata"
#: what converting a fetched value can raise (UnicodeDecodeError is a ValueError)
_UNDECODABLE = (psycopg.DataError, ValueError)
_CHANGED_HINT = (
    "agentreplay never writes such a value: the row was changed outside it. Restore the row "
    "from a backup or delete the run"
)


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
