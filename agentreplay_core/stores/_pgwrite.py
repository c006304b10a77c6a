"""The recorder's write path into PostgreSQL: runs, steps, their vectors and seals.

What one commit costs decides the recorder's throughput more than any client CPU: a write
is a round trip and, on commit, a flush of the WAL to disk. So a short run goes in as one
transaction (its row sealed already, its steps in the same statement), a handful of steps as
one multi-row INSERT, and more as one binary COPY.
`PostgresBackend` adds the connections, the schema and the reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg import sql

from agentreplay_core import _codec
from agentreplay_core._errors import RunNotFound, StoreError
from agentreplay_core._model import Run, RunStatus
from agentreplay_core._plural import counted
from agentreplay_core.stores import _pgpipeline, _sql, _sql_staging
from agentreplay_core.stores._backend import (
    EmbeddingRow,
    LazyRows,
    PendingStep,
    RunFinish,
    SealLater,
    made,
)
from agentreplay_core.stores._pgconn import Conn, PostgresPart, SessionLimits
from agentreplay_core.stores._pgrows import (
    binary_step_rows,
    binary_vector_rows,
    in_column_range,
    step_values,
    vector_binary,
)

#: batches up to this many steps (without vectors) are written with one INSERT, not COPY
SMALL_BATCH = 8
#: the payload bytes one statement carries at most (a row larger than this goes alone). Every
#: statement must end within `write_statement_timeout` (10 s by default): ten steps of 120 MB,
#: each allowed by `max_value_bytes`, went as one COPY that the server cancelled on every
#: retry and on every load of the spool, so they were never stored. A transaction may hold
#: many statements: a batch stays all or nothing.
STATEMENT_BYTES = 32 * 1024 * 1024

_T = TypeVar("_T")


class PostgresWrites(PostgresPart):
    """The write half of `PostgresBackend`."""

    has_pgvector: bool
    #: how long a recorder's write waits for a connection
    write_timeout: float
    limits: SessionLimits
    _rendered: dict[tuple[str, int], str]

    def _query(self, conn: Conn, name: str, rows: int = 0) -> str:
        """A write statement of `_sql` (`rows` steps) rendered for this server. Rendering a
        composed query costs ~100 us per execute, as much as the round trip itself: each
        shape is rendered once."""
        key = (name, rows)
        query = self._rendered.get(key)
        if query is None:
            composed = _WRITES[name](self.schema, rows)
            query = self._rendered[key] = composed.as_string(conn)
        return query

    def create_run(self, run: Run) -> None:
        with self._connection(f"create run {run.run_id}", self.write_timeout,
                              write=True) as conn:
            conn.execute(self._query(conn, "run"), _run_values(run))

    def finish_run(self, finish: RunFinish) -> None:
        with self._connection(f"finish run {finish.run_id}", self.write_timeout,
                              write=True) as conn:
            _sealed(conn.execute(self._query(conn, "seal"), _seal_values(finish)), finish)

    atomic_groups = True

    def write_group(self, run: Run | None, steps: Sequence[PendingStep],
                    embeddings: Sequence[EmbeddingRow],
                    finish: RunFinish | SealLater | None) -> None:
        """All in one transaction, so one commit (one WAL flush to disk) for a short run:
        its row goes in sealed already when the seal is part of the group, and a few steps
        go in one statement with the run's row or with its seal (one round trip).

        `LazyRows` are made while the COPY sends them (the server receives and parses the
        first while the client makes the last), and a `SealLater` after them: a run sealed in
        the same group then has its row written after its steps (the transaction makes the
        order invisible)."""
        if run is None and finish is None:
            self.append(steps, embeddings)
            return
        named = run or finish
        assert named is not None
        action = f"store run {named.run_id} with {counted(len(steps), 'step')}"
        vectors = self._vector_rows(embeddings)
        few = _few(steps)
        if few:
            finish = made(finish)  # few rows to make first
        if run is not None and isinstance(finish, RunFinish) and run.run_id == finish.run_id:
            run, finish = _sealed_run(run, finish), None
        with self._connection(action, self.write_timeout, write=True) as conn:
            if few and not vectors and (run is None or finish is None):
                self._one_statement(conn, run, steps, made(finish))
                return
            if run is not None and isinstance(finish, SealLater) \
                    and finish.run_id == run.run_id and isinstance(steps, LazyRows) \
                    and not vectors and _pgpipeline.supported():
                self._pipelined(conn, run, steps, finish)
                return
            with conn.transaction(), conn.cursor() as cur:
                # a run sealed later in this group: its row after its steps, sealed then
                last = run is not None and isinstance(finish, SealLater) \
                    and finish.run_id == run.run_id
                if run is not None and not last:
                    cur.execute(self._query(conn, "run"), _run_values(run))
                self._write_steps(cur, steps, vectors, idempotent=False)
                sealed = made(finish)
                if last and run is not None:
                    if sealed is not None:
                        run, sealed = _sealed_run(run, sealed), None
                    cur.execute(self._query(conn, "run"), _run_values(run))
                if sealed is not None:
                    _sealed(cur.execute(self._query(conn, "seal"), _seal_values(sealed)),
                            sealed)

    def _pipelined(self, conn: Conn, run: Run, steps: LazyRows, finish: SealLater) -> None:
        """A burst run's one group: its steps made while they are sent, then its row sealed
        (`_pgpipeline`)."""
        def sealed_row() -> str:
            sealed = made(finish)
            row = run if sealed is None else _sealed_run(run, sealed)
            return psycopg.ClientCursor(conn).mogrify(self._query(conn, "run"),
                                                      _run_values(row))

        limits = self.limits
        # no reply for longer than a statement may run: the connection is gone
        patience = max(limits.statement_timeout, limits.lock_timeout) + 10.0 \
            if limits.statement_timeout else None
        insert = self._query(conn, "insert arrays").encode(conn.info.encoding)
        _pgpipeline.write_in_pipeline(conn, insert, steps, sealed_row, patience,
                                      prepare=not limits.pooled)

    def _one_statement(self, conn: Conn, run: Run | None, steps: Sequence[PendingStep],
                       finish: RunFinish | None) -> None:
        """A few steps with a run's row or with a seal (one of the two), atomic as one
        statement."""
        params = [v for s in steps for v in step_values(s)]
        n = len(steps)
        if run is None and finish is None:  # a seal made later that had nothing to seal
            if n:
                conn.execute(self._query(conn, "insert", n), params)
        elif run is not None:
            conn.execute(self._query(conn, "run+steps", n) if n else self._query(conn, "run"),
                         [*_run_values(run), *params])
        elif finish is not None:
            _sealed(conn.execute(self._query(conn, "steps+seal", n) if n
                                 else self._query(conn, "seal"),
                                 [*params, *_seal_values(finish)]), finish)

    def append(
        self,
        steps: Sequence[PendingStep],
        embeddings: Sequence[EmbeddingRow] = (),
        *,
        idempotent: bool = False,
    ) -> None:
        vectors = self._vector_rows(embeddings)
        if not steps and not vectors:
            return
        runs = sorted(map(str, {s.run_id for s in steps}))
        more = f" and {len(runs) - 3} more" if len(runs) > 3 else ""
        action = f"store {counted(len(steps), 'step')} of run {', '.join(runs[:3]) or '-'}{more}"
        try:
            with self._connection(action, self.write_timeout, write=True) as conn:
                few = _few(steps)
                if not vectors and few:
                    # A single INSERT is atomic on its own: one round trip instead of
                    # BEGIN + COPY + COMMIT, which is what a `sync` recorder pays per step.
                    with conn.cursor() as cur:
                        self._insert(cur, steps, idempotent)
                elif not vectors and not idempotent and _payload(steps) <= STATEMENT_BYTES:
                    # One COPY on an autocommit connection is atomic on its own: no BEGIN and
                    # COMMIT round trips. Each wait on the server costs the writer thread a
                    # wait for the GIL when the agent's thread is busy (up to the switch
                    # interval, 5 ms), so round trips cost more here than their latency.
                    with conn.cursor() as cur:
                        self._copy_steps(cur, steps, idempotent)
                else:
                    with conn.transaction(), conn.cursor() as cur:
                        self._write_steps(cur, steps, vectors, idempotent)
        except StoreError as exc:
            if isinstance(exc.__cause__, psycopg.errors.UniqueViolation):
                raise StoreError(
                    f"{exc}; nothing of this batch was stored (a batch is all or nothing). "
                    "Use idempotent=True to skip steps that are already stored"
                ) from exc.__cause__
            raise

    def _vector_rows(self, embeddings: Sequence[EmbeddingRow]
                     ) -> list[tuple[UUID, int, int, bytes]]:
        """The pgvector copies of the vectors that fit pgvector (none without it)."""
        vectors = []
        if self.has_pgvector:
            for e in embeddings:
                packed = vector_binary(e.vector)
                if packed is not None:  # the exact values live in the step output anyway
                    vectors.append((e.run_id, e.step, e.position, packed))
        return vectors

    def _write_steps(self, cur: psycopg.Cursor[Any], steps: Sequence[PendingStep],
                     vectors: list[tuple[UUID, int, int, bytes]], idempotent: bool) -> None:
        """Steps and the pgvector copies of their vectors, inside the caller's transaction."""
        if steps and _few(steps):
            self._insert(cur, steps, idempotent)
        elif steps:
            self._copy_steps(cur, steps, idempotent)
        if vectors:
            self._copy_vectors(cur, vectors, idempotent)

    def _insert(self, cur: psycopg.Cursor[Any], steps: Sequence[PendingStep],
                idempotent: bool) -> None:
        """Up to `SMALL_BATCH` steps in one multi-row INSERT."""
        cur.execute(self._query(cur.connection, _IDEMPOTENT_INSERT if idempotent else "insert",
                                len(steps)), [v for s in steps for v in step_values(s)])

    def _copy_steps(self, cur: psycopg.Cursor[Any], steps: Sequence[PendingStep],
                    idempotent: bool) -> None:
        """Binary COPY, rendered here: half the client CPU of `write_row` with `Jsonb`
        wrappers (~2 us of Python per row). Rows still to be made (`LazyRows`) are made as
        their chunks go. Text COPY, which PostgreSQL stores as it arrives where it stores
        binary rows at the COPY's end, ended a short run's COPY sooner, but it cost the
        client two to four times the CPU to render and, on a 2-core VM, more than it saved:
        100-step runs took 2-14% less time and 16-22% less CPU in binary
        (`benchmarks/RESULTS.md`)."""
        if idempotent:
            cur.execute(_sql_staging.create_stage_steps(self.schema))
        zone = cur.connection.info.timezone
        query = self._query(cur.connection, "copy, staged" if idempotent else "copy")
        for n, part in enumerate(_in_slices(steps, _step_bytes)):
            if n and idempotent:
                cur.execute(_sql_staging.clear_stage_steps())
            with cur.copy(query) as copy:
                _write_chunks(copy, binary_step_rows(part, zone), "step")
            if idempotent:
                cur.execute(_sql_staging.merge_staged_steps(self.schema))

    def _copy_vectors(
        self, cur: psycopg.Cursor[Any], rows: list[tuple[UUID, int, int, bytes]],
        idempotent: bool,
    ) -> None:
        if idempotent:
            cur.execute(_sql_staging.create_stage_vectors(self.schema))
        query = self._query(cur.connection, "vectors, staged" if idempotent else "vectors")
        for n, part in enumerate(_in_slices(rows, lambda row: len(row[3]))):
            if n and idempotent:
                cur.execute(_sql_staging.clear_stage_vectors())
            with cur.copy(query) as copy:
                _write_chunks(copy, binary_vector_rows(part), "vector")
            if idempotent:
                cur.execute(_sql_staging.merge_staged_vectors(self.schema))


