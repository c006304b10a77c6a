"""`agentreplay export RUN -o FILE` and `agentreplay import FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agentreplay_core._cli_app import (
    AcceptUnkeyedOption,
    DsnOption,
    SchemaOption,
    app,
    console,
    err,
    fail,
    open_cli_store,
)
from agentreplay_core._cli_common import cli_errors, progress_bar
from agentreplay_core._errors import IntegrityError
from agentreplay_core._integrity import VerifyReport
from agentreplay_core._model import RunStatus
from agentreplay_core._plural import counted
from agentreplay_core._transfer import MalformedExport, RunExists, export_run, import_run

_SHOWN_PROBLEMS = 5


def _problems(report: VerifyReport) -> None:
    for problem in report.problems[:_SHOWN_PROBLEMS]:
        err.print("  " + str(problem), style="red", markup=False, highlight=False, soft_wrap=True)
    if len(report.problems) > _SHOWN_PROBLEMS:
        err.print(f"  ... and {counted(len(report.problems) - _SHOWN_PROBLEMS, 'more problem')}",
                  style="red", highlight=False, soft_wrap=True)


@app.command("export", help=(
    "Write a run to a .jsonl file that replays with no database.\n\n"
    "The file is in the file-store format: open_store(\"file:FILE\") replays and verifies "
    "it, `agentreplay import FILE` loads it into another store. The run is verified on the "
    "way; a run that fails verification is exported anyway, as stored (the file then shows "
    "the same problems to `agentreplay verify`), with a warning and exit code 1.\n\n"
    "Exit codes: 0 exported, 1 exported but the run fails verification, 2 unknown run, "
    "usage or store error."))
def export_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="A run id, or a unique prefix.")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="FILE",
        help="The file to write, ending in .jsonl (default: RUN_ID.jsonl here). An existing "
             "file is replaced.")] = None,
    accept_unkeyed: AcceptUnkeyedOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = "agentreplay",
) -> None:
    """Export a run to a single-run .jsonl file."""
    with cli_errors(), open_cli_store(dsn, schema, accept_unkeyed=accept_unkeyed) as store:
        run = store.get_run(run_id)
        target = output or Path(f"{run.run_id}.jsonl")
        with progress_bar(f"exporting {str(run.run_id)[:8]}") as update:
            result = export_run(store, run.run_id, target, progress=update)
    note = " (still recording: the steps stored so far)" if (
        result.run.status == RunStatus.RECORDING) else ""
    console.print(f"exported run {result.run.run_id} ({counted(result.steps, 'step')}, "
                  f"{result.run.status.value}){note} to {result.path}", markup=False,
                  highlight=False, soft_wrap=True)
    if not result.report.ok:
        err.print(f"warning: run {result.run.run_id} fails verification; the file holds the "
                  "run as stored, problems included:", style="yellow", markup=False,
                  highlight=False, soft_wrap=True)
        _problems(result.report)
        raise typer.Exit(1)


@app.command("import", help=(
    "Load an exported run into the store.\n\n"
    "Embedding vectors are indexed for similarity search where the store keeps them "
    "(PostgreSQL with pgvector). The file must be a complete agentreplay export whose run "
    "passes verification with this store's key (AGENTREPLAY_HMAC_KEY); a run already stored "
    "is an error unless --replace.\n\n"
    "Exit codes: 0 imported, 1 the run fails verification (not imported), 2 malformed "
    "file, run already stored, usage or store error. An interrupted import leaves the store "
    "as it was. A run exported while still recording is imported as incomplete."))
def import_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="An exported .jsonl run file.")],
    replace: Annotated[bool, typer.Option(
        "--replace", help="Replace a stored run with the same id (kept until the import "
                          "is whole).")] = False,
    no_verify: Annotated[bool, typer.Option(
        "--no-verify", help="Import a run that fails verification as it is (it keeps "
                            "failing verification).")] = False,
    accept_unkeyed: AcceptUnkeyedOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = "agentreplay",
) -> None:
    """Import an exported run file."""
    with cli_errors(), open_cli_store(dsn, schema, create=True,
                                      accept_unkeyed=accept_unkeyed) as store:
        try:
            with progress_bar(f"importing {file.name}") as update:
                result = import_run(store, file, replace=replace, verify=not no_verify,
                                    progress=update)
        except IntegrityError as exc:  # a check that failed (exit 1), not a broken file
            report = exc.report if isinstance(exc.report, VerifyReport) else None
            what = f"run {report.run_id}" if report else "the run"
            err.print(f"error: {file}: {what} fails verification; not imported", style="red",
                      markup=False, highlight=False, soft_wrap=True)
            if report:
                _problems(report)
            err.print("hint: --no-verify imports it as it is", style="dim", markup=False)
            raise typer.Exit(1) from None
        except RunExists as exc:
            raise fail(str(exc), "--replace replaces the stored run with the file's") \
                from None
        except MalformedExport as exc:
            raise fail(str(exc), "import takes a file written by `agentreplay export` (or one "
                                 "run file of a file store)") from None
    replaced = ", replacing the stored one" if result.replaced else ""
    indexed = result.embeddings if getattr(store.backend, "has_pgvector", False) else 0
    vectors = f", {counted(indexed, 'vector')} indexed for similarity search" if indexed else ""
    steps = counted(result.steps, "step")
    unsealed = (", unsealed: exported while still recording, stored as incomplete"
                if result.unsealed else "")
    console.print(f"imported run {result.run.run_id} ({steps}{vectors}{unsealed}){replaced} "
                  f"into {store.backend.description}", markup=False, highlight=False,
                  soft_wrap=True)
    if not result.report.ok:
        err.print(f"warning: run {result.run.run_id} was imported as is and fails "
                  "verification:", style="yellow", markup=False, highlight=False, soft_wrap=True)
        _problems(result.report)

