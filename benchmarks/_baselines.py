"""The baselines the issue names, implemented here so that every run compares side by side:
the seed design's recorder, and raw COPY of pre-built rows (the ceiling of the server)."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg import sql

from agentreplay_core.stores._sql import EMBEDDING_COLUMNS, STEP_COLUMNS
from benchmarks._payloads import json_text

#: rows per COPY transaction of the raw baseline: the batched writer's largest batch
COPY_BATCH = 1_000


def create_seed_table(conn: psycopg.Connection[Any], schema: str) -> None:
    """The seed's table: one row per step, JSONB payloads, a checksum, no COPY."""
    conn.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (run_id uuid, step integer, kind text, name text, "
        "input jsonb, output jsonb, checksum text, created_at timestamptz DEFAULT now(), "
        "PRIMARY KEY (run_id, step))").format(sql.Identifier(schema, "seed_log")))


def seed_record(conn: psycopg.Connection[Any], schema: str,
                steps: Sequence[tuple[Any, Any]]) -> float:
    """Record `steps` as the seed did; seconds per step, all of it on the caller's thread.

    One autocommit INSERT per step (`conn` must be in autocommit), and the chain
    SHA-256(previous || json.dumps(input) || json.dumps(output)) computed in Python.
    """
    insert = sql.SQL("INSERT INTO {} (run_id, step, kind, name, input, output, checksum) "
                     "VALUES (%s, %s, 'llm', 'chat_model', %s, %s, %s)").format(
        sql.Identifier(schema, "seed_log"))
    run_id, previous = uuid.uuid4(), ""
    t0 = time.perf_counter()
    for number, (request, response) in enumerate(steps, 1):
        text_in, text_out = json.dumps(request), json.dumps(response)
        previous = hashlib.sha256((previous + text_in + text_out).encode()).hexdigest()
        conn.execute(insert, (run_id, number, text_in, text_out, previous))
    return (time.perf_counter() - t0) / len(steps)


def create_raw_tables(conn: psycopg.Connection[Any], schema: str) -> None:
    """`raw_log` and `raw_embeddings`: the shape of agentreplay's tables (columns, keys,
    indexes, checks, column storage and the table's storage parameters, such as its TOAST
    target), for the raw COPY baseline."""
    for raw, like in (("raw_log", "run_log"), ("raw_embeddings", "embeddings")):
        row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)",
                           (f'"{schema}"."{like}"',)).fetchone()
        if row is None:  # no embeddings table without pgvector
            continue
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (LIKE {} INCLUDING ALL)").format(
            sql.Identifier(schema, raw), sql.Identifier(schema, like)))
        if row[0]:  # LIKE copies no storage parameters
            conn.execute(sql.SQL("ALTER TABLE {} SET ({})").format(
                sql.Identifier(schema, raw), sql.SQL(", ").join(map(sql.SQL, row[0]))))


def step_rows(steps: Sequence[tuple[Any, Any]], name: str = "chat_model",
              kind: str = "llm") -> list[tuple[Any, ...]]:
    """Pre-built `run_log` rows for `steps` (a new run id; placeholder key and checksum of
    the real widths): no encoding, no chain, nothing left to compute."""
    run_id, now = uuid.uuid4(), datetime.now(timezone.utc)
    return [(run_id, number, kind, name, "0" * 32, f"{kind}:{name}", json_text(request),
             json_text(response), False, now, 0.0, "0" * 64)
            for number, (request, response) in enumerate(steps, 1)]


def vector_rows(steps: Sequence[tuple[Any, ...]],
                vectors: Sequence[Sequence[Sequence[float]]]) -> list[tuple[Any, ...]]:
    """Pre-built `embeddings` rows (pgvector text) for the vectors of each step row."""
    return [(row[0], row[1], position, len(vector), "[" + ",".join(map(repr, vector)) + "]")
            for row, step_vectors in zip(steps, vectors, strict=True)
            for position, vector in enumerate(step_vectors)]


def raw_copy(conn: psycopg.Connection[Any], schema: str, steps: Sequence[tuple[Any, ...]],
             vectors: Sequence[tuple[Any, ...]] = ()) -> float:
    """COPY pre-built rows, `COPY_BATCH` rows per transaction; returns the seconds taken."""
    t0 = time.perf_counter()
    for table, columns, rows in (("raw_log", STEP_COLUMNS, steps),
                                 ("raw_embeddings", EMBEDDING_COLUMNS, vectors)):
        query = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(schema, table), sql.SQL(", ").join(map(sql.Identifier, columns)))
        for start in range(0, len(rows), COPY_BATCH):
            with conn.transaction(), conn.cursor() as cur, cur.copy(query) as copy:
                for row in rows[start:start + COPY_BATCH]:
                    copy.write_row(row)
    return time.perf_counter() - t0
