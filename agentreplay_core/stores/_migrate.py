"""Connecting to PostgreSQL and keeping the store's schema migrated.

Migrations are the SQL files `agentreplay_core/migrations/NNNN_name.sql` (shipped in the
wheel, read with importlib.resources). Each is formatted with `psycopg.sql`, its `{schema}`
placeholder becoming the quoted schema name, and recorded in `schema_migrations` when applied.
All of it happens in one transaction under an advisory lock keyed on the schema name, so any
number of processes may open the same fresh schema at once.

A migration whose first lines say ``-- requires-extension: NAME`` needs that extension. When the
server does not offer it, the migration *waits*: it is not recorded, everything else is applied,
and a later open retries it. Today that is pgvector's `vector`, needed only for search.

The connection helpers here turn driver errors into `StoreError`s that name the server (never
its password) and say what to check.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import socket
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from agentreplay_core._errors import StoreError
from agentreplay_core.stores import _sql

__all__ = [
    "DatabaseUnavailable",
    "Migration",
    "MigrationResult",
    "MigrationState",
    "apply_migrations",
    "connect",
    "dsn_endpoints",
    "explain_failure",
    "extension_schema",
    "load_migrations",
    "migrate",
    "migration_status",
    "read_status",
    "redact_dsn",
]

Conn = psycopg.Connection[Any]

_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_REQUIRES_RE = re.compile(r"^--\s*requires-extension:\s*([a-z0-9_]+)\s*$", re.MULTILINE)
# Extension creation is database-wide: one lock for all schemas so two stores never race.
_EXTENSION_LOCK_KEY = 0x6172_6578_7465_6E73  # "arextens"


@dataclass(frozen=True)
class Migration:
    """One SQL file."""

    version: int
    name: str
    text: str
    requires: tuple[str, ...] = ()


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
        found.append(Migration(int(match.group(1)), match.group(2), text, requires))
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
    row = conn.execute(_sql.installed_extension_schema(), (extension,)).fetchone()
    return str(row[0]) if row else None


def _is_available(conn: Conn, extension: str) -> bool:
    row = conn.execute(_sql.extension_available(), (extension,)).fetchone()
    return bool(row and row[0])


def _applied(conn: Conn, schema: str) -> dict[int, datetime]:
    row = conn.execute(_sql.table_exists(), (schema, "schema_migrations")).fetchone()
    if not (row and row[0]):
        return {}
    rows = conn.execute(_sql.applied_migrations(schema)).fetchall()
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
            ).rstrip("; ")
            states.append(MigrationState(m.version, m.name, "pending", note=note))
    return states


def _create_extension(conn: Conn, extension: str) -> str:
    """Create `extension` if needed; returns "" or the reason it could not be created."""
    if extension_schema(conn, extension) is not None:
        return ""
    conn.execute(_sql.advisory_xact_lock(), (_EXTENSION_LOCK_KEY,))
    try:
        # A savepoint, so that lacking the privilege leaves the other migrations intact.
        with conn.transaction():
            conn.execute(_sql.create_extension(extension))
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
        conn.execute(_sql.advisory_xact_lock(), (lock_key(schema),))
        conn.execute(_sql.create_schema(schema))
        conn.execute(_sql.create_migrations_table(schema))
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
            conn.execute(_render(conn, m, schema))
            conn.execute(_sql.record_migration(schema), (m.version, m.name))
            result.applied.append(m.version)
    return result


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


class DatabaseUnavailable(StoreError, ConnectionError):
    """PostgreSQL cannot be reached (down, restarting, wrong address); retrying may help."""


_KV_PASSWORD_RE = re.compile(r"\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S+)\s*", re.IGNORECASE)
_CONNECT_HINT = (
    "Check that PostgreSQL is running there and that the store URL (or AGENTREPLAY_DSN) names "
    "the right host, port, database and user. Without a URL agentreplay starts an embedded "
    'server: pip install "agentreplay[embedded]".'
)


def redact_dsn(dsn: str) -> str:
    """`dsn` with any password removed, for messages and `description`."""
    if "://" not in dsn:
        return _KV_PASSWORD_RE.sub("", dsn).strip()
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "<unparseable PostgreSQL URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{hosts}" if user else hosts
    query = "&".join(
        item for item in parts.query.split("&") if item and not item.lower().startswith("password=")
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _secrets(dsn: str) -> list[str]:
    found = [m.group(1).strip("'") for m in _KV_PASSWORD_RE.finditer(dsn)]
    if "://" in dsn:
        try:
            password = urlsplit(dsn).password
        except ValueError:
            password = None
        if password:
            found += [password, unquote(password)]
    return [s for s in found if s]


def explain_failure(exc: BaseException, dsn: str) -> str:
    """The driver's message on one line, with the DSN's password (if any) masked."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    for secret in sorted(_secrets(dsn), key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


def describe_target(dsn: str) -> str:
    """`database "d" at host h port p as user "u"`, from the DSN and libpq's variables."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return redact_dsn(dsn)
    env = os.environ

    def get(key: str, var: str, default: str) -> str:
        return str(params.get(key) or env.get(var) or default)

    user = get("user", "PGUSER", "(your login name)")
    host = get("host", "PGHOST", "") or get("hostaddr", "PGHOSTADDR", "the default local socket")
    return (
        f'database "{get("dbname", "PGDATABASE", user)}" at host {host} '
        f'port {get("port", "PGPORT", "5432")} as user "{user}"'
    )


def connect(dsn: str, *, timeout: float = 10) -> Conn:
    """An autocommit connection, or a `StoreError` that says where and what to check."""
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=max(2, math.ceil(timeout)))
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL ({describe_target(dsn)}): "
            f"{explain_failure(exc, dsn)}. {_CONNECT_HINT}"
        ) from exc
    except psycopg.Error as exc:
        raise StoreError(
            f"invalid PostgreSQL connection string {redact_dsn(dsn)!r}: "
            f"{explain_failure(exc, dsn)}. Use a URL like postgresql://user@host:5432/dbname "
            "or key=value pairs such as 'host=localhost dbname=agents'."
        ) from exc


def dsn_endpoints(dsn: str) -> list[tuple[str, int]]:
    """TCP (host, port) pairs `dsn` may connect to, with resolved addresses; [] for sockets."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return []
    env = os.environ
    hosts = str(params.get("host") or env.get("PGHOST") or "").split(",")
    addrs = str(params.get("hostaddr") or env.get("PGHOSTADDR") or "").split(",")
    ports = str(params.get("port") or env.get("PGPORT") or "").split(",")
    found: list[tuple[str, int]] = []
    for i in range(max(len(hosts), len(addrs))):
        host = hosts[i].strip() if i < len(hosts) else ""
        addr = addrs[i].strip() if i < len(addrs) else ""
        port_text = (ports[i] if i < len(ports) else ports[0]).strip()
        port = int(port_text) if port_text.isdigit() else 5432
        if addr:
            names = [addr]
        elif not host or host.startswith(("/", "@")):
            continue  # a Unix-domain socket: no network endpoint
        else:
            names = [host]
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError:
                infos = []
            names += [str(info[4][0]) for info in infos]
        found += [(name, port) for name in names if (name, port) not in found]
    return found
