"""Step payloads are compressed with lz4 where the server has it, else stored uncompressed
(migration 0003) and, then, kept in their row up to ~4 KB (0004); pgvector copies stay in their
row up to ~2,000 dimensions (0005); an optional migration never holds a store's open up:
without its lock, or the right to alter the table, it waits."""

from __future__ import annotations

import random
import threading

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import open_store
from agentreplay_core.stores._migrate import migrate, migration_status
from agentreplay_core.stores._postgres import PostgresBackend


def storage_of(dsn: str, schema: str) -> dict[str, str]:
    """Storage and compression of run_log's payload columns, from the catalog: "e" external
    (never compressed), "x" extended with the default compression, "x lz4" with lz4."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT a.attname, a.attstorage, a.attcompression FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = 'run_log' AND a.attname IN ('input', 'output')",
            (schema,)).fetchall()
    return {str(name): str(storage) + (" lz4" if compression == "l" else "")
            for name, storage, compression in rows}


def server_offers_lz4(dsn: str) -> bool:
    """Asked of the server, not of the code under test."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT enumvals FROM pg_settings "
                           "WHERE name = 'default_toast_compression'").fetchone()
    return bool(row and "lz4" in row[0])


def expected_storage(dsn: str) -> dict[str, str]:
    chosen = "x lz4" if server_offers_lz4(dsn) else "e"
    return {"input": chosen, "output": chosen}


def state_of_3(dsn: str, schema: str) -> str:
    return {s.version: s.state for s in migration_status(dsn, schema)}[3]


def test_step_payloads_are_stored_with_lz4_or_uncompressed(pg_dsn: str, pg_schema: str) -> None:
    store = open_store(pg_dsn, schema=pg_schema)
    try:
        with store.record(name="compressible") as rec:
            rec.record("llm", "chat", {"prompt": "the same words " * 2_000},
                       {"text": "again and again " * 2_000})
        with store.replay(rec.run_id) as player:  # read back whole
            assert player.next("llm", "chat", {"prompt": "the same words " * 2_000}) == \
                {"text": "again and again " * 2_000}
    finally:
        store.close()

    assert storage_of(pg_dsn, pg_schema) == expected_storage(pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute(sql.SQL(
            "SELECT pg_column_compression(input), pg_column_compression(output), "
            "pg_column_size(input) FROM {}").format(sql.Identifier(pg_schema, "run_log"))
        ).fetchone()
    assert row is not None
    compression_in, compression_out, size_in = row
    if server_offers_lz4(pg_dsn):
        assert (compression_in, compression_out) == ("lz4", "lz4")
        assert size_in < 3_000  # 30 KB of one phrase repeated
    else:
        assert (compression_in, compression_out) == (None, None)
        assert size_in > 30_000  # its full size: pglz would have made ~1 KB of it


def reloptions(dsn: str, schema: str, table: str) -> list[str] | None:
    """The storage parameters set on `table` (None when none is)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass",
                           (f'"{schema}".{table}',)).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def toasted_chunks(dsn: str, schema: str, table: str = "run_log") -> int:
    """Rows in `table`'s TOAST table: values moved out of their row."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = "
                           "%s::regclass", (f'"{schema}".{table}',)).fetchone()
        assert row is not None
        counted = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.SQL(row[0]))).fetchone()  # a name from the catalog: pg_toast.pg_toast_N
    assert counted is not None
    return int(counted[0])


def test_uncompressed_chat_steps_of_a_few_kilobytes_stay_in_their_row(
        pg_dsn: str, pg_schema: str) -> None:
    # a chat step of ~3.4 KB whose input alone is over the default 2 KB threshold, of text
    # that does not repeat (as compression would shrink it where the server compresses)
    words = [f"w{i * 7_919 % 100_003}" for i in range(500)]
    step = ({"messages": [{"role": "user", "content": " ".join(words[:400])}]},
            {"content": " ".join(words[400:])})
    with open_store(pg_dsn, schema=pg_schema) as store, store.record(name="inline") as rec:
        rec.record("llm", "chat", *step)
    options = reloptions(pg_dsn, pg_schema, "run_log")
    with psycopg.connect(pg_dsn) as conn:
        size = conn.execute(sql.SQL("SELECT pg_column_size(input) FROM {}").format(
            sql.Identifier(pg_schema, "run_log"))).fetchone()
    assert size is not None
    if server_offers_lz4(pg_dsn):  # compressed instead (0003): the default target stays
        assert options is None
        return
    assert options == ["toast_tuple_target=4080"]
    assert size[0] > 2_100  # over the default threshold: it would have gone to TOAST
    assert toasted_chunks(pg_dsn, pg_schema) == 0
    with open_store(pg_dsn, schema=pg_schema) as store:
        with store.record(name="big") as rec:
            rec.record("llm", "chat", {"text": " ".join(words * 4)}, "a larger value")
        assert store.verify(rec.run_id).ok
    assert toasted_chunks(pg_dsn, pg_schema) > 0  # a larger value still goes to TOAST


