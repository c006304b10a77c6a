"""A throwaway PostgreSQL cluster that a test session starts and stops itself.

The binaries come from the `pgserver` package (PostgreSQL 16 with pgvector) or from any other
installation's `bin` directory, such as Debian's PostgreSQL 15 (no pgvector). The server only
listens on a Unix socket inside its data directory, so it never touches the network.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

DEBIAN_PG15_BIN = Path("/usr/lib/postgresql/15/bin")


def pgserver_bin_dir() -> Path:
    """The bin directory of the PostgreSQL that ships inside the `pgserver` wheel."""
    import pgserver._commands as commands

    return Path(commands.POSTGRES_BIN_PATH)


def service_user() -> str | None:
    """PostgreSQL refuses to run as root; pick (or make) an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return None
    for candidate in ("postgres", "pgserver"):
        try:
            pwd.getpwnam(candidate)
            return candidate
        except KeyError:
            continue
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "pgserver"],
        check=True,
    )
    return "pgserver"


def _make_readable(path: Path) -> None:
    """Let the service user traverse into `path` (pgserver's files sit under a root venv)."""
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o001)


class PgCluster:
    """initdb + pg_ctl around a temporary data directory."""

    def __init__(self, bin_dir: Path, *, port: int = 5432, fsync: bool = False) -> None:
        self.bin_dir = Path(bin_dir)
        self.port = port
        self.fsync = fsync
        self.user = service_user()
        self.root = Path(tempfile.mkdtemp(prefix="arpg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        if self.user is not None:
            info = pwd.getpwnam(self.user)
            os.chown(self.root, info.pw_uid, info.pw_gid)
            _make_readable(self.bin_dir)
        self._run(
            [
                str(self.bin_dir / "initdb"),
                "-D", str(self.data),
                "-U", "postgres",
                "--auth=trust",
                "-E", "UTF8",
                "--no-sync",
                "--locale=C",
            ]
        )

    def _run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        if self.user is not None:
            argv = ["runuser", "-u", self.user, "--", *argv]
        return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=120)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.root}&port={self.port}"

    def start(self) -> None:
        options = (
            f"-k {self.root} -p {self.port} -c listen_addresses='' "
            f"-c fsync={'on' if self.fsync else 'off'} "
            "-c max_connections=200 -c shared_buffers=64MB"
        )
        result = self._run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
             "-o", options, "-w", "-t", "60", "start"],
            check=False,
        )
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start: {result.stderr}\n{log}")

    def stop(self, mode: str = "fast") -> None:
        self._run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"],
            check=False,
        )

    def is_running(self) -> bool:
        result = self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "status"],
                           check=False)
        return result.returncode == 0

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_ready(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
