"""A burst run's one group (its steps, then its row, sealed) sent as one libpq pipeline.

A run recorded faster than the writer lingers reaches the writer whole at its seal, and the
agent waits for that group. As one binary COPY it waited on the server more than it had to:
BEGIN and COPY's start are round trips before the first row; PostgreSQL stores binary COPY
rows only at the COPY's end, so the server starts on them once the client has made the last;
and the run's row and COMMIT are two more round trips. In a pipeline BEGIN goes out with the
first rows, each chunk of rows is an INSERT of binary arrays that the server stores while the
client makes the next chunk, and the run's row and COMMIT follow the last chunk: one wait, for
the last chunk and the commit. 100-step burst runs of new chat steps took 48.6-51.2 us a step
instead of 57.6-59.0, for ~4 us more of the server's CPU a step (an INSERT stores row by row
where COPY fills pages; `benchmarks/RESULTS.md`). psycopg's own pipeline costs more client
time than this saves, so libpq's pipeline is driven here directly, on a connection the pool
lends and gets back idle, or closed when anything went wrong midway (the server then rolls
the transaction back).
"""

from __future__ import annotations

import functools
import hashlib
import selectors
import struct
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import tzinfo

import psycopg
from psycopg import pq, sql

from agentreplay_core.stores import _sql
from agentreplay_core.stores._backend import PendingStep
from agentreplay_core.stores._pgconn import Conn
from agentreplay_core.stores._pgrows import in_column_range, pg_micros

#: rows an INSERT carries: the server stores one chunk while the client makes the next, and
#: the last chunk is what the agent waits for after the last row is made (25 rows measured
#: best against 10, 34 and 50)
CHUNK_ROWS = 25
#: a chunk is cut sooner when its rows are large, so that the server is never far behind
CHUNK_BYTES = 128 * 1024

# (array type, element type) of each of `_sql.STEP_COLUMNS`, and the arrays unnested in
# that order (the audit of tests/core/test_sql_hostile.py wants SQL text literal)
_UUID, _INT4, _TEXT, _JSONB = (2951, 2950), (1007, 23), (1009, 25), (3807, 3802)
_TYPES = (_UUID, _INT4, _TEXT, _TEXT, _TEXT, _TEXT, _JSONB, _JSONB, (1000, 16), (1185, 1184),
          (1022, 701), _TEXT)
_UNNEST = sql.SQL(
    "unnest($1::uuid[], $2::int4[], $3::text[], $4::text[], $5::text[], $6::text[], "
    "$7::jsonb[], $8::jsonb[], $9::bool[], $10::timestamptz[], $11::float8[], $12::text[])")
_ARRAY_TYPES = [t[0] for t in _TYPES]
_BINARY = [1] * len(_TYPES)
_ARRAY_HEAD = struct.Struct(">iiiii")  # one dimension, no NULLs, element type, length, from 1
_I4 = struct.Struct(">i").pack
_UUID_LEN = _I4(16)
_STEP = struct.Struct(">ii").pack
_JSONB_HEAD = struct.Struct(">ib").pack  # length (with the version byte), version 1
_BOOL = struct.Struct(">i?").pack
_INT8 = struct.Struct(">iq").pack
_FLOAT8 = struct.Struct(">id").pack


#: the statements prepared on each connection (the pool's connections come and go)
_prepared: weakref.WeakKeyDictionary[Conn, set[bytes]] = weakref.WeakKeyDictionary()


def supported() -> bool:
    """Whether this libpq has pipeline mode (14 or later)."""
    return psycopg.Pipeline.is_supported()


@functools.lru_cache(maxsize=128)
def insert_arrays(schema: str) -> sql.Composed:
    """INSERT of the rows held by one binary array a column (`step_arrays`)."""
    return sql.SQL("INSERT INTO {} ({}) SELECT * FROM {}").format(
        _sql.qualified(schema, "run_log"),
        sql.SQL(", ").join(map(sql.Identifier, _sql.STEP_COLUMNS)), _UNNEST)


def step_arrays(rows: Sequence[PendingStep], session_zone: tzinfo) -> list[bytes]:
    """`rows` as one binary array a column, in `STEP_COLUMNS` order: the values as binary
    COPY writes them (`_pgrows.binary_step_rows`)."""
    n = len(rows)
    cols = [bytearray(_ARRAY_HEAD.pack(1, 0, element, n, 1)) for _, element in _TYPES]
    run_ids, steps, kinds, names, keys, paths, inputs, outputs, errors, starts, durations, \
        checksums = cols
    for s in rows:
        run_ids += _UUID_LEN
        run_ids += s.run_id.bytes
        steps += _STEP(4, s.step)
        for col, text in ((kinds, s.kind), (names, s.name), (keys, s.match_key),
                          (paths, s.path), (checksums, s.checksum)):
            data = text.encode()
            col += _I4(len(data))
            col += data
        stored_in = s.stored_input
        inputs += _JSONB_HEAD(len(stored_in) + 1, 1)
        inputs += stored_in
        outputs += _JSONB_HEAD(len(s.output_json) + 1, 1)
        outputs += s.output_json
        errors += _BOOL(1, s.is_error)
        starts += _INT8(8, pg_micros(s.started_at, session_zone))
        durations += _FLOAT8(8, s.duration_ms)
    return [bytes(c) for c in cols]