def _step_bytes(step: PendingStep) -> int:
    return len(step.stored_input) + len(step.output_json)


def _payload(steps: Sequence[PendingStep]) -> int:
    """The payload bytes of `steps`; `STATEMENT_BYTES` + 1 for rows not made yet (`LazyRows`,
    made as a COPY sends them: as many as a statement may take, or more)."""
    if isinstance(steps, LazyRows):
        return STATEMENT_BYTES + 1
    return sum(map(_step_bytes, steps))


def _few(steps: Sequence[PendingStep]) -> bool:
    """Whether `steps` go in one INSERT: a handful, small enough for one statement."""
    return len(steps) <= SMALL_BATCH and _payload(steps[:SMALL_BATCH]) <= STATEMENT_BYTES


def _in_slices(items: Iterable[_T], size: Callable[[_T], int]) -> Iterator[Iterator[_T]]:
    """`items` in consecutive slices of at least `STATEMENT_BYTES` each but the last, read as
    they are sent (rows still to be made are made one by one, as before). Each slice must be
    read to its end before the next is taken."""
    rest = iter(items)
    for first in rest:
        yield _slice(first, rest, size)


def _slice(first: _T, rest: Iterator[_T], size: Callable[[_T], int]) -> Iterator[_T]:
    yield first
    total = size(first)
    while total < STATEMENT_BYTES:
        item = next(rest, None)
        if item is None:
            return
        yield item
        total += size(item)


