"""`agentreplay runs` (list and filter runs) and `agentreplay show RUN` (a run's steps)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.highlighter import JSONHighlighter
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
    duration_text,
    files_named_here,
    lineage,
    local_time,
    print_json,
    run_seconds,
    run_tags,
    short_ids,
    status_text,
    unreadable_run_files,
)
from agentreplay_core._cli_table import Column, fitted_table, visible, visible_json
from agentreplay_core._codec import encode
from agentreplay_core._diff import summarize
from agentreplay_core._divergence import peek
from agentreplay_core._model import Run, RunStatus, Step
from agentreplay_core._plural import counted
from agentreplay_core._store import Store
from agentreplay_core._when import parse_since

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _step_count(store: Store, run: Run) -> int:
    """Sealed runs know their step count; for one still recording or cut short, count."""
    if run.head_checksum is not None:
        return run.step_count
    return len(store.backend.load_steps(run.run_id))


def _run_json(run: Run, steps: int) -> dict[str, Any]:
    data = run.model_dump(mode="json")
    data.update(steps=steps, tags=run_tags(run), duration_s=run_seconds(run))
    return data


@app.command("runs", help=(
    "List runs, newest first.\n\n"
    "A run whose recording process died shows as incomplete. For a run not sealed yet the "
    "steps column counts what is stored.\n\n"
    "Exit codes: 0 ok, 2 usage or store error."))
def runs_command(
    name: Annotated[str | None, typer.Option("--name", help="Only runs with this name.")] = None,
    status: Annotated[RunStatus | None, typer.Option(
        "--status", help="Only runs with this status.")] = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Only runs recorded with this tag.")
                   ] = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="Only runs started since: a duration back from now (30d, 12h, 45m) "
                        "or an ISO date or time (2024-05-01, 2024-05-01T14:30).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many runs.")] = 50,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
    schema: SchemaOption = "agentreplay",
) -> None:
    """List runs, newest first (a table, or JSON)."""
    try:
        started = parse_since(since) if since is not None else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    with cli_errors(), open_cli_store(dsn, schema) as store:
        with files_named_here():
            runs = store.list_runs(name=name, status=status, since=started, tag=tag,
                                   limit=limit)
        counts = [_step_count(store, run) for run in runs]
        damaged = unreadable_run_files(store)
    if as_json:
        print_json([_run_json(run, n) for run, n in zip(runs, counts, strict=True)])
        _warn_unreadable(damaged)
        return
    if not runs:
        err.print("no runs match" if (name or status or tag or since) else
                  "no readable runs" if damaged else "no runs yet")
        _warn_unreadable(damaged)
        return
    columns = [Column("run id"), Column("name", None), Column("status"),
               Column("steps", justify="right"), Column("started"),
               Column("took", justify="right"), Column("tags", None)]
    forks = any(run.parent_run_id is not None for run in runs)
    if forks:
        columns.append(Column("parent@step"))
    rows: list[list[str | Text]] = []
    for run, count, short in zip(runs, counts, short_ids([r.run_id for r in runs]), strict=True):
        rows.append([short, run.name or "", status_text(run), str(count),
                     local_time(run.started_at), duration_text(run), ", ".join(run_tags(run))])
        if forks:
            rows[-1].append(lineage(run))
    console.print(fitted_table(columns, rows, console.width), crop=False)
    if len(runs) == limit:
        err.print(f"showing the {limit} newest; --limit N shows more", style="dim", soft_wrap=True)
    _warn_unreadable(damaged)


def _warn_unreadable(damaged: list[tuple[Path, str]]) -> None:
    """One warning line per run file that could not be read, so is not listed."""
    for path, why in damaged:
        err.print(visible(f"warning: {path} is not listed: its run cannot be read: {why}"),
                  style="yellow", markup=False, highlight=False, soft_wrap=True)


def _one_line(value: Any, width: int) -> Text:
    return Text(summarize(peek(value), width))


def _error_line(value: Any, width: int) -> Text:
    """A recorded error, marked as one in words (colour is lost in pipes, logs, NO_COLOR):
    `error ValueError: 'no flights'`."""
    record = peek(value)
    if isinstance(record, dict) and record.get("cancelled") is True:
        said = "cancelled"
    elif isinstance(record, dict) and isinstance(record.get("type"), str):
        message = record.get("message")
        said = record["type"] + (f": {summarize(message, width)}" if message else "")
    else:
        said = summarize(record, width)
    return Text(f"error {said}", style="red")


def _jsonable(value: Any) -> Any:
    """A decoded value for pretty JSON: containers become lists and objects with string keys;
    other values are written with `str` (dates, bytes, decimals, ...)."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        # strict JSON has no NaN or Infinity: written as `--json` writes them
        return encode(value)
    return value


