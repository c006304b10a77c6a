"""A PgBouncer in transaction mode in front of the tests' PostgreSQL, started by the test.

It listens on a Unix socket in a directory of its own and lends each client transaction one
of `pool_size` server sessions, as production poolers do. Debian packages it
(`apt-get install pgbouncer`); `AGENTREPLAY_TEST_PGBOUNCER` names another binary.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from tests.support.pgcluster import service_user

DEFAULT_BINARY = "/usr/sbin/pgbouncer"
PORT = 6432


def binary() -> Path:
    """The pgbouncer executable, or an error that says how to install it."""
    found = os.environ.get("AGENTREPLAY_TEST_PGBOUNCER") or shutil.which("pgbouncer") \
        or DEFAULT_BINARY
    if not Path(found).is_file():
        raise RuntimeError(f"PgBouncer not found at {found}: apt-get install pgbouncer, or set "
                           "AGENTREPLAY_TEST_PGBOUNCER to its binary")
    return Path(found)


def _quoted(value: str) -> str:
    """A value of pgbouncer.ini's connection strings (libpq quoting)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class PgBouncer:
    """pgbouncer with `pool_mode = transaction` in front of the server `target_dsn` names,
    logging in there as `user` (default: the DSN's)."""

    def __init__(self, target_dsn: str, *, pool_size: int = 2, user: str | None = None) -> None:
        params = conninfo_to_dict(target_dsn)
        if user is not None:
            params["user"] = user
        self.dbname = str(params.get("dbname") or "postgres")
        self.user = str(params.get("user") or "postgres")
        server = " ".join(f"{key}={_quoted(str(params[key]))}"
                          for key in ("host", "port", "user", "password") if params.get(key))
        self.root = Path(tempfile.mkdtemp(prefix="arpgb-"))
        self.log = self.root / "pgbouncer.log"
        config = self.root / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"{self.dbname} = {server} dbname={_quoted(self.dbname)}\n"
            "[pgbouncer]\n"
            "listen_addr =\n"
            f"unix_socket_dir = {self.root}\n"
            f"listen_port = {PORT}\n"
            "auth_type = any\n"  # the server authenticates as the target DSN's user
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 200\n"
            "client_login_timeout = 10\n"
            f"logfile = {self.log}\n"
        )
        self.user_to_run = service_user()  # pgbouncer refuses to run as root
        if self.user_to_run is not None:
            info = pwd.getpwnam(self.user_to_run)
            for path in (self.root, config):
                os.chown(path, info.pw_uid, info.pw_gid)
        argv = [str(binary()), str(config)]
        if self.user_to_run is not None:
            argv = ["runuser", "-u", self.user_to_run, "--", *argv]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self._wait_ready()

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@/{self.dbname}?host={self.root}&port={PORT}"

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                output = self.process.stdout.read().decode() if self.process.stdout else ""
                log = self.log.read_text() if self.log.exists() else ""
                raise RuntimeError(f"PgBouncer exited at start: {output}\n{log}")
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.1)

    def __enter__(self) -> PgBouncer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        shutil.rmtree(self.root, ignore_errors=True)