def _write_chunks(copy: psycopg.Copy, chunks: Iterator[bytearray], what: str) -> None:
    """Send rendered binary COPY data (`in_column_range`)."""
    with in_column_range(what):
        for chunk in chunks:
            copy.write(chunk)


def _run_values(run: Run) -> tuple[Any, ...]:
    return (
        run.run_id, run.name, run.status.value, run.started_at, run.finished_at,
        run.parent_run_id, run.fork_step, _codec.dumps(run.metadata).decode(),
        run.step_count, run.head_checksum, run.format_version, run.chain,
    )  # fmt: skip


def _sealed_run(run: Run, finish: RunFinish) -> Run:
    """The run's row with its seal: written once instead of inserted and then updated."""
    return run.model_copy(update={
        "status": RunStatus(finish.status), "step_count": finish.step_count,
        "head_checksum": finish.head_checksum, "finished_at": finish.finished_at})


def _seal_values(finish: RunFinish) -> tuple[Any, ...]:
    return (
        RunStatus(finish.status).value, finish.step_count, finish.head_checksum,
        finish.finished_at, finish.run_id,
    )  # fmt: skip


def _sealed(cur: psycopg.Cursor[Any], finish: RunFinish) -> None:
    if cur.rowcount == 0:
        raise RunNotFound(finish.run_id)


_IDEMPOTENT_INSERT = "insert, idempotent"
#: the write statements `_query` renders, by name: (schema, rows) -> statement
_WRITES: dict[str, Callable[[str, int], sql.Composed]] = {
    "run": lambda schema, _: _sql.insert_run(schema),
    "seal": lambda schema, _: _sql.finish_run(schema),
    "insert": lambda schema, rows: _sql.insert_steps(schema, rows, idempotent=False),
    _IDEMPOTENT_INSERT: lambda schema, rows: _sql.insert_steps(schema, rows, idempotent=True),
    "copy": lambda schema, _: _sql.copy_steps(schema),
    "insert arrays": lambda schema, _: _pgpipeline.insert_arrays(schema),
    "copy, staged": lambda schema, _: _sql_staging.copy_staged_steps(),
    "vectors": lambda schema, _: _sql.copy_vectors(schema),
    "vectors, staged": lambda schema, _: _sql_staging.copy_staged_vectors(),
    "run+steps": _sql.insert_run_and_steps,
    "steps+seal": _sql.insert_steps_and_seal,
}
