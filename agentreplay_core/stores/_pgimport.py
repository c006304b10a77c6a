"""An imported run into PostgreSQL in one transaction: all of it, or the store as it was.

`agentreplay import` of a 6,000-step run takes seconds; a Ctrl-C, a kill or a dropped
connection in the middle must not leave a sealed run holding part of its steps, and
`--replace` must not lose the stored copy before the new one is whole. So the stored copy's
delete, the run's row, its steps and their vectors are one transaction. It runs without a
statement timeout (a huge run's COPY may outlast the recorder's write timeout); the lock
timeout stays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg

from agentreplay_core._errors import StoreError
from agentreplay_core._model import Run
from agentreplay_core.stores import _sql
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep
from agentreplay_core.stores._pgwrite import _run_values
from agentreplay_core.stores._postgres import PostgresBackend

#: the run's steps in batches, each with the vectors of its steps
Batches = Iterable[tuple[Sequence[PendingStep], Sequence[EmbeddingRow]]]


class AlreadyStored(StoreError):
    """The run is stored and the import was not asked to replace it."""


class ImportBusy(StoreError):
    """Another import of the same run is under way."""


def import_whole(backend: PostgresBackend, run: Run, batches: Batches, *, replace: bool,
                 done: Callable[[int], None] | None = None) -> bool:
    """Store `run` (its row as given) and every batch in one transaction; returns whether a
    stored run with the same id was replaced. `done(n)` is called with the steps written
    so far after each batch (nothing is visible to others before the commit).

    Raises `AlreadyStored` (the run is there, `replace` is false), `ImportBusy` (another
    import of it holds its turn), or `StoreError`; the store is then as it was.
    """
    schema = backend.schema
    with backend._unlimited(f"import run {run.run_id}") as conn, conn.cursor() as cur:
        # One import of a run at a time: two `--replace` imports would otherwise delete and
        # insert over each other and one end in a raw duplicate-key error. Not waiting keeps
        # a second import from hanging behind a long one.
        taken = cur.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
                            (f"agentreplay import {schema} {run.run_id}",)).fetchone()
        if not taken or not taken[0]:
            raise ImportBusy(f"another import of run {run.run_id} into {backend.description} "
                             "is under way; try again when it has finished")
        stored = cur.execute(_sql.select_run(schema), (run.run_id,)).fetchone() is not None
        if stored and not replace:
            raise AlreadyStored(f"run {run.run_id} already exists in {backend.description}")
        if stored:
            _delete(backend, cur, run)
        cur.execute(backend._query(conn, "run"), _run_values(run))
        written = 0
        for steps, embeddings in batches:
            backend._write_steps(cur, steps, backend._vector_rows(embeddings), idempotent=False)
            written += len(steps)
            if done is not None:
                done(written)
    return stored


def _delete(backend: PostgresBackend, cur: psycopg.Cursor[Any], run: Run) -> None:
    found = cur.execute(_sql.table_exists(), (backend.schema, "embeddings")).fetchone()
    tables = ("embeddings", "run_log", "runs") if found and found[0] else ("run_log", "runs")
    for table in tables:
        cur.execute(_sql.delete_rows(backend.schema, table), (run.run_id,))
