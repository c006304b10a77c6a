"""The read half of `PostgresBackend`: runs, steps and vector search, and the deletes.

Reads that may legitimately run long (a huge run, every run, a vector scan) lift the write
statement timeout for their own transaction (`_unlimited`); the lock timeout stays, so a read
stuck behind a table lock fails and says so instead of hanging.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from uuid import UUID

import psycopg
from psycopg import sql

from agentreplay_core._errors import RunNotFound, StoreError
from agentreplay_core._model import EmbeddingMatch, Run, RunStatus, Step
from agentreplay_core.stores import _sql
from agentreplay_core.stores._pgconn import Conn, PostgresPart
from agentreplay_core.stores._pgload import (
    RowUnreadable,
    can_stream_chunks,
    fetch_rows,
    fetch_steps,
    gc_paused,
    run_from_row,
    stream_steps,
)
from agentreplay_core.stores._pgrows import MAX_VECTOR_DIMS, vector_text

_HEX_RE = re.compile(r"^[0-9a-f]{0,32}$")


class PostgresReads(PostgresPart):
    """The read half of `PostgresBackend`."""

    #: the schema of the pgvector extension, None without it
    _vector_schema: str | None

    @contextmanager
    def _unlimited(self, action: str) -> Iterator[Conn]:
        """A connection in a transaction without statement timeout, for reads (and deletes)
        that may legitimately outlast the write timeout: a huge run, every run, a vector
        scan. The lock timeout stays: a read stuck behind a table lock fails and says so."""
        with self._connection(action) as conn:
            # BEGIN and SET LOCAL in one round trip; the setting ends with the transaction.
            conn.execute(_sql.begin_without_statement_timeout())
            try:
                yield conn
            except BaseException:
                with suppress(psycopg.Error):  # a broken connection is dropped by the pool
                    conn.rollback()
                raise
            conn.commit()

    # -- runs ------------------------------------------------------------------------------

    def mark_incomplete(self, run_id: UUID) -> bool:
        with self._connection(f"mark run {run_id} incomplete") as conn:
            params = (RunStatus.INCOMPLETE.value, run_id, RunStatus.RECORDING.value)
            if conn.execute(_sql.change_status(self.schema), params).rowcount:
                return True
            # Rare (a dead recorder found by a reader): a second look says which case it is.
            if conn.execute(_sql.select_run(self.schema), (run_id,)).fetchone() is None:
                raise RunNotFound(run_id)
            return False

    def get_run(self, run_id: UUID) -> Run:
        with self._connection(f"read run {run_id}") as conn:
            rows = fetch_rows(conn.execute(_sql.select_run(self.schema), (run_id,)), "runs")
        if not rows:
            raise RunNotFound(run_id)
        return run_from_row(rows[0])

    def list_runs(
        self,
        *,
        name: str | None = None,
        status: RunStatus | None = None,
        since: datetime | None = None,
        limit: int | None = None,
        tag: str | None = None,
        before: datetime | None = None,
    ) -> list[Run]:
        query, params = _sql.list_runs(
            self.schema,
            name=name,
            status=None if status is None else RunStatus(status).value,
            since=since,
            limit=limit,
            tag=tag,
            before=before,
        )
        with self._unlimited("list runs") as conn:
            rows = fetch_rows(conn.execute(query, params), "runs")
        return [run_from_row(row) for row in rows]

    def run_ids_like(self, prefix: str, limit: int = 5) -> list[UUID]:
        """Run ids starting with `prefix` (hex digits, dashes ignored), for "did you mean"."""
        digits = prefix.strip().lower().replace("-", "")
        if limit <= 0 or not _HEX_RE.match(digits):
            return []
        low, high = UUID(digits.ljust(32, "0")), UUID(digits.ljust(32, "f"))
        with self._connection("look up run ids") as conn:
            rows = conn.execute(_sql.run_ids_between(self.schema), (low, high, limit)).fetchall()
        return [row[0] for row in rows]

    def delete_run(self, run_id: UUID) -> None:
        """Delete a run's vectors, steps and row in one transaction (no-op if it is absent)."""
        # Without a statement timeout: a huge run takes a while.
        with self._unlimited(f"delete run {run_id}") as conn:
            # Checked each time: another process may have added the table since this opened.
            found = conn.execute(_sql.table_exists(), (self.schema, "embeddings")).fetchone()
            if found and found[0]:
                conn.execute(_sql.delete_rows(self.schema, "embeddings"), (run_id,))
            conn.execute(_sql.delete_rows(self.schema, "run_log"), (run_id,))
            conn.execute(_sql.delete_rows(self.schema, "runs"), (run_id,))

    # -- steps and vectors ----------------------------------------------------------------

    def load_steps(self, run_id: UUID) -> list[Step]:
        """All steps as stored, unvalidated: verification reports tampered values. A row that
        cannot be decoded at all raises `StoreError` naming its run and step. Inputs stored as
        deltas come back whole (`agentreplay_core._delta`); one whose base is gone comes back
        as an unencodable marker saying so, and fails verification.

        The rows are read in the primary key's order (a sort of a long run's rows spills to
        disk) and, where the driver can, streamed in chunks, parsed while the server sends the
        next ones.
        """
        with gc_paused():
            try:
                steps, exists = self._read_steps(
                    run_id, stream_steps if can_stream_chunks() else fetch_steps)
            except RowUnreadable:  # the whole result at once names the row
                steps, exists = self._read_steps(run_id, fetch_steps)
        if not exists:  # no rows: an empty run, or no such run at all
            raise RunNotFound(run_id)
        return steps

    def _read_steps(self, run_id: UUID,
                    read: Callable[[Conn, sql.Composed, UUID], list[Step]]
                    ) -> tuple[list[Step], bool]:
        """A run's steps read in key order by `read`, and whether the run exists."""
        with self._unlimited(f"load the steps of run {run_id}") as conn:
            conn.execute(_sql.read_in_index_order())
            steps = read(conn, _sql.load_steps(self.schema), run_id)
            exists = bool(steps) or conn.execute(_sql.select_run(self.schema),
                                                 (run_id,)).fetchone() is not None
        return steps, exists

    def search_embeddings(self, vector: Sequence[float], limit: int = 10) -> list[EmbeddingMatch]:
        if self._vector_schema is None:
            raise StoreError(
                f"similarity search needs the pgvector extension, which the server at "
                f"{self.description} does not have (schema {self.schema!r}). Install pgvector "
                "(https://github.com/pgvector/pgvector) and reopen the store; vectors recorded "
                "from then on become searchable. Replay does not need it."
            )
        text = vector_text(vector)
        if text is None:
            raise ValueError(
                f"cannot search with this vector: it needs 1 to {MAX_VECTOR_DIMS} finite "
                f"float32-range values (got {len(vector)} values)"
            )
        query = _sql.search_embeddings(self.schema, self._vector_schema)
        with self._unlimited("search embeddings") as conn:
            rows = conn.execute(query, (text, len(vector), max(0, limit))).fetchall()
        return [
            EmbeddingMatch(run_id=r[0], step=r[1], position=r[2], distance=r[3], name=r[4])
            for r in rows
        ]
