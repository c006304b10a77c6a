"""`agentreplay verify`, `spool flush`, `db migrate`, `db status`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from uuid import UUID

import typer

from agentreplay_core._cli_app import (
    AcceptUnkeyedOption,
    DsnOption,
    PgDsnOption,
    SchemaOption,
    app,
    console,
    db_app,
    err,
    fail,
    open_cli_store,
    require_postgres,
    spool_app,
)
from agentreplay_core._cli_common import (
    cli_errors,
    files_named_here,
    is_transient,
    progress_bar,
    unreadable_run_files,
)
from agentreplay_core._cli_table import visible
from agentreplay_core._errors import AgentReplayError, RunNotFound, StoreError
from agentreplay_core._integrity import Problem, VerifyReport
from agentreplay_core._plural import counted
from agentreplay_core._spool import SpoolFlushError
from agentreplay_core._store import Store


@app.command("verify", help=(
    "Check the hash chain of one run, or of every run (--all).\n\n"
    "Every step's checksum is recomputed along the chain and the run's seal is checked; a "
    "run that cannot be read (a damaged run file) fails too. Prints one line per run, or "
    "one per problem.\n\n"
    "Exit codes: 0 every run verified, 1 a run failed verification or cannot be read, "
    "2 unknown run, usage or store error."))
def verify(
    run_id: Annotated[str | None, typer.Argument(
        metavar="RUN", help="A run id, or a unique prefix; or --all.", show_default=False)
    ] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Verify every run.")] = False,
    accept_unkeyed: AcceptUnkeyedOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = "agentreplay",
) -> None:
    """Check the hash chain of one run (or --all); exit 1 on any problem."""
    if run_id and all_runs:  # which one was meant cannot be guessed
        raise fail("name a run id or pass --all, not both")
    if not run_id and not all_runs:
        raise fail("name a run id or pass --all")
    damaged: list[tuple[Path, str]] = []
    with cli_errors(), open_cli_store(dsn, schema, accept_unkeyed=accept_unkeyed) as store:
        if all_runs:
            with progress_bar("verifying runs") as update, files_named_here():
                reports = store.verify_all(progress=update)
            damaged = unreadable_run_files(store)
        else:
            reports = [_verify_one(store, run_id or "")]
    for report in reports:
        # markup off: problem codes are written in [brackets]
        console.print(str(report), style="green" if report.ok else "red", markup=False,
                      highlight=False, soft_wrap=True)
    for path, why in damaged:  # runs the store cannot list: failed like an unreadable run
        console.print(f"run file {path} cannot be read: {why} [unreadable]", style="red",
                      markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1 if damaged or not all(r.ok for r in reports) else 0)


def _verify_one(store: Store, run_id: str) -> VerifyReport:
    """The report on one run. A run that exists but cannot be read (a damaged run file, a
    row that does not decode) fails verification, as it does in `verify --all`; an unknown
    run or an unreachable database stays an error."""
    rid = store.resolve_run_id(run_id)
    try:
        return store.verify(rid)
    except RunNotFound:
        raise
    except (StoreError, OSError) as exc:
        if is_transient(exc):
            raise
        return VerifyReport(rid, 0, [Problem(rid, None, "unreadable",
                                             f"cannot read the run: {exc}")])


@spool_app.command("flush")
def spool_flush(dsn: DsnOption = None, schema: SchemaOption = "agentreplay") -> None:
    """Load rows spooled while the database was down (only this store's runs)."""
    failed: dict[UUID, str] = {}
    try:
        with open_cli_store(dsn, schema, create=True) as store:
            try:
                loaded = store.flush_spool()
            except SpoolFlushError as partial:
                loaded, failed = partial.loaded, partial.failed
            others = store.spool.elsewhere(store.backend)
    except AgentReplayError as exc:
        raise fail(str(exc), "is the database reachable again?") from None
    for run_id, count in loaded.items():
        console.print(f"run {run_id}: {counted(count, 'step')} loaded")
    console.print(f"{counted(len(loaded), 'spooled run')} loaded")
    _other_stores(others)
    for run_id, why in failed.items():
        err.print(visible(f"run {run_id} stays spooled: {why}"), style="red", markup=False,
                  highlight=False, soft_wrap=True)
    if failed:
        raise typer.Exit(1)


def _other_stores(others: dict[UUID, str]) -> None:
    """Say which spooled runs were left for the stores they belong to."""
    if not others:
        return
    by_store: dict[str, int] = {}
    for store in others.values():
        by_store[store] = by_store.get(store, 0) + 1
    console.print(f"{counted(len(others), 'spooled run')} of other stores left spooled "
                  "(flush each with its own --dsn/--schema):", markup=False, highlight=False,
                  soft_wrap=True)
    for store, count in sorted(by_store.items()):
        console.print(f"  {store}: {counted(count, 'run')}", markup=False, highlight=False,
                      soft_wrap=True)


@db_app.command("migrate")
def db_migrate(dsn: PgDsnOption = None, schema: SchemaOption = "agentreplay") -> None:
    """Apply pending schema migrations (PostgreSQL)."""
    from agentreplay_core.stores._embedded import embedded_dsn
    from agentreplay_core.stores._migrate import migrate

    require_postgres(dsn)
    try:
        applied = migrate(dsn or embedded_dsn(), schema)
    except AgentReplayError as exc:
        raise fail(str(exc)) from None
    console.print(f"applied migrations: {applied or 'none (up to date)'}")


@db_app.command("status")
def db_status(dsn: PgDsnOption = None, schema: SchemaOption = "agentreplay") -> None:
    """Show which migrations are applied, pending or waiting for pgvector (PostgreSQL)."""
    from rich.table import Table

    from agentreplay_core.stores._embedded import embedded_dsn
    from agentreplay_core.stores._migrate import migration_status

    require_postgres(dsn)
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
