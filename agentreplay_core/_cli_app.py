"""What every `agentreplay` subcommand shares: the typer app, consoles, options, errors.

Commands live in `_cli_*.py` modules that register on `app`; `_cli` imports them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from agentreplay_core._cli_table import visible
from agentreplay_core._store import Store
from agentreplay_core.stores._open import ACCEPT_UNKEYED_ENV, names_postgres, open_store

app = typer.Typer(
    help="Record and replay LLM agent runs. Exit codes: 0 ok, 1 a check failed "
         "(verification, divergence, runs that differ), 2 usage or store error.",
    no_args_is_help=True,
    add_completion=False,
)
db_app = typer.Typer(help="Database schema: migrations and status.", no_args_is_help=True)
spool_app = typer.Typer(help="Rows spooled locally while the database was unreachable.",
                        no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(spool_app, name="spool")

#: the exit code of a command whose reader went away (`| head`), as a shell reports a process
#: killed by SIGPIPE: neither success nor one of the documented failures
BROKEN_PIPE = 141


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Stop quietly, with the same exit code as a broken pipe met elsewhere (rich's
        own answer is exit code 1, which reads as a failed check)."""
        try:
            super().on_broken_pipe()
        except SystemExit:
            raise SystemExit(BROKEN_PIPE) from None


console = _Console()
#: soft_wrap: a message on stderr stays one line in logs and pipes (rich would wrap it at 80
#: columns when stderr is no terminal)
err = _Console(stderr=True, soft_wrap=True)

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", envvar="AGENTREPLAY_DSN",
                 help="Run store URL (postgresql://..., file:PATH, memory:); default: the "
                      "embedded PostgreSQL."),
]
PgDsnOption = Annotated[
    str | None,
    typer.Option("--dsn", envvar="AGENTREPLAY_DSN",
                 help="PostgreSQL URL (postgresql://...) or key=value connection string; "
                      "default: the embedded PostgreSQL. File and memory stores have no "
                      "schema to migrate."),
]
SchemaOption = Annotated[str, typer.Option("--schema", envvar="AGENTREPLAY_SCHEMA")]
AcceptUnkeyedOption = Annotated[bool, typer.Option(
    "--accept-unkeyed-runs", envvar=ACCEPT_UNKEYED_ENV,
    help="With an HMAC key set (AGENTREPLAY_HMAC_KEY), also trust runs chained without one: "
         "runs recorded before the key was introduced (SECURITY.md).")]


def file_store_path(dsn: str) -> Path | None:
    """The path a `file:PATH` (or plain path) store URL names, as `open_store` reads it; None
    for any other store (an unknown `scheme://` is `open_store`'s to refuse)."""
    if dsn.startswith("memory:") or names_postgres(dsn) or "://" in dsn:
        return None
    path = dsn.removeprefix("file:")
    return Path(path).expanduser() if path else None


def _check_exists(dsn: str) -> None:
    """Refuse a file store path that does not exist: opening it would create an empty store,
    and a mistyped path would then read as a store with no runs."""
    path = file_store_path(dsn)
    if path is None or path.exists():
        return
    what = "file" if path.suffix == ".jsonl" else "directory"
    raise fail(f"no run store at {path}: the {what} does not exist",
               "check the path given with --dsn (or AGENTREPLAY_DSN); reading never creates "
               "a store, recording into it (or `agentreplay import`) does")


DEFAULT_SCHEMA = "agentreplay"


def open_cli_store(dsn: str | None, schema: str = DEFAULT_SCHEMA, *,
                   create: bool = False, accept_unkeyed: bool = False) -> Store:
    """The run store named by `--dsn` (or the embedded default), with a spinner while the
    embedded PostgreSQL starts. A file store must exist unless `create` (commands that write
    runs into the store). `accept_unkeyed`: `--accept-unkeyed-runs` (else the store reads
    AGENTREPLAY_ACCEPT_UNKEYED_RUNS itself)."""
    lax = {"accept_unkeyed_runs": True} if accept_unkeyed else {}
    if dsn is not None and not create:
        _check_exists(dsn)
    if dsn is None or names_postgres(dsn):
        with err.status("Opening the run store (starting the embedded PostgreSQL if "
                        "needed)..."):
            # a reading command must not create a schema it was sent to by a typo (an empty
            # store answers "no runs yet" and `verify --all` passes); the default schema is
            # the store's home, made on first use
            return open_store(dsn, schema=schema,
                              create_schema=create or schema == DEFAULT_SCHEMA, **lax)
    return open_store(dsn, **lax)


def require_postgres(dsn: str | None) -> None:
    """Refuse a file or memory store for the `db` commands: only PostgreSQL has a schema."""
    if dsn is None or names_postgres(dsn):
        return
    path = file_store_path(dsn)
    # anything else is not repeated: a mistyped PostgreSQL URL may hold a password
    kind = ("memory: is an in-memory store" if dsn.startswith("memory:") else
            f"file:{path} is a file store" if path is not None else
            "the --dsn given is no PostgreSQL URL")
    raise fail(f"agentreplay db works on a PostgreSQL store only; {kind}",
               "pass --dsn postgresql://... (or key=value pairs), or leave --dsn and "
               "AGENTREPLAY_DSN unset for the embedded PostgreSQL; file and memory stores "
               "need no migrations")


def fail(message: str, hint: str = "", code: int = 2) -> typer.Exit:
    """Print one error line (and a hint) to stderr; raise the returned Exit. `soft_wrap`: each
    stays one line in logs and pipes (rich wraps at 80 columns when stderr is no terminal)."""
    # a message may quote a run name or a path: its control characters are shown escaped
    err.print("error: " + visible(message), style="red", markup=False, highlight=False,
              soft_wrap=True)
    if hint:
        err.print("hint: " + visible(hint), style="dim", markup=False, highlight=False,
                  soft_wrap=True)
    return typer.Exit(code)
