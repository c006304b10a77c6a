"""Connecting to PostgreSQL: errors that name the server (never its password) and say what to
check, DSN parsing for the replay network guard, and per-connection settings (time zone,
timeouts, TCP keepalives, the send buffer of a local socket)."""

from __future__ import annotations

import abc
import contextlib
import math
import os
import re
import socket
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from agentreplay_core._errors import StoreError
from agentreplay_core.stores import _sql
from agentreplay_core.stores._backend import StoreBackend

__all__ = [
    "POOLERS",
    "Conn",
    "DatabaseTimeout",
    "DatabaseUnavailable",
    "PostgresPart",
    "SessionLimits",
    "configure",
    "connect",
    "connection_options",
    "describe_target",
    "dsn_endpoints",
    "explain_failure",
    "redact_dsn",
    "transaction_pooled",
    "widen_send_buffer",
]

Conn = psycopg.Connection[Any]


class PostgresPart(StoreBackend):
    """What `PostgresBackend`'s read and write halves (`_pgread`, `_pgwrite`) take from it:
    its schema and its connections."""

    schema: str

    @abc.abstractmethod
    def _connection(self, action: str, timeout: float | None = None,
                    *, write: bool = False) -> AbstractContextManager[Conn]:
        """A pooled connection; errors become `StoreError`s naming `action`."""


class DatabaseUnavailable(StoreError, ConnectionError):
    """PostgreSQL cannot be reached (down, restarting, wrong address); retrying may help."""


class DatabaseTimeout(StoreError, TimeoutError):
    """The server cancelled a statement: it waited too long for a lock or ran too long."""


#: libpq TCP keepalives: a connection to a server that vanished without closing it (a
#: black-holed network, a powered-off host) fails after about 25 s instead of hanging for the
#: kernel's two hours. libpq ignores them on Unix sockets.
KEEPALIVES: dict[str, int] = {
    "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
}  # fmt: skip
#: the same bound while sent data stays unacknowledged, when keepalive probes do not run
#: (milliseconds; libpq 12 and later)
TCP_USER_TIMEOUT_MS = 25_000


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
    if isinstance(exc, psycopg.Error) and exc.sqlstate in _LOST_STATEMENT:
        message += _POOLER_HINT
    return message


#: a prepared statement missing, or there already, on a session this connection prepared it
#: on (or never did): what a transaction pooler's swapped server sessions look like
_LOST_STATEMENT = ("26000", "42P05")
_POOLER_HINT = (". Is the server behind a pooler in transaction mode (PgBouncer's pool_mode = "
                "transaction)? Open the store with pooler='transaction' (or set "
                "AGENTREPLAY_POOLER=transaction), which prepares no statement")


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


def connection_options(dsn: str, timeout: float) -> dict[str, Any]:
    """Keyword arguments of every store connection: connect timeout and TCP keepalives.

    Keepalive settings the DSN spells out itself win (keyword arguments would override them).
    """
    try:
        given = set(conninfo_to_dict(dsn))
    except psycopg.Error:
        given = set()  # connecting reports the bad DSN
    options: dict[str, Any] = {"connect_timeout": max(2, math.ceil(timeout)), **KEEPALIVES}
    if psycopg.pq.version() >= 120000:
        options["tcp_user_timeout"] = TCP_USER_TIMEOUT_MS
    return {k: v for k, v in options.items() if k == "connect_timeout" or k not in given}


def connect(dsn: str, *, timeout: float = 10) -> Conn:
    """An autocommit connection, or a `StoreError` that says where and what to check.

    It prepares no statement: it lives for a few statements, and behind a transaction
    pooler a prepared statement stays on a server session the next transaction may not get.
    """
    try:
        return psycopg.connect(dsn, autocommit=True, prepare_threshold=None,
                               **connection_options(dsn, timeout))
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


#: What a connection over a Unix-domain socket asks the kernel to buffer for sending: a whole
#: batch of rows (1,000 chat steps are about 3 MB of COPY data). With the default (~200 KB)
#: the writer thread waits on the socket a dozen times per batch, and after each wait it waits
#: for the GIL too, up to the 5 ms switch interval while the agent's thread computes: a COPY of
#: 1,000 rows was measured 2.5x slower beside a busy thread, and 1.2x with this buffer. The
#: kernel caps the size at net.core.wmem_max.
SEND_BUFFER = 4 * 1024 * 1024


def widen_send_buffer(fd: int) -> None:
    """Raise the send buffer of a Unix-domain socket to `SEND_BUFFER` (best effort).

    TCP sockets are left alone: their buffer grows by itself (autotuning), and setting a size
    would switch that off.
    """
    unix = getattr(socket, "AF_UNIX", None)
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except (OSError, ValueError):  # not a socket this platform can wrap
        return
    with sock, contextlib.suppress(OSError):  # a kernel that refuses keeps its default
        if sock.family == unix and \
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < SEND_BUFFER:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)


