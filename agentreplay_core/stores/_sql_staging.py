"""SQL of idempotent appends (a spool loaded again, an import): rows go to a session-private
staging table first, then into the log with `ON CONFLICT DO NOTHING`, so that rows already
there are skipped instead of failing the whole COPY."""

from __future__ import annotations

import functools

from psycopg import sql

from agentreplay_core.stores._sql import (
    EMBEDDING_COLUMNS,
    STEP_COLUMNS,
    copy_binary,
    names,
    qualified,
)

STAGE_STEPS = sql.Identifier("agentreplay_stage_run_log")
STAGE_VECTORS = sql.Identifier("agentreplay_stage_embeddings")


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def create_stage_steps(schema: str) -> sql.Composed:
    """Session-private staging table for idempotent appends, gone at commit."""
    return sql.SQL("CREATE TEMP TABLE {} (LIKE {}) ON COMMIT DROP").format(
        STAGE_STEPS, qualified(schema, "run_log")
    )


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def create_stage_vectors(schema: str) -> sql.Composed:
    return sql.SQL("CREATE TEMP TABLE {} (LIKE {}) ON COMMIT DROP").format(
        STAGE_VECTORS, qualified(schema, "embeddings")
    )


@functools.cache  # built on every write: compose once
def copy_staged_steps() -> sql.Composed:
    return copy_binary(STAGE_STEPS, STEP_COLUMNS)


@functools.cache
def copy_staged_vectors() -> sql.Composed:
    return copy_binary(STAGE_VECTORS, EMBEDDING_COLUMNS)


@functools.cache
def clear_stage_steps() -> sql.Composed:
    """Empties the staging table for the next of a batch's statements (`STATEMENT_BYTES`)."""
    return sql.SQL("TRUNCATE {}").format(STAGE_STEPS)


@functools.cache
def clear_stage_vectors() -> sql.Composed:
    return sql.SQL("TRUNCATE {}").format(STAGE_VECTORS)


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def merge_staged_steps(schema: str) -> sql.Composed:
    return sql.SQL(
        "INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT (run_id, step) DO NOTHING"
    ).format(qualified(schema, "run_log"), names(STEP_COLUMNS), names(STEP_COLUMNS), STAGE_STEPS)


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def merge_staged_vectors(schema: str) -> sql.Composed:
    return sql.SQL(
        "INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT (run_id, step, position) DO NOTHING"
    ).format(
        qualified(schema, "embeddings"),
        names(EMBEDDING_COLUMNS),
        names(EMBEDDING_COLUMNS),
        STAGE_VECTORS,
    )
