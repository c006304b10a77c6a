"""The PostgreSQL store backend (psycopg 3 + psycopg_pool).

Steps arrive in batches and go in as `_pgwrite` says (one transaction per batch, one commit
for a short run); runs and steps are read as `_pgread` says. This module holds what both use:
the pool, the schema and the connections. Connection trouble surfaces as
`DatabaseUnavailable` (a `StoreError`) naming the server, never as a raw driver or pool
traceback. Every pooled session runs with a statement and a lock timeout, so a write stuck
behind a table lock or a stalled server fails (`DatabaseTimeout`) and the recorder can retry
and spool; reads that may legitimately run long lift the statement timeout for their own
transaction. Behind a pooler in transaction mode (`pooler="transaction"`) the sessions are
the pooler's to lend: no timeouts are set on them and no statement is prepared. Usage::

    backend = PostgresBackend("postgresql://me@db.example/agents", schema="agentreplay")
    runs = backend.list_runs(limit=10)
    backend.close()
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import TracebackType

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from agentreplay_core._errors import RunNotFound, StoreError
from agentreplay_core.stores import _sql
from agentreplay_core.stores._backend import ThisProcess
from agentreplay_core.stores._migrate import (
    apply_migrations,
    extension_schema,
    load_migrations,
    read_status,
)
from agentreplay_core.stores._pgconn import (
    Conn,
    DatabaseTimeout,
    DatabaseUnavailable,
    SessionLimits,
    connect,
    connection_options,
    dsn_endpoints,
    explain_failure,
    redact_dsn,
    transaction_pooled,
)
from agentreplay_core.stores._pgread import PostgresReads
from agentreplay_core.stores._pgrows import vector_text
from agentreplay_core.stores._pgwrite import PostgresWrites

__all__ = ["DatabaseTimeout", "DatabaseUnavailable", "PostgresBackend", "vector_text"]

log = logging.getLogger("agentreplay")

#: a pooled connection idle for longer than this is checked before it is handed out
IDLE_CHECK_SECONDS = 1.0


class PostgresBackend(PostgresWrites, PostgresReads):
    """Runs, steps and vectors in a PostgreSQL schema.

    Args:
        dsn: a libpq connection string or `postgresql://` URL.
        schema: the schema holding the tables (created if missing).
        min_size, max_size: connection pool bounds.
        migrate: apply pending migrations at open (else fail if the schema is behind). A role
            that may not change the schema (a read-only role, SECURITY.md) uses it as it is,
            unless a migration the store needs is missing.
        create_schema: False to raise `StoreError` when the schema does not exist instead of
            creating it (the command line's reading commands: a mistyped schema name must not
            make an empty store that verifies).
        connect_timeout: seconds to wait for a connection before raising `DatabaseUnavailable`.
        write_statement_timeout: seconds a statement may run before the server cancels it
            (`DatabaseTimeout`); 0 = no limit. Bounds the recorder's writes; long reads
            (`load_steps`, `list_runs`, `search_embeddings`, `delete_run`) are exempt.
        lock_timeout: seconds a statement may wait for a lock (another session's `LOCK
            TABLE`, a migration, `VACUUM FULL`) before failing with `DatabaseTimeout`; 0 = no
            limit. Applies to reads too, which then fail instead of hanging. Both are also
            `self.limits`.
        pooler: "transaction" when the DSN names a pooler that lends a server session only
            for a transaction (PgBouncer's `pool_mode = transaction`, Supavisor, pgcat): the
            store then prepares no statement and sets no session timeout (set them on the
            role: `ALTER ROLE ... SET statement_timeout = '10s'`). None or "session" (the
            default, or `AGENTREPLAY_POOLER` through `open_store`): a session per connection.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "agentreplay",
        min_size: int = 1,
        max_size: int = 8,
        migrate: bool = True,
        create_schema: bool = True,
        connect_timeout: float = 10,
        write_statement_timeout: float = 10.0,
        lock_timeout: float = 5.0,
        pooler: str | None = None,
    ) -> None:
        self.schema = _sql.check_schema_name(schema)
        pooled = transaction_pooled(pooler)
        self.limits = SessionLimits(write_statement_timeout, lock_timeout, pooled)
        self.description = redact_dsn(dsn) or "PostgreSQL (libpq defaults)"
        self._dsn = dsn
        self._timeout = float(connect_timeout)
        #: how long a recorder's write waits for a connection: short, because the recorder
        #: retries and then spools, and a dead server must not stall the agent's writer
        self.write_timeout = min(self._timeout, 2.0)
        self._last_used: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        self._rendered: dict[tuple[str, int], str] = {}
        self._writing = threading.local()
        with connect(dsn, timeout=self._timeout) as conn:
            try:
                if not create_schema:
                    self._check_schema_exists(conn)
                self._prepare_schema(conn, migrate)
                self._vector_schema = self._find_vector_schema(conn)
                self._write_refusal = self._find_write_refusal(conn)
            except psycopg.Error as exc:
                raise StoreError(
                    f"cannot prepare schema {schema!r} on {self.description}: "
                    f"{explain_failure(exc, dsn)}"
                ) from exc
        #: whether similarity search works (pgvector present and the embeddings table made)
        self.has_pgvector = self._vector_schema is not None
        self._pool_size = (min_size, max_size)
        self._pool = self._new_pool()
        self._pool.open(wait=False)
        #: the process whose connections the pool holds (`_pool_here`)
        self._pool_pid = ThisProcess.pid
        #: a forked child's copies of its parent's pools: kept, never used nor closed
        self._parents_pools: list[ConnectionPool[Conn]] = []

    def _new_pool(self) -> ConnectionPool[Conn]:
        min_size, max_size = self._pool_size
        return ConnectionPool(
            self._dsn,
            min_size=min_size,
            max_size=max_size,
            # psycopg prepares a statement run five times on a connection; a transaction
            # pooler may run the next one on a server session that lacks it
            kwargs={"autocommit": True, **connection_options(self._dsn, self._timeout),
                    **({"prepare_threshold": None} if self.limits.pooled else {})},
            # Session settings, not per statement: a `sync` write stays one round trip.
            configure=self.limits.configure,
            check=self._check_if_idle,  # survive a server restart
            timeout=self._timeout,
            # Give up background reconnection quickly: the next call then connects on demand
            # instead of waiting out a long exponential backoff after the server is back.
            reconnect_timeout=self._timeout,
            name=f"agentreplay:{self.schema}",
            open=False,
        )

    def _pool_here(self, *, open_it: bool = True) -> ConnectionPool[Conn]:
        """The pool, of this process's own connections. A forked child inherits the parent's
        pool, whose sockets are the parent's sessions (a query sent on one mixes with the
        parent's; closing one ends it) and whose threads stayed in the parent: the child
        opens a pool of its own instead, leaving the parent's untouched."""
        if self._pool_pid != ThisProcess.pid:
            with ThisProcess.lock:
                if self._pool_pid != ThisProcess.pid:
                    self._parents_pools.append(self._pool)  # its finalizer must not run here
                    self._pool = self._new_pool()
                    if open_it:
                        self._pool.open(wait=False)
                    self._pool_pid = ThisProcess.pid
        return self._pool

    def _check_if_idle(self, conn: Conn) -> None:
        """Check a pooled connection before use; for recorder writes only when it sat idle.

        A recorder writing steadily then pays one round trip per write instead of two; a
        connection lost in a restart during a quiet spell is still replaced before use, and
        one lost mid-burst fails the write, which the recorder retries (idempotently).
        """
        recent = time.monotonic() - self._last_used.get(conn, 0.0) <= IDLE_CHECK_SECONDS
        if not (recent and getattr(self._writing, "active", False)):
            ConnectionPool.check_connection(conn)

    def _check_schema_exists(self, conn: Conn) -> None:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                             (self.schema,)).fetchone()
        if found is None:
            raise StoreError(
                f"schema {self.schema!r} does not exist on {self.description}: nothing was "
                "recorded there (a mistyped --schema or AGENTREPLAY_SCHEMA?); recording or "
                f"`agentreplay db migrate --schema {self.schema}` creates it")

    def _prepare_schema(self, conn: Conn, migrate: bool) -> None:
        denied = ""
        if migrate:
            try:
                apply_migrations(conn, self.schema)
                return
            except psycopg.errors.InsufficientPrivilege as exc:
                # A role that may read the schema but not change it (the read-only role of
                # SECURITY.md) uses it as it is; a migration that needs an extension only
                # adds similarity search, which it can do without.
                denied = explain_failure(exc, self._dsn)
        # an optional migration never holds an open up; one that needs an extension only
        # when this role may not create it
        optional = {m.version for m in load_migrations() if m.optional or (denied and m.requires)}
        behind = [s for s in read_status(conn, self.schema)
                  if s.state == "pending" and s.version not in optional]
        if behind:
            names = ", ".join(f"{s.version:04d}_{s.name}" for s in behind)
            fix = (f"this role may not apply them ({denied}): run `agentreplay db migrate` as "
                   "the schema's owner" if denied else
                   "run `agentreplay db migrate` or open the store with migrate=True")
            raise StoreError(
                f"schema {self.schema!r} on {self.description} lacks migrations {names}; {fix}"
            )
        if denied:
            log.debug("agentreplay: this role may not migrate schema %r on %s (%s); using it "
                      "as it is", self.schema, self.description, denied)

    def _find_write_refusal(self, conn: Conn) -> str:
        """Why this role cannot record here ("" when it can): the privileges recording needs,
        checked once at open so that `store.record` can refuse at once (`check_writable`)."""
        needed = [("runs", "INSERT"), ("runs", "UPDATE"), ("run_log", "INSERT")]
        if self._vector_schema is not None:
            needed.append(("embeddings", "INSERT"))
        tables = [sql.Identifier(self.schema, t).as_string(conn) for t, _ in needed]
        row = conn.execute(_sql.missing_privileges(), (tables, [p for _, p in needed])).fetchone()
        if not row or not row[1]:
            return ""
        return (
            f"cannot record into schema {self.schema!r} on {self.description}: role "
            f"{row[0]!r} may read runs but not write them (it lacks {', '.join(row[1])}). "
            "Record with a role that may write (see SECURITY.md); this one can list, show, "
            "verify, export and replay runs"
        )

    @property
    def read_only(self) -> bool:
        """Whether this store's role lacks the privileges recording needs (as of open)."""
        return bool(self._write_refusal)

    def check_writable(self) -> None:
        """Raise `StoreError` if this store's role may not record (see `read_only`)."""
        if self._write_refusal:
            raise StoreError(self._write_refusal)

    def _find_vector_schema(self, conn: Conn) -> str | None:
        row = conn.execute(_sql.table_exists(), (self.schema, "embeddings")).fetchone()
        return extension_schema(conn, "vector") if row and row[0] else None

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def _connection(self, action: str, timeout: float | None = None,
                    *, write: bool = False) -> Iterator[Conn]:
        """A pooled connection; driver and pool errors become `StoreError`s naming `action`.

        `write=True` marks a recorder write, which skips the liveness check of a connection
        used moments ago (see `_check_if_idle`).
        """
        wait = self._timeout if timeout is None else timeout
        try:
            try:
                with ExitStack() as stack:
                    self._writing.active = write  # read by the pool's check, same thread
                    try:
                        conn = stack.enter_context(self._pool_here().connection(timeout=wait))
                    finally:
                        self._writing.active = False
                    yield conn
                    self._last_used[conn] = time.monotonic()
                return
            except PoolTimeout:
                pass  # only acquiring a connection raises it: nothing was yielded yet
            # After an outage the pool may still be backing off from failed reconnects while
            # the server is already back: a direct connection tells the two apart.
            try:
                direct = connect(self._dsn, timeout=min(wait, 2.0))
            except StoreError as exc:
                raise DatabaseUnavailable(
                    f"cannot {action}: no connection to {self.description} within "
                    f"{wait:g}s. {exc}"
                ) from None  # the pool's own timeout says nothing more
            with direct:
                self.limits.configure(direct)
                yield direct
        except PoolClosed as exc:
            raise StoreError(f"cannot {action}: the store {self.description} is closed") from exc
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
            raise self.limits.error(exc, f"cannot {action} on {self.description}") from exc
        except psycopg.OperationalError as exc:
            if (exc.sqlstate or "").startswith("54"):  # a limit the data exceeds, e.g. an
                # index row too large: not an outage, so never retried or spooled
                raise StoreError(f"cannot {action} on {self.description}: "
                                 f"{explain_failure(exc, self._dsn)}") from exc
            raise DatabaseUnavailable(
                f"cannot {action} on {self.description}: {explain_failure(exc, self._dsn)}"
            ) from exc
        except psycopg.errors.UndefinedTable as exc:
            raise StoreError(
                f"cannot {action}: tables missing in schema {self.schema!r} on "
                f"{self.description} ({exc}); run `agentreplay db migrate`"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot {action} on {self.description}: {explain_failure(exc, self._dsn)}"
            ) from exc

    def is_permanent(self, error: BaseException) -> bool:
        """The server refused the data itself (SQLSTATE class 22 or 54, or 23 but for a
        duplicate key, which an idempotent retry resolves): retrying or spooling would fail
        again."""
        cause: BaseException | None = error
        while cause is not None:
            if isinstance(cause, (DatabaseTimeout, DatabaseUnavailable)):
                return False
            if isinstance(cause, RunNotFound):  # a seal or steps for a run never stored
                return True
            if isinstance(cause, psycopg.Error) and cause.sqlstate:
                return cause.sqlstate[:2] in ("22", "54") or (
                    cause.sqlstate[:2] == "23" and cause.sqlstate != "23505")
            if isinstance(cause, (psycopg.DataError, psycopg.ProgrammingError, UnicodeError)):
                return True  # refused by the driver before it reached the server
            cause = cause.__cause__
        return False

    def close(self) -> None:
        """Close the pool; later calls raise `StoreError`."""
        self._pool_here(open_it=False).close()

    def __enter__(self) -> PostgresBackend:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresBackend({self.description!r}, schema={self.schema!r})"

    def server_endpoints(self) -> list[tuple[str, int]]:
        """TCP (host, port) pairs of the server, names and addresses; [] for Unix sockets."""
        return dsn_endpoints(self._dsn)
