"""`agentreplay verify`, `spool flush`, `db migrate`, `db status`."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

import typer

from agentreplay_core._cli_app import (
    DsnOption,
    SchemaOption,
    app,
    console,
    db_app,
    err,
    fail,
    open_cli_store,
    spool_app,
)
from agentreplay_core._cli_common import progress_bar
from agentreplay_core._errors import AgentReplayError
from agentreplay_core._plural import counted
from agentreplay_core._spool import SpoolFlushError


@app.command()
def verify(
    run_id: Annotated[str | None, typer.Argument()] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Verify every run.")] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = "agentreplay",
) -> None:
    """Check the hash chain of one run (or --all); exit 1 on any problem."""
    if not run_id and not all_runs:
        raise fail("name a run id or pass --all")
    try:
        with open_cli_store(dsn, schema) as store:
            if all_runs:
                with progress_bar("verifying runs") as update:
                    reports = store.verify_all(progress=update)
            else:
                reports = [store.verify(run_id or "")]
    except AgentReplayError as exc:
        raise fail(str(exc)) from None
    bad = [r for r in reports if not r.ok]
    for report in reports:
        # markup off: problem codes are written in [brackets]
        console.print(str(report), style="green" if report.ok else "red", markup=False,
                      highlight=False, soft_wrap=True)
    raise typer.Exit(1 if bad else 0)


@spool_app.command("flush")
def spool_flush(dsn: DsnOption = None, schema: SchemaOption = "agentreplay") -> None:
    """Load rows spooled while the database was down."""
    failed: dict[UUID, str] = {}
    try:
        with open_cli_store(dsn, schema) as store:
            try:
                loaded = store.flush_spool()
            except SpoolFlushError as partial:
                loaded, failed = partial.loaded, partial.failed
    except AgentReplayError as exc:
        raise fail(str(exc), "is the database reachable again?") from None
    for run_id, count in loaded.items():
        console.print(f"run {run_id}: {counted(count, 'step')} loaded")
    console.print(f"{counted(len(loaded), 'spooled run')} loaded")
    for run_id, why in failed.items():
        err.print(f"run {run_id} stays spooled: {why}", style="red", markup=False)
    if failed:
        raise typer.Exit(1)


@db_app.command("migrate")
def db_migrate(dsn: DsnOption = None, schema: SchemaOption = "agentreplay") -> None:
    """Apply pending schema migrations."""
    from agentreplay_core.stores._embedded import embedded_dsn
    from agentreplay_core.stores._migrate import migrate

    try:
        applied = migrate(dsn or embedded_dsn(), schema)
    except AgentReplayError as exc:
        raise fail(str(exc)) from None
    console.print(f"applied migrations: {applied or 'none (up to date)'}")


@db_app.command("status")
def db_status(dsn: DsnOption = None, schema: SchemaOption = "agentreplay") -> None:
    """Show which migrations are applied, pending or waiting for pgvector."""
    from rich.table import Table

    from agentreplay_core.stores._embedded import embedded_dsn
    from agentreplay_core.stores._migrate import migration_status

    try:
        states = migration_status(dsn or embedded_dsn(), schema)
    except AgentReplayError as exc:
        raise fail(str(exc)) from None
    table = Table(title=f"schema {schema}")
    for column in ("version", "name", "state", "applied at", "note"):
        table.add_column(column)
    for state in states:
        table.add_row(f"{state.version:04d}", state.name, state.state,
                      str(state.applied_at or ""), state.note or "")
    console.print(table)