def _print_step(step: Step) -> None:
    data = {
        "step": step.step, "kind": step.kind, "name": step.name, "path": step.path,
        "is_error": step.is_error, "started_at": step.started_at.isoformat(),
        "duration_ms": step.duration_ms, "match_key": step.match_key,
        "checksum": step.checksum, "input": _jsonable(peek(step.input)),
        "output": _jsonable(peek(step.output)),
    }
    text = json.dumps(data, indent=2, default=str, ensure_ascii=False, allow_nan=False)
    console.print(JSONHighlighter()(visible_json(text)), soft_wrap=True)


def _print_run(run: Run, steps: list[Step]) -> None:
    head = Text.assemble(("run ", "bold"), (str(run.run_id), "bold"), "  ",
                         visible(run.name or ""), "  ", status_text(run))
    lines = [f"started {local_time(run.started_at, seconds=True)}, took {duration_text(run)}, "
             + counted(len(steps), "step")]
    if run_tags(run):
        lines.append("tags: " + visible(", ".join(run_tags(run))))
    if run.parent_run_id is not None:
        lines.append(f"forked from {run.parent_run_id} at step {run.fork_step}")
    console.print(head)
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)
    columns = [Column("step", justify="right"), Column("kind", 10),
               Column("name", 20, floor=10), Column("path", 24, floor=10),
               Column("ms", justify="right"), Column("input", None), Column("output", None)]
    width = max(20, console.width)  # summarize as far as the widest cell could show
    rows: list[list[str | Text]] = [[str(s.step), s.kind, s.name, s.path, f"{s.duration_ms:.1f}",
             _one_line(s.input, width),
             _error_line(s.output, width) if s.is_error else _one_line(s.output, width)]
            for s in steps]
    console.print(fitted_table(columns, rows, console.width), crop=False)


@app.command("show", help=(
    "Show a run: its steps as a table, or one step in full.\n\n"
    "RUN is a run id or a unique prefix of one. --step N prints that step with its input "
    "and output decoded, as JSON; --json prints the run and its steps with input and "
    "output in the stored encoded form (agentreplay_core.decode restores the values).\n\n"
    "Exit codes: 0 ok, 2 unknown run or step, usage or store error."))
def show_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="A run id, or a unique prefix.")],
    step: Annotated[int | None, typer.Option(
        "--step", min=1, help="Print this step in full (input and output as JSON).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help=(
        "Print the run and its steps as JSON; input and output in the stored encoded form "
        "(agentreplay_core.decode restores the values)."))] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = "agentreplay",
) -> None:
    """Show a run's steps (a table, one step in full, or JSON)."""
    with cli_errors(), open_cli_store(dsn, schema) as store:
        run = store.get_run(run_id)
        steps = store.backend.load_steps(run.run_id)
    if step is not None:
        chosen = next((s for s in steps if s.step == step), None)
        if chosen is None:
            raise fail(f"run {run.run_id} has no step {step}",
                       f"its steps are 1 to {len(steps)}" if steps else "it has no steps")
        if as_json:
            print_json(chosen.model_dump(mode="json"))
        else:
            _print_step(chosen)
        return
    if as_json:
        print_json({"run": _run_json(run, len(steps)),
                    "steps": [s.model_dump(mode="json") for s in steps]})
        return
    _print_run(run, steps)

