"""`agentreplay prune --older-than 30d`: delete old runs."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from agentreplay_core._cli_app import (
    DsnOption,
    SchemaOption,
    app,
    console,
    err,
    fail,
    open_cli_store,
)
from agentreplay_core._cli_common import (
    cli_errors,
    local_time,
    print_json,
    progress_bar,
    run_tags,
    short_ids,
    status_text,
)
from agentreplay_core._cli_table import Column, fitted_table, visible
from agentreplay_core._model import Run, RunStatus
from agentreplay_core._plural import counted
from agentreplay_core._prune import plan_prune, prune
from agentreplay_core._when import parse_duration


def _brief(run: Run) -> dict[str, Any]:
    return {"run_id": str(run.run_id), "name": run.name, "status": run.status.value,
            "started_at": run.started_at.isoformat(), "tags": run_tags(run)}


def _table(runs: list[Run]) -> Table:
    columns = [Column("run id"), Column("name", None), Column("status"), Column("started"),
               Column("tags", None)]
    rows: list[list[str | Text]] = [
        [short, run.name or "", status_text(run), local_time(run.started_at),
         ", ".join(run_tags(run))]
        for run, short in zip(runs, short_ids([r.run_id for r in runs]), strict=True)]
    return fitted_table(columns, rows, console.width)


@app.command("prune", help=(
    "Delete runs that started longer ago than --older-than.\n\n"
    "Steps and embedding vectors go with them. Runs still being recorded are never "
    "deleted: a run whose process died on this host is incomplete and can go; a run "
    "recording on another host is kept and listed. Prints what it deletes (or, with "
    "--dry-run, would delete).\n\n"
    "Exit codes: 0 ok, 2 usage or store error."))
def prune_command(
    older_than: Annotated[str, typer.Option(
        "--older-than", metavar="DURATION",
        help="Delete runs started longer ago than this: 30d, 12h, 2w, 1d12h.")],
    keep_tag: Annotated[list[str] | None, typer.Option(
        "--keep-tag", metavar="TAG", help="Keep runs with this tag (repeatable).")] = None,
    status: Annotated[list[RunStatus] | None, typer.Option(
        "--status", help="Only delete runs with this status (repeatable).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="List what would be deleted; delete nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = "agentreplay",
) -> None:
    """Delete old runs, never one still recording."""
    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise fail(str(exc)) from None
    with cli_errors(), open_cli_store(dsn, schema) as store:
        plan = plan_prune(store, age, keep_tags=keep_tag or (), statuses=status or ())
        if dry_run:
            gone = plan.delete
        else:
            with progress_bar("deleting runs") as update:
                gone = prune(store, plan, progress=update)
    if as_json:
        print_json({"dry_run": dry_run, "cutoff": plan.cutoff.isoformat(),
                    "deleted": [] if dry_run else [_brief(r) for r in gone],
                    "would_delete": [_brief(r) for r in gone] if dry_run else [],
                    "still_recording": [_brief(r) for r in plan.still_recording]})
        return
    verb = "would delete" if dry_run else "deleted"
    if gone:
        console.print(_table(gone), crop=False)
    console.print(f"{verb} {counted(len(gone), 'run')} started before {local_time(plan.cutoff)}",
                  highlight=False, soft_wrap=True)
    if plan.still_recording:
        kept = counted(len(plan.still_recording), "old run")
        err.print(f"kept {kept} still recording (alive, or recorded on another host):",
                  style="yellow", soft_wrap=True)
        for run in plan.still_recording:
            host = run.metadata.get("agentreplay", {})
            where = host.get("host") if isinstance(host, dict) else None
            err.print(visible(f"  {run.run_id} {run.name or ''} (host {where or '?'})"),
                      markup=False,
                      highlight=False, soft_wrap=True)
