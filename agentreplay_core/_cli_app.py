"""What every `agentreplay` subcommand shares: the typer app, consoles, options, errors.

Commands live in `_cli_*.py` modules that register on `app`; `_cli` imports them all.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from agentreplay_core._store import Store
from agentreplay_core.stores._open import names_postgres, open_store

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

console = Console()
err = Console(stderr=True)

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", envvar="AGENTREPLAY_DSN",
                 help="Run store URL (postgresql://..., file:PATH, memory:); default: the "
                      "embedded PostgreSQL."),
]
SchemaOption = Annotated[str, typer.Option("--schema", envvar="AGENTREPLAY_SCHEMA")]


def open_cli_store(dsn: str | None, schema: str = "agentreplay") -> Store:
    """The run store named by `--dsn` (or the embedded default), with a spinner while the
    embedded PostgreSQL starts."""
    if dsn is None or names_postgres(dsn):
        with err.status("Opening the run store (starting the embedded PostgreSQL if "
                        "needed)..."):
            return open_store(dsn, schema=schema)
    return open_store(dsn)


def fail(message: str, hint: str = "", code: int = 2) -> typer.Exit:
    """Print one error line (and a hint) to stderr; raise the returned Exit. `soft_wrap`: each
    stays one line in logs and pipes (rich wraps at 80 columns when stderr is no terminal)."""
    err.print("error: " + message, style="red", markup=False, highlight=False, soft_wrap=True)
    if hint:
        err.print("hint: " + hint, style="dim", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)
