"""The embedded PostgreSQL: the default store when no URL or `AGENTREPLAY_DSN` is given.

It comes from the `pgserver` package (PostgreSQL with pgvector in a wheel), lives in a per-user
data directory and listens only on a Unix socket. The first process starts it; later ones
reuse it; it stops when the last process using it exits. Usage::

    from agentreplay_core.stores._embedded import embedded_dsn

    dsn = embedded_dsn()  # e.g. postgresql://postgres:@/postgres?host=/tmp/...
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from pathlib import Path

from agentreplay_core._errors import StoreError

__all__ = ["DATA_DIR_ENV", "default_data_dir", "embedded_dsn"]

#: starts of the embedded server tried before giving up
START_ATTEMPTS = 3
#: overrides the data directory of the embedded server
DATA_DIR_ENV = "AGENTREPLAY_EMBEDDED_DIR"


def default_data_dir() -> Path:
    """`$AGENTREPLAY_EMBEDDED_DIR`, else `<user data dir>/agentreplay/pgdata`."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("agentreplay")) / "pgdata"


def embedded_dsn(data_dir: Path | None = None) -> str:
    """Start (or reuse) the embedded PostgreSQL in `data_dir` and return its DSN.

    Raises:
        StoreError: pgserver is not installed, or the server cannot start.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs (through pgserver) warns about an unset XDG_RUNTIME_DIR on every
            # import in containers and CI; it changes nothing for a per-user data directory.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            from pgserver.postgres_server import get_server
    except ImportError:
        raise StoreError(
            "no store URL and no AGENTREPLAY_DSN given, and the embedded PostgreSQL needs the "
            'pgserver package: pip install "agentreplay[embedded]" (or set AGENTREPLAY_DSN to a '
            "postgresql:// URL, or use file:PATH)"
        ) from None
    path = (Path(data_dir) if data_dir is not None else default_data_dir()).expanduser()
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # "stop": the server outlives this call and stops when its last user process exits.
            server = get_server(path, cleanup_mode="stop")
            return str(server.get_uri())
        except Exception as exc:  # pgserver raises assorted subprocess and OS errors
            if attempt == START_ATTEMPTS:
                raise StoreError(
                    f"could not start the embedded PostgreSQL in {path}: {exc}. Its log is "
                    f"{path / 'log'}; remove that directory to start afresh, or set "
                    "AGENTREPLAY_DSN to use another server"
                ) from exc
            # pgserver gives the server a fixed 10 s to start, too little on a busy machine;
            # it keeps the half-started handle, so drop it before asking again.
            _forget_server(path)
            _set_aside_if_half_made(path)
            time.sleep(1.0)
    raise AssertionError("unreachable")


def _set_aside_if_half_made(path: Path) -> None:
    """Move a data directory initdb never finished out of the way, so the next start makes a
    new one. Interrupted (Ctrl-C, a killed process), initdb can leave `PG_VERSION` without
    `global/pg_control`: no server can ever start there, and pgserver, seeing `PG_VERSION`,
    never initialises it again. Nothing is deleted: it is renamed beside, and said so.
    (pgserver starts servers under an inter-process lock: no other process is inside initdb
    here once a start failed.)"""
    if not (path / "PG_VERSION").exists() or (path / "global" / "pg_control").exists():
        return
    aside = path.with_name(f"{path.name}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        path.rename(aside)
    except OSError:  # the start error says where the directory is and what to do
        return
    logging.getLogger("agentreplay").warning(
        "agentreplay: the embedded PostgreSQL's data directory %s was never fully "
        "initialised (no global/pg_control); moved it to %s and starting afresh", path, aside)


def _forget_server(path: Path) -> None:
    try:
        from pgserver.postgres_server import PostgresServer

        PostgresServer._instances.pop(path.resolve(), None)
    except Exception:  # a pgserver without that registry: nothing to forget
        return