def test_pgvector_copies_that_fit_a_page_stay_in_their_row(
        pg_dsn: str, pg_schema: str, server_has_pgvector: bool) -> None:
    rng = random.Random(5)
    small, large = ([rng.gauss(0.0, 1.0) for _ in range(dims)] for dims in (768, 3_000))
    with open_store(pg_dsn, schema=pg_schema) as store:
        with store.record(name="vectors") as rec:
            rec.record("embedding", "embed", {"texts": ["small"]}, [small])
        if not server_has_pgvector:  # no table to tune: the migration waits with 0002
            assert {s.version: s.state for s in migration_status(pg_dsn, pg_schema)}[5] == \
                "waiting"
            return
        with psycopg.connect(pg_dsn) as conn:
            storage = conn.execute(
                "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attname = 'embedding'", (f'"{pg_schema}".embeddings',)).fetchone()
        assert reloptions(pg_dsn, pg_schema, "embeddings") == ["toast_tuple_target=8160"]
        assert storage == ("e",)
        assert toasted_chunks(pg_dsn, pg_schema, "embeddings") == 0  # 3 KB: in its row
        with store.record(name="large") as big:  # 12 KB: over a page, so to TOAST
            big.record("embedding", "embed", {"texts": ["large"]}, [large])
        assert toasted_chunks(pg_dsn, pg_schema, "embeddings") > 0
        for vector, run_id in ((small, rec.run_id), (large, big.run_id)):
            (best,) = store.search_embeddings(vector, limit=1)
            assert best.run_id == run_id and best.distance == pytest.approx(0.0, abs=1e-3)


def test_the_optional_migration_waits_for_its_lock_instead_of_holding_the_open_up(
        pg_dsn: str, pg_schema: str) -> None:
    migrate(pg_dsn, pg_schema)
    run_log = sql.Identifier(pg_schema, "run_log")
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # as before migration 0003
        admin.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN input SET STORAGE EXTENDED, "
                              "ALTER COLUMN output SET STORAGE EXTENDED, "
                              "ALTER COLUMN input SET COMPRESSION DEFAULT, "
                              "ALTER COLUMN output SET COMPRESSION DEFAULT").format(run_log))
        admin.execute(sql.SQL("DELETE FROM {} WHERE version = 3").format(
            sql.Identifier(pg_schema, "schema_migrations")))
    assert state_of_3(pg_dsn, pg_schema) == "pending"

    opened = threading.Event()

    def open_and_close() -> None:
        PostgresBackend(pg_dsn, schema=pg_schema).close()
        opened.set()

    with psycopg.connect(pg_dsn) as reader:  # a transaction that reads run_log, left open
        reader.execute(sql.SQL("SELECT count(*) FROM {}").format(run_log)).fetchone()
        thread = threading.Thread(target=open_and_close, daemon=True)
        thread.start()
        # an ALTER TABLE waiting for the reader would hold the open up until it ends
        assert opened.wait(60), "the store's open waited for the reader's transaction"
        assert state_of_3(pg_dsn, pg_schema) == "pending"
        assert storage_of(pg_dsn, pg_schema) == {"input": "x", "output": "x"}
        reader.rollback()

    PostgresBackend(pg_dsn, schema=pg_schema).close()  # the next open applies it
    assert state_of_3(pg_dsn, pg_schema) == "applied"
    assert storage_of(pg_dsn, pg_schema) == expected_storage(pg_dsn)
