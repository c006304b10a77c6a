"""`open_store(url)`: one entry point for every kind of run store."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from agentreplay_core._errors import StoreError
from agentreplay_core._store import Store

DSN_ENV = "AGENTREPLAY_DSN"
SCHEMA_ENV = "AGENTREPLAY_SCHEMA"
POOLER_ENV = "AGENTREPLAY_POOLER"
#: "1": with an HMAC key, also trust runs chained without one (SECURITY.md, introducing a key)
ACCEPT_UNKEYED_ENV = "AGENTREPLAY_ACCEPT_UNKEYED_RUNS"
_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
#: libpq keywords a key=value connection string usually starts with
_CONNINFO_RE = re.compile(
    r"\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|"
    r"connect_timeout|application_name|options|target_session_attrs)\s*=")


def names_postgres(url: str) -> bool:
    """Whether `url` names a PostgreSQL store: a `postgresql://` URL or libpq key=value pairs."""
    return url.startswith(("postgresql://", "postgres://")) or (
        not url.startswith(("file:", "memory:")) and _is_conninfo(url))


def _is_conninfo(text: str) -> bool:
    """Whether `text` is a libpq key=value string (`host=db user=me`), not a path."""
    return "=" in text and ("dbname" in text or _CONNINFO_RE.match(text) is not None)


def _env_flag(name: str) -> bool:
    """Whether environment variable `name` is set to a true value (1, true, yes, on)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def open_store(url: str | os.PathLike[str] | None = None, **options: Any) -> Store:
    """Open a run store.

    - `postgresql://...` (or `postgres://`): PostgreSQL (needs `agentreplay[postgres]`);
      `schema=` selects the schema (default `agentreplay`, or `AGENTREPLAY_SCHEMA`).
    - `file:PATH` or a plain path: JSONL files (a directory, or one exported `.jsonl` run).
    - `memory:`: in memory, for tests.
    - nothing: `AGENTREPLAY_DSN` if set, else the embedded PostgreSQL from `pgserver`
      (`agentreplay[embedded]`), started in a per-user data directory.

    Other keyword options go to `Store` (`hmac_key`, `spool_dir`, `max_queue`, `linger`:
    seconds the batched writer waits for more steps before it writes a burst, default 0.02;
    `accept_unkeyed_runs`, on with `AGENTREPLAY_ACCEPT_UNKEYED_RUNS=1`, `redaction`: a
    `Redactor`, or None to store secrets as they are;
    `prepare`: "process" to prepare batched steps in a helper process, see `Store`)
    or, for PostgreSQL, to the backend (`schema`, `max_size`, `migrate`,
    `write_statement_timeout`, `lock_timeout`, `pooler`: "transaction" behind PgBouncer in
    transaction mode or a pooler like it, default `AGENTREPLAY_POOLER`).
    """
    store_options = {k: options.pop(k) for k in ("hmac_key", "spool_dir", "max_queue", "linger",
                                                  "accept_unkeyed_runs", "redaction", "prepare")
                     if k in options}
    if _env_flag(ACCEPT_UNKEYED_ENV):
        store_options.setdefault("accept_unkeyed_runs", True)
    if url is None:
        url = os.environ.get(DSN_ENV) or None
    if url is None:
        from agentreplay_core.stores._embedded import embedded_dsn

        url = embedded_dsn()
    text = os.fspath(url)
    scheme = _SCHEME_RE.match(text)
    if scheme and scheme.group(1) not in ("postgresql", "postgres", "file"):
        # a typo (postgressql://) must not quietly become a directory of that name
        raise StoreError(
            f"unknown run store URL scheme {scheme.group(1)!r}: use postgresql://..., "
            "file:PATH (or a plain path) or memory:")
    if names_postgres(text):
        try:
            from agentreplay_core.stores._postgres import PostgresBackend
        except ImportError as exc:
            raise StoreError(
                f"PostgreSQL support is not installed ({exc.name} missing): "
                'pip install "agentreplay[postgres]"') from None
        options.setdefault("schema", os.environ.get(SCHEMA_ENV, "agentreplay"))
        options.setdefault("pooler", os.environ.get(POOLER_ENV))
        return Store(PostgresBackend(text, **options), **store_options)
    if options:
        raise TypeError(f"unexpected options for {text}: {', '.join(options)}")
    if text == "memory:" or text.startswith("memory:"):
        from agentreplay_core.stores._memory import MemoryBackend

        return Store(MemoryBackend(), **store_options)
    from agentreplay_core.stores._file import FileBackend

    path = text[len("file:"):] if text.startswith("file:") else text
    if not path:
        raise StoreError("file: store needs a path, e.g. file:./runs or file:run.jsonl")
    return Store(FileBackend(Path(path).expanduser()), **store_options)
