"""SQL of the PostgreSQL store, as pure functions building `psycopg.sql` objects.

Every identifier (the schema, the pgvector schema, temporary tables) is passed as
`sql.Identifier`, every value as a query parameter; nothing is formatted into SQL text.
The migrations' own statements are in `_migrate_sql`, the staging of idempotent appends in
`_sql_staging`.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime
from typing import Any

import orjson
from psycopg import sql

from agentreplay_core._errors import StoreError

_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")

#: columns of `runs` in the order `select_run` / `list_runs` return them
RUN_COLUMNS = (
    "run_id", "name", "status", "started_at", "finished_at", "parent_run_id", "fork_step",
    "metadata", "step_count", "head_checksum", "format_version", "chain",
)  # fmt: skip
#: columns of `run_log` in the order COPY receives and `load_steps` returns them
STEP_COLUMNS = (
    "run_id", "step", "kind", "name", "match_key", "path", "input", "output", "is_error",
    "started_at", "duration_ms", "checksum",
)  # fmt: skip
EMBEDDING_COLUMNS = ("run_id", "step", "position", "dims", "embedding")
_JSON_COLUMNS = frozenset({"metadata", "input", "output"})



class InvalidSchemaName(StoreError, ValueError):
    """A schema name the store refuses (a `StoreError`, and a `ValueError` as before)."""


def check_schema_name(schema: str) -> str:
    """Return `schema` if it is a valid store schema name, else raise `InvalidSchemaName`.

    Names are quoted as identifiers anyway; the rule keeps them plain, so a name never needs
    quoting in psql and is never cut to PostgreSQL's 63 bytes into another schema's name.
    """
    if isinstance(schema, str) and schema.startswith("pg_"):
        raise InvalidSchemaName(f"invalid schema name {schema!r}: PostgreSQL reserves names "
                                "starting with 'pg_' for its system schemas")
    if not isinstance(schema, str) or not _SCHEMA_RE.match(schema):
        raise InvalidSchemaName(
            f"invalid schema name {schema!r}: use 1 to 63 ASCII letters, digits and '_', "
            "not starting with a digit (for example 'agentreplay' or 'agentreplay_ci')"
        )
    return schema


def qualified(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


def names(columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL(", ").join(map(sql.Identifier, columns))


def _select_list(columns: tuple[str, ...]) -> sql.Composed:
    # JSON comes back as text so the codec parses it, not psycopg's json loader.
    items = [
        sql.SQL("{}::text").format(sql.Identifier(c)) if c in _JSON_COLUMNS else sql.Identifier(c)
        for c in columns
    ]
    return sql.SQL(", ").join(items)


# -- sessions -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def set_config(count: int) -> sql.Composed:
    """Parameters: name, value, ... for `count` session settings."""
    one = sql.SQL("set_config(%s, %s, false)")
    return sql.SQL("SELECT {}").format(sql.SQL(", ").join([one] * count))


def begin_without_statement_timeout() -> sql.SQL:
    """Two statements without parameters: psycopg sends them in one simple-protocol message."""
    return sql.SQL("BEGIN; SET LOCAL statement_timeout = 0")


def read_in_index_order() -> sql.SQL:
    """For the rest of the transaction: rows asked for in key order come from the index in
    that order. Without it the planner sorts a long run's rows, after reading them all (so
    nothing streams), in a sort that spills to disk."""
    return sql.SQL("SET LOCAL enable_sort = off")


# -- catalog ------------------------------------------------------------------------------


def table_exists() -> sql.SQL:
    """Parameters: schema, table name."""
    return sql.SQL(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables "
        "WHERE schemaname = %s AND tablename = %s)"
    )


def vector_type(vector_schema: str) -> sql.Composed:
    return sql.SQL("{}.vector").format(sql.Identifier(vector_schema))


# -- runs ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def insert_run(schema: str) -> sql.Composed:
    """Parameters: the values of RUN_COLUMNS, metadata as JSON text."""
    values = [
        sql.SQL("%s::jsonb") if c in _JSON_COLUMNS else sql.Placeholder() for c in RUN_COLUMNS
    ]
    return sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (run_id) DO NOTHING").format(
        qualified(schema, "runs"), names(RUN_COLUMNS), sql.SQL(", ").join(values)
    )


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def finish_run(schema: str) -> sql.Composed:
    """Parameters: status, step_count, head_checksum, finished_at, run_id."""
    return sql.SQL(
        "UPDATE {} SET status = %s, step_count = %s, head_checksum = %s, finished_at = %s "
        "WHERE run_id = %s"
    ).format(qualified(schema, "runs"))


def change_status(schema: str) -> sql.Composed:
    """Parameters: new status, run_id, expected status. Changes the row only if it still has
    the expected status, so a concurrent seal is never overwritten."""
    return sql.SQL("UPDATE {} SET status = %s WHERE run_id = %s AND status = %s").format(
        qualified(schema, "runs")
    )


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def select_run(schema: str) -> sql.Composed:
    """Parameter: run_id."""
    return sql.SQL("SELECT {} FROM {} WHERE run_id = %s").format(
        _select_list(RUN_COLUMNS), qualified(schema, "runs")
    )


def list_runs(
    schema: str,
    *,
    name: str | None = None,
    status: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
    tag: str | None = None,
    before: datetime | None = None,
) -> tuple[sql.Composed, list[Any]]:
    """Runs newest first, filtered; returns the query and its parameters."""
    conditions: list[sql.Composable] = []
    params: list[Any] = []
    for column, value in (("name", name), ("status", status)):
        if value is not None:
            conditions.append(sql.SQL("{} = %s").format(sql.Identifier(column)))
            params.append(value)
    if since is not None:
        conditions.append(sql.SQL("started_at >= %s"))
        params.append(since)
    if before is not None:
        conditions.append(sql.SQL("started_at < %s"))
        params.append(before)
    if tag is not None:  # tags are a JSON array of strings in metadata
        conditions.append(sql.SQL("metadata @> %s::jsonb"))
        params.append(orjson.dumps({"tags": [tag]}).decode())
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")
    tail = sql.SQL("")
    if limit is not None:
        tail = sql.SQL(" LIMIT %s")
        params.append(limit)
    query = sql.SQL("SELECT {} FROM {}{} ORDER BY started_at DESC, run_id DESC{}").format(
        _select_list(RUN_COLUMNS), qualified(schema, "runs"), where, tail
    )
    return query, params


def run_ids_between(schema: str) -> sql.Composed:
    """Parameters: lowest id, highest id, limit. A range scan of the primary key."""
    return sql.SQL(
        "SELECT run_id FROM {} WHERE run_id BETWEEN %s AND %s ORDER BY run_id LIMIT %s"
    ).format(qualified(schema, "runs"))


def delete_rows(schema: str, table: str) -> sql.Composed:
    """Parameter: run_id."""
    return sql.SQL("DELETE FROM {} WHERE run_id = %s").format(qualified(schema, table))


# -- steps and vectors --------------------------------------------------------------------


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def copy_steps(schema: str) -> sql.Composed:
    """Binary COPY of `STEP_COLUMNS` (data rendered by `_pgrows.binary_step_rows`)."""
    return copy_binary(qualified(schema, "run_log"), STEP_COLUMNS)


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def insert_steps(schema: str, rows: int, *, idempotent: bool) -> sql.Composed:
    """One multi-row INSERT: a single round trip for the small batches of `sync` recording."""
    row = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(STEP_COLUMNS)))
    query = sql.SQL("INSERT INTO {} ({}) VALUES {}").format(
        qualified(schema, "run_log"), names(STEP_COLUMNS), sql.SQL(", ").join([row] * rows))
    if idempotent:
        query = sql.SQL("{} ON CONFLICT (run_id, step) DO NOTHING").format(query)
    return query


def insert_run_and_steps(schema: str, rows: int) -> sql.Composed:
    """One statement, so one round trip and one commit: a run's row and its steps.
    Parameters: those of `insert_run`, then those of `insert_steps`."""
    return sql.SQL("WITH run_row AS ({}) {}").format(
        insert_run(schema), insert_steps(schema, rows, idempotent=False))


def insert_steps_and_seal(schema: str, rows: int) -> sql.Composed:
    """Steps and the seal of their run in one statement; its row count is the seal's.
    Parameters: those of `insert_steps`, then those of `finish_run`."""
    return sql.SQL("WITH step_rows AS ({}) {}").format(
        insert_steps(schema, rows, idempotent=False), finish_run(schema))


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def copy_vectors(schema: str) -> sql.Composed:
    """Binary COPY of the embeddings' columns (see `_pgrows.binary_vector_rows`)."""
    return copy_binary(qualified(schema, "embeddings"), EMBEDDING_COLUMNS)


