"""SQL of the store's migrations: its schema, the migrations table, the lock that makes
concurrent migrations take turns, and the extensions (pgvector) they install."""

from __future__ import annotations

from psycopg import sql

from agentreplay_core.stores._sql import qualified

__all__ = [
    "advisory_xact_lock",
    "applied_migrations",
    "create_extension",
    "create_migrations_table",
    "create_schema",
    "extension_available",
    "installed_extension_schema",
    "record_migration",
    "set_local_lock_timeout",
    "show_lock_timeout",
]


def create_schema(schema: str) -> sql.Composed:
    return sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))


def create_migrations_table(schema: str) -> sql.Composed:
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} ("
        "version integer PRIMARY KEY, name text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    ).format(qualified(schema, "schema_migrations"))


def applied_migrations(schema: str) -> sql.Composed:
    return sql.SQL("SELECT version, name, applied_at FROM {} ORDER BY version").format(
        qualified(schema, "schema_migrations")
    )


def record_migration(schema: str) -> sql.Composed:
    """Parameters: version, name."""
    return sql.SQL("INSERT INTO {} (version, name) VALUES (%s, %s)").format(
        qualified(schema, "schema_migrations")
    )


def show_lock_timeout() -> sql.SQL:
    return sql.SQL("SELECT current_setting('lock_timeout')")


def set_local_lock_timeout() -> sql.SQL:
    """Parameter: the timeout as PostgreSQL reads it ('1s'); until the transaction ends."""
    return sql.SQL("SELECT set_config('lock_timeout', %s, true)")


def advisory_xact_lock() -> sql.SQL:
    """Parameter: the 64-bit lock key."""
    return sql.SQL("SELECT pg_advisory_xact_lock(%s)")


def installed_extension_schema() -> sql.SQL:
    """Parameter: extension name. Returns the schema holding the extension, if installed."""
    return sql.SQL(
        "SELECT n.nspname FROM pg_catalog.pg_extension e "
        "JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = %s"
    )


def extension_available() -> sql.SQL:
    """Parameter: extension name."""
    return sql.SQL(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_available_extensions WHERE name = %s)"
    )


def create_extension(extension: str) -> sql.Composed:
    return sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(extension))
