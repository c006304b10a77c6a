"""Connecting to PostgreSQL and keeping the store's schema migrated.

Migrations are the SQL files `agentreplay_core/migrations/NNNN_name.sql` (shipped in the
wheel, read with importlib.resources). Each is formatted with `psycopg.sql`, its `{schema}`
placeholder becoming the quoted schema name, and recorded in `schema_migrations` when applied.
All of it happens in one transaction under an advisory lock keyed on the schema name, so any
number of processes may open the same fresh schema at once.

A migration whose first lines say ``-- requires-extension: NAME`` needs that extension. When the
server does not offer it, the migration *waits*: it is not recorded, everything else is applied,
and a later open retries it. Today that is pgvector's `vector`, needed only for search.

A migration whose first line says ``-- optional: ...`` only tunes the schema (a storage
setting): it runs in a savepoint with a short lock timeout, and when it cannot get its lock or
the role may not make it, it stays pending for a later open. A store never refuses to open
for want of it.

"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources

import psycopg
from psycopg import sql

from agentreplay_core._errors import StoreError
from agentreplay_core.stores import _migrate_sql, _sql
from agentreplay_core.stores._pgconn import (
    Conn,
    DatabaseUnavailable,
    connect,
    explain_failure,
    redact_dsn,
)

__all__ = [
    "DatabaseUnavailable",
    "Migration",
    "MigrationResult",
    "MigrationState",
    "apply_migrations",
    "extension_schema",
    "load_migrations",
    "migrate",
    "migration_status",
    "read_status",
]


_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_REQUIRES_RE = re.compile(r"^--\s*requires-extension:\s*([a-z0-9_]+)\s*$", re.MULTILINE)
_OPTIONAL_RE = re.compile(r"\A--\s*optional:")
#: how long an optional migration waits for its lock (an ALTER TABLE waits for every open
#: transaction on the table, and everyone after it waits for the ALTER)
OPTIONAL_LOCK_TIMEOUT = "1s"
# Extension creation is database-wide: one lock for all schemas so two stores never race.
_EXTENSION_LOCK_KEY = 0x6172_6578_7465_6E73  # "arextens"


@dataclass(frozen=True)
class Migration:
    """One SQL file."""

    version: int
    name: str
    text: str
    requires: tuple[str, ...] = ()
    #: only tunes the schema: applied when it can be, never required (see the module's doc)
    optional: bool = False


@dataclass(frozen=True)
class MigrationState:
    """Where one migration stands in one schema.

    `state` is `"applied"`, `"pending"` (will be applied at the next open or
    `agentreplay db migrate`) or `"waiting"` (needs an extension the server lacks; `note` says
    which).
    """

    version: int
    name: str
    state: str
    applied_at: datetime | None = None
    note: str = ""


@dataclass
class MigrationResult:
    """What `apply_migrations` did: versions applied now, versions still waiting (and why)."""

    applied: list[int] = field(default_factory=list)
    waiting: dict[int, str] = field(default_factory=dict)


@cache
def load_migrations() -> tuple[Migration, ...]:
    """All migration files, ordered by version."""
    found: list[Migration] = []
    for entry in (resources.files("agentreplay_core") / "migrations").iterdir():
        match = _FILE_RE.match(entry.name)
        if not match:
            continue
        text = entry.read_text(encoding="utf-8")
        requires = tuple(_REQUIRES_RE.findall(text))
        found.append(Migration(int(match.group(1)), match.group(2), text, requires,
                               bool(_OPTIONAL_RE.match(text))))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate versions in agentreplay_core/migrations: {versions}")
    return tuple(found)


def lock_key(schema: str) -> int:
    """A stable signed 64-bit advisory lock key for migrating `schema`."""
    digest = hashlib.sha256(f"agentreplay:migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def extension_schema(conn: Conn, extension: str) -> str | None:
    """The schema an installed extension lives in, or None if it is not installed."""
    row = conn.execute(_migrate_sql.installed_extension_schema(), (extension,)).fetchone()
    return str(row[0]) if row else None


def _is_available(conn: Conn, extension: str) -> bool:
    row = conn.execute(_migrate_sql.extension_available(), (extension,)).fetchone()
    return bool(row and row[0])


def _applied(conn: Conn, schema: str) -> dict[int, datetime]:
    row = conn.execute(_sql.table_exists(), (schema, "schema_migrations")).fetchone()
    if not (row and row[0]):
        return {}
    rows = conn.execute(_migrate_sql.applied_migrations(schema)).fetchall()
    return {int(r[0]): r[2] for r in rows}


def _unmet(conn: Conn, migration: Migration) -> str:
    """Why `migration` cannot be applied on this server now ("" when it can)."""
    for extension in migration.requires:
        if extension_schema(conn, extension) is None and not _is_available(conn, extension):
            return f"needs the {extension!r} extension, which this server does not offer"
    return ""


def read_status(conn: Conn, schema: str) -> list[MigrationState]:
    """The state of every known migration in `schema` (nothing is changed)."""
    applied = _applied(conn, schema)
    states = []
    for m in load_migrations():
        if m.version in applied:
            states.append(MigrationState(m.version, m.name, "applied", applied[m.version]))
        elif note := _unmet(conn, m):
            states.append(MigrationState(m.version, m.name, "waiting", note=note))
        else:
            missing = [e for e in m.requires if extension_schema(conn, e) is None]
            note = "".join(
                f"creates the {e!r} extension (needs the privilege to create it); " for e in missing
            ).rstrip("; ") or ("optional: tunes how rows are stored" if m.optional else "")
            states.append(MigrationState(m.version, m.name, "pending", note=note))
    return states


def _create_extension(conn: Conn, extension: str) -> str:
    """Create `extension` if needed; returns "" or the reason it could not be created."""
    if extension_schema(conn, extension) is not None:
        return ""
    conn.execute(_migrate_sql.advisory_xact_lock(), (_EXTENSION_LOCK_KEY,))
    try:
        # A savepoint, so that lacking the privilege leaves the other migrations intact.
        with conn.transaction():
            conn.execute(_migrate_sql.create_extension(extension))
    except psycopg.Error as exc:
        if extension_schema(conn, extension) is not None:  # created by someone else meanwhile
            return ""
        detail = " ".join(str(exc).split())
        return f"needs the {extension!r} extension, which could not be created: {detail}"
    return ""


def _render(conn: Conn, m: Migration, schema: str) -> sql.Composed:
    values: dict[str, sql.Composable] = {"schema": sql.Identifier(schema)}
    if "vector" in m.requires:
        vector_schema = extension_schema(conn, "vector")
        assert vector_schema is not None  # created just before
        values["vector"] = _sql.vector_type(vector_schema)
    return sql.SQL(m.text).format(**values)


def apply_migrations(conn: Conn, schema: str) -> MigrationResult:
    """Bring `schema` up to date on an autocommit connection; safe to call concurrently."""
    _sql.check_schema_name(schema)
    result = MigrationResult()
    # Fast path without the lock: most opens find nothing to do.
    states = read_status(conn, schema)
    if all(s.state != "pending" for s in states):
        result.waiting = {s.version: s.note for s in states if s.state == "waiting"}
        return result
    with conn.transaction():
        conn.execute(_migrate_sql.advisory_xact_lock(), (lock_key(schema),))
        conn.execute(_migrate_sql.create_schema(schema))
        conn.execute(_migrate_sql.create_migrations_table(schema))
        applied = _applied(conn, schema)
        for m in load_migrations():
            if m.version in applied:
                continue
            reason = _unmet(conn, m)
            for extension in m.requires:
                reason = reason or _create_extension(conn, extension)
            if reason:
                result.waiting[m.version] = reason
                continue
            if m.optional:
                reason = _apply_optional(conn, m, schema)
                if reason:
                    result.waiting[m.version] = reason
                    continue
            else:
                conn.execute(_render(conn, m, schema))
            conn.execute(_migrate_sql.record_migration(schema), (m.version, m.name))
            result.applied.append(m.version)
    return result


def _apply_optional(conn: Conn, m: Migration, schema: str) -> str:
    """Apply an optional migration in a savepoint; "" or why it stays pending."""
    previous = conn.execute(_migrate_sql.show_lock_timeout()).fetchone()
    try:
        with conn.transaction():
            conn.execute(_migrate_sql.set_local_lock_timeout(), (OPTIONAL_LOCK_TIMEOUT,))
            conn.execute(_render(conn, m, schema))
    except (psycopg.errors.LockNotAvailable, psycopg.errors.InsufficientPrivilege) as exc:
        return (f"optional, not applied yet ({' '.join(str(exc).split())}); retried at the "
                "next open")
    finally:
        if previous:
            conn.execute(_migrate_sql.set_local_lock_timeout(), (previous[0],))
    return ""


def migrate(dsn: str, schema: str = "agentreplay", *, connect_timeout: float = 10) -> list[int]:
    """Apply pending migrations to `schema`; returns the versions applied now."""
    _sql.check_schema_name(schema)
    with connect(dsn, timeout=connect_timeout) as conn:
        try:
            return apply_migrations(conn, schema).applied
        except psycopg.Error as exc:
            raise StoreError(
                f"migrating schema {schema!r} on {redact_dsn(dsn)} failed: "
                f"{explain_failure(exc, dsn)}"
            ) from exc


def migration_status(
    dsn: str, schema: str = "agentreplay", *, connect_timeout: float = 10
) -> list[MigrationState]:
    """The state of every known migration in `schema`."""
    _sql.check_schema_name(schema)
    with connect(dsn, timeout=connect_timeout) as conn:
        try:
            return read_status(conn, schema)
        except psycopg.Error as exc:
            raise StoreError(
                f"reading migrations of schema {schema!r} on {redact_dsn(dsn)} failed: "
                f"{explain_failure(exc, dsn)}"
            ) from exc


# -- connections ----------------------------------------------------------------------------