def copy_binary(target: sql.Composable, columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(target, names(columns))


@functools.lru_cache(maxsize=128)  # built on every write: compose once
def load_steps(schema: str) -> sql.Composed:
    """Parameter: run_id."""
    return sql.SQL("SELECT {} FROM {} WHERE run_id = %s ORDER BY step").format(
        _select_list(STEP_COLUMNS), qualified(schema, "run_log")
    )


def search_embeddings(schema: str, vector_schema: str) -> sql.Composed:
    """Parameters: query vector (text), dims, limit."""
    return sql.SQL(
        "SELECT e.run_id, e.step, e.position, e.embedding OPERATOR({}.<->) %s::{} AS distance, "
        "l.name FROM {} e LEFT JOIN {} l ON l.run_id = e.run_id AND l.step = e.step "
        "WHERE e.dims = %s ORDER BY distance, e.run_id, e.step, e.position LIMIT %s"
    ).format(
        sql.Identifier(vector_schema),
        vector_type(vector_schema),
        qualified(schema, "embeddings"),
        qualified(schema, "run_log"),
    )


def missing_privileges() -> sql.SQL:
    """Parameters: qualified table names, privileges. Returns the current role and the
    `PRIVILEGE on table` pairs it lacks (NULL when none)."""
    return sql.SQL(
        "SELECT current_user, array_agg(p || ' on ' || t ORDER BY t, p) "
        "FILTER (WHERE NOT has_any_column_privilege(t, p)) "
        "FROM unnest(%s::text[], %s::text[]) AS x(t, p)"
    )