def chunks(rows: Iterable[PendingStep]) -> Iterable[list[PendingStep]]:
    """`rows` (made as they are read) in chunks of `CHUNK_ROWS`, or fewer large ones."""
    chunk: list[PendingStep] = []
    size = 0
    for row in rows:
        chunk.append(row)
        size += len(row.stored_input) + len(row.output_json)
        if len(chunk) == CHUNK_ROWS or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def write_in_pipeline(conn: Conn, insert: bytes, rows: Iterable[PendingStep],
                      last: Callable[[], str], timeout: float | None,
                      *, prepare: bool = True) -> None:
    """BEGIN, an INSERT of each chunk of `rows` sent as soon as it is made, the statement
    `last()` returns once they are all made (the run's row, its values inline), COMMIT: one
    pipeline, one wait at its end. The INSERT is prepared once a connection: planned anew
    for every chunk it cost the server a fifth more CPU a row; `prepare=False` plans it anew
    all the same, for a server session that a transaction pooler may swap between groups.
    A statement the server refuses raises its psycopg error; a failure of the connection, or
    no reply for `timeout` seconds (None: no limit, as psycopg's own waits), closes the
    connection."""
    pg = conn.pgconn
    zone = conn.info.timezone
    encoding = conn.info.encoding
    name = _statement_name(insert) if prepare else b""
    # unprepared, the unnamed statement counts as prepared, in a set that nothing keeps
    prepared = _prepared.setdefault(conn, set()) if prepare else {name}
    wire = _Wire(pg, timeout)
    inserted: list[int] = []
    try:
        pg.enter_pipeline_mode()
        preparing = name not in prepared
        if preparing:
            pg.send_prepare(name, insert, param_types=_ARRAY_TYPES)
        pg.send_query_params(b"BEGIN", None)
        for chunk in chunks(rows):
            with in_column_range("step"):  # as the COPY path refuses it: not retried
                arrays = step_arrays(chunk, zone)
            if prepare:
                pg.send_query_prepared(name, arrays, param_formats=_BINARY)
            else:
                pg.send_query_params(insert, arrays, param_types=_ARRAY_TYPES,
                                     param_formats=_BINARY)
            inserted.append(len(chunk))
            pg.send_flush_request()  # the server answers as it goes, nothing waits for it
            wire.send()
        pg.send_query_params(last().encode(encoding), None)
        pg.send_query_params(b"COMMIT", None)
        pg.pipeline_sync()
        wire.send()
        refused = wire.results(inserted, first=2 if preparing else 1)
        pg.exit_pipeline_mode()
    except BaseException:
        conn.close()  # mid-pipeline there is nothing to resume; the server rolls back
        raise
    finally:
        wire.close()
    if wire.prepared or refused is None:  # a PREPARE outlives the transaction
        prepared.add(name)
    if refused is None:
        return
    state = refused.error_field(pq.DiagnosticField.SQLSTATE)
    if state == b"42P05":  # prepared already, which this process missed: use it from now on
        prepared.add(name)
    elif state == b"26000":  # deallocated behind our back: prepared again next time
        prepared.discard(name)
    # the pool's connection context rolls the transaction back
    raise psycopg.errors.error_from_result(refused, encoding=encoding)


@functools.lru_cache(maxsize=128)
def _statement_name(insert: bytes) -> bytes:
    """The name the INSERT is prepared under: one per statement text (schema)."""
    return b"agentreplay_steps_" + hashlib.sha256(insert).hexdigest()[:16].encode()


class _Wire:
    """libpq's non-blocking socket, waited on with the GIL released."""

    def __init__(self, pg: pq.abc.PGconn, timeout: float | None) -> None:
        self.pg = pg
        self.timeout = timeout
        #: the pipeline's PREPARE succeeded (whatever came after it)
        self.prepared = False
        self.selector = selectors.DefaultSelector()
        self.selector.register(pg.socket, selectors.EVENT_READ | selectors.EVENT_WRITE)

    def close(self) -> None:
        self.selector.close()

    def _wait(self, events: int) -> int:
        self.selector.modify(self.pg.socket, events)
        ready = self.selector.select(self.timeout)
        if not ready:
            raise psycopg.OperationalError(
                f"no reply from the server within {self.timeout or 0:g}s")
        return ready[0][1]

    def send(self) -> None:
        """Hand libpq's buffered output to the server, taking in its replies meanwhile (a
        server blocked on sending them would stop reading)."""
        while self.pg.flush():
            if self._wait(selectors.EVENT_READ | selectors.EVENT_WRITE) \
                    & selectors.EVENT_READ:
                self.pg.consume_input()

    def results(self, inserted: list[int], first: int) -> pq.abc.PGresult | None:
        """Read the pipeline's results up to its sync: the first the server refused, if any.
        `inserted` are the rows of each INSERT, the first of which is statement `first`
        (after a PREPARE and BEGIN, or BEGIN); one that stored other than its chunk's rows
        is an error of this code, and must not be taken for a success."""
        pg = self.pg
        refused: pq.abc.PGresult | None = None
        statement = 0  # [PREPARE], BEGIN, the INSERTs, the last statement, COMMIT
        ended = False  # the previous result ended a statement's results
        while True:
            while pg.is_busy():
                self._wait(selectors.EVENT_READ)
                pg.consume_input()
            result = pg.get_result()
            if result is None:  # the end of one statement's results
                if ended:  # nothing is coming: the sync is lost, and with it the pipeline
                    raise psycopg.OperationalError("the pipeline's results ended before "
                                                   "its sync")
                statement, ended = statement + 1, True
                continue
            ended = False
            status = result.status
            if status == pq.ExecStatus.PIPELINE_SYNC:
                return refused
            if status == pq.ExecStatus.FATAL_ERROR and refused is None:
                refused = result
            elif status == pq.ExecStatus.COMMAND_OK and statement == 0 and first == 2:
                self.prepared = True
            elif status == pq.ExecStatus.COMMAND_OK \
                    and first <= statement < first + len(inserted) \
                    and result.command_tuples != inserted[statement - first]:
                raise psycopg.InternalError(
                    f"an INSERT of {inserted[statement - first]} rows stored "
                    f"{result.command_tuples}")