def configure(conn: Conn, *, statement_timeout: float = 0, lock_timeout: float = 0,
              pooled: bool = False) -> None:
    """Session settings every store connection gets, in one round trip, and a send buffer
    that holds a batch (`widen_send_buffer`).

    Timestamps come back in UTC whatever the server's default zone. The timeouts (seconds, 0 =
    none) bound how long a statement may run and wait for a lock; the server then cancels it.
    Behind a transaction pooler (`pooled`) the timeouts are left out: the pooler lends the
    server's session to other clients between transactions, so they would bind those
    clients' statements and miss ours; the time zone stays (PgBouncer carries it over).
    """
    widen_send_buffer(conn.fileno())
    settings = {"TimeZone": "UTC"}
    if not pooled:
        settings["statement_timeout"] = str(milliseconds(statement_timeout))
        settings["lock_timeout"] = str(milliseconds(lock_timeout))
    conn.execute(_sql.set_config(len(settings)), [v for kv in settings.items() for v in kv])


def milliseconds(seconds: float) -> int:
    """A timeout in whole milliseconds for PostgreSQL; a positive one never rounds to 0 (off)."""
    return math.ceil(seconds * 1000) if seconds > 0 else 0


#: what `open_store(pooler=...)` accepts: how a pooler between the store and PostgreSQL lends
#: server sessions (None or "session": one for the connection's life, as a direct connection)
POOLERS = (None, "session", "transaction")


def transaction_pooled(pooler: str | None) -> bool:
    """Whether `pooler` (`POOLERS`) lends a server session only for a transaction; "" (an
    empty `AGENTREPLAY_POOLER`) is None."""
    if pooler == "":
        pooler = None
    if pooler not in POOLERS:
        hint = (" (statement mode refuses transactions of more than one statement, which "
                "a run's writes need: use transaction mode)" if pooler == "statement" else "")
        raise ValueError(f"pooler must be None, 'session' or 'transaction', got {pooler!r}"
                         f"{hint}")
    return pooler == "transaction"


@dataclass(frozen=True)
class SessionLimits:
    """The statement and lock timeouts of a store's sessions, in seconds (0 = no limit)."""

    statement_timeout: float
    lock_timeout: float
    #: the server is reached through a pooler in transaction mode (`POOLERS`): no session
    #: settings but the time zone, no prepared statements
    pooled: bool = False

    def __post_init__(self) -> None:
        for label, value in (("write_statement_timeout", self.statement_timeout),
                             ("lock_timeout", self.lock_timeout)):
            if not (isinstance(value, (int, float)) and 0 <= value < math.inf):
                raise ValueError(f"{label} must be a number of seconds >= 0 (0 = no limit), "
                                 f"got {value!r}")

    def configure(self, conn: Conn) -> None:
        """`configure` with these limits: the pool's hook for each new connection."""
        configure(conn, statement_timeout=self.statement_timeout, lock_timeout=self.lock_timeout,
                  pooled=self.pooled)

    def error(self, exc: psycopg.Error, failed: str) -> DatabaseTimeout:
        """What to raise for a statement the server cancelled; `failed` says what failed."""
        # behind a transaction pooler the limits are the role's, which the store cannot set
        if self.pooled:
            lock_limit, statement_limit = "the role's lock_timeout", "the role's statement_timeout"
            lock_remedy = "give the role a longer one (ALTER ROLE ... SET lock_timeout)"
            statement_remedy = "give the role a longer one (ALTER ROLE ... SET statement_timeout)"
        else:
            lock_limit = f"lock_timeout={self.lock_timeout:g}s"
            statement_limit = f"write_statement_timeout={self.statement_timeout:g}s"
            lock_remedy = "open the store with a longer lock_timeout="
            statement_remedy = "open the store with a longer write_statement_timeout="
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            return DatabaseTimeout(
                f"{failed}: gave up after waiting {lock_limit} for a lock that another "
                "session holds (a migration, VACUUM FULL or LOCK TABLE?), and the server "
                "cancelled the statement. Find the holder in pg_locks and pg_stat_activity, "
                f"or {lock_remedy}"
            )
        reason = " ".join(str(exc).split())
        if "statement timeout" in reason:
            reason = (f"it ran longer than {statement_limit} and the server cancelled it "
                      f"(server overloaded, disk stalled?); {statement_remedy} if such writes "
                      "are legitimately slower")
        return DatabaseTimeout(f"{failed}: {reason}")
