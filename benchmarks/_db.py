"""The benchmark's PostgreSQL: a private cluster (PostgreSQL 16 + pgvector from pgserver's
binaries, fsync on) in a temporary directory, or the server of `AGENTREPLAY_DSN`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from agentreplay_core import Store, open_store


@contextmanager
def bench_database() -> Iterator[tuple[str, str | None]]:
    """(dsn, the private cluster's data directory; None for the server of
    `AGENTREPLAY_DSN`). The private cluster is destroyed afterwards."""
    dsn = os.environ.get("AGENTREPLAY_DSN")
    if dsn:
        yield dsn, None
        return
    from tests.support.pgcluster import PgCluster, pgserver_bin_dir

    # fsync on: "durable" must mean on disk, as it would for a user
    cluster = PgCluster(pgserver_bin_dir(), fsync=True)
    cluster.start()
    try:
        yield cluster.dsn, str(cluster.data)
    finally:
        cluster.destroy()


def execute(dsn: str, query: sql.Composed | str, params: tuple[Any, ...] = ()
            ) -> list[tuple[Any, ...]]:
    """Run one statement outside a transaction (VACUUM needs that); returns its rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def drop_schema(dsn: str, schema: str) -> None:
    execute(dsn, sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def fresh_store(dsn: str, schema: str) -> Iterator[Store]:
    """A store in a schema of its own, dropped afterwards (with everything in it)."""
    drop_schema(dsn, schema)
    store = open_store(dsn, schema=schema)
    try:
        yield store
    finally:
        store.close()
        drop_schema(dsn, schema)


@contextmanager
def helped_store(dsn: str, schema: str) -> Iterator[Store]:
    """A store on `schema` with `prepare="process"`, its helper process started and answering
    (it takes a moment to start, which no measurement should include)."""
    from tests.support.helper_process import wait_until_used

    store = open_store(dsn, schema=schema, prepare="process")
    try:
        wait_until_used(store)
        yield store
    finally:
        store.close()


def truncate(dsn: str, schema: str, *tables: str) -> None:
    names = sql.SQL(", ").join(sql.Identifier(schema, t) for t in tables)
    execute(dsn, sql.SQL("TRUNCATE {}").format(names))


def table_bytes(dsn: str, schema: str, table: str) -> dict[str, int]:
    """Bytes on disk of a table after VACUUM ANALYZE: heap, TOAST, indexes and the total
    (`pg_total_relation_size`: all three, with their free-space and visibility maps)."""
    name = sql.Identifier(schema, table)
    execute(dsn, sql.SQL("VACUUM ANALYZE {}").format(name))
    qualified = f'"{schema}"."{table}"'
    row = execute(dsn, "SELECT pg_relation_size(c.oid), "
                       "COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0), "
                       "pg_indexes_size(c.oid), pg_total_relation_size(c.oid) "
                       "FROM pg_class c WHERE c.oid = %s::regclass", (qualified,))[0]
    return dict(zip(("heap", "toast", "indexes", "total"), row, strict=True))


def server_description(dsn: str) -> str:
    """PostgreSQL version, pgvector, and the settings that bear on the numbers."""
    names = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "wal_level")
    values = {n: execute(dsn, sql.SQL("SHOW {}").format(sql.Identifier(n)))[0][0]
              for n in names}
    vector = execute(dsn, "SELECT default_version FROM pg_available_extensions "
                          "WHERE name = 'vector'")
    # migration 0003 compresses payloads with lz4 where the server has it, else not at all:
    # the server's (and raw COPY's) cost per row, and bytes on disk, depend on which
    lz4 = execute(dsn, "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
                       "AND 'lz4' = ANY (enumvals)")
    return (f"PostgreSQL {values['server_version']}, pgvector "
            f"{vector[0][0] if vector else 'not available'}, fsync={values['fsync']}, "
            f"synchronous_commit={values['synchronous_commit']}, "
            f"shared_buffers={values['shared_buffers']}, wal_level={values['wal_level']}, "
            f"step payloads {'lz4-compressed' if lz4 else 'uncompressed (no lz4)'}")
