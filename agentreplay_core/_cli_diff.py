"""`agentreplay diff RUN_A RUN_B`: the first divergence and a step-by-step comparison."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.text import Text

from agentreplay_core._cli_app import DsnOption, SchemaOption, app, console, fail, open_cli_store
from agentreplay_core._cli_common import cli_errors, print_json
from agentreplay_core._cli_table import Column, fitted_table, visible
from agentreplay_core._diff import summarize
from agentreplay_core._model import Run, Step, StepKind
from agentreplay_core._plural import counted
from agentreplay_core._run_compare import RunComparison, StepPair, changes, compare_steps, describe

_STATUS_TEXT = {"same": "same", "differs": "differs", "only_a": "only in A",
                "only_b": "only in B"}
_STATUS_STYLE = {"same": "green", "differs": "yellow", "only_a": "red", "only_b": "red"}


def _number(pair: StepPair, side: str) -> int | None:
    step = pair.a if side == "a" else pair.b
    return step.step if step is not None else None


def _pair_json(pair: StepPair) -> dict[str, Any]:
    step = pair.step
    return {"status": pair.status, "step_a": _number(pair, "a"), "step_b": _number(pair, "b"),
            "kind": step.kind, "name": step.name, "classification": pair.classification,
            "moved_to": pair.moved_to}


def _divergence_json(pair: StepPair) -> dict[str, Any]:
    part, entries = changes(pair)
    return {**_pair_json(pair), "part": part, "diff": describe(pair),
            "changes": [{"path": e.path, "op": e.op, "a": summarize(e.expected, 200),
                         "b": summarize(e.actual, 200)} for e in entries]}


def _check_kinds(kinds: list[str], steps: list[Step]) -> None:
    """Refuse an --ignore-kind no step could have: a typo would leave the steps it meant in
    the comparison without a word. Kinds may be extended, so those of the runs count too."""
    known = [k.value for k in StepKind]
    extra = sorted({s.kind for s in steps} - set(known))
    unknown = [k for k in kinds if k not in known and k not in extra]
    if unknown:
        listed = ", ".join(known) + (f" (and in these runs: {', '.join(extra)})" if extra else "")
        raise fail(f"--ignore-kind {unknown[0]!r} is no step kind; the kinds are {listed}")


def _print_first(result: RunComparison, run_a: Run, run_b: Run) -> None:
    for side, run in (("A", run_a), ("B", run_b)):
        console.print(visible(f"{side}: run {run.run_id} ({run.name or 'unnamed'})"),
                      markup=False,
                      highlight=False, soft_wrap=True)
    first = result.first_divergence
    if first is None:
        console.print(f"[green]identical[/green] in what was asked and answered "
                      f"({counted(len(result.pairs), 'step')})", soft_wrap=True)
        return
    a, b = _number(first, "a"), _number(first, "b")
    where = " / ".join(f"{side} step {n}" for side, n in (("A", a), ("B", b)) if n is not None)
    console.print(f"[bold red]first divergence[/bold red] at {where}: "
                  f"[bold]{first.classification}[/bold], {escape(visible(first.step.kind))} "
                  f"{escape(visible(repr(first.step.name)))}", soft_wrap=True)
    described = describe(first, width=max(60, console.width - 2))
    console.print("\n".join(visible(line) for line in described.splitlines()), markup=False,
                  highlight=False, soft_wrap=True)


def _print_table(result: RunComparison) -> None:
    columns = [Column("A", justify="right"), Column("B", justify="right"), Column("status"),
               Column("kind", 12), Column("name", None), Column("what", None)]
    rows: list[list[str | Text]] = []
    for pair in result.pairs:
        what = pair.classification or ""
        if pair.moved_to is not None:
            what += f" ({'B' if pair.status == 'only_a' else 'A'} step {pair.moved_to})"
        name = pair.step.name
        if pair.a is not None and pair.b is not None and pair.a.name != pair.b.name:
            name = f"{pair.a.name} -> {pair.b.name}"
        rows.append([str(_number(pair, "a") or "-"), str(_number(pair, "b") or "-"),
                     Text(_STATUS_TEXT[pair.status], style=_STATUS_STYLE[pair.status]),
                     pair.step.kind, name, what])
    console.print(fitted_table(columns, rows, console.width), crop=False)
    counts = result.counts()
    console.print(", ".join(f"{n} {_STATUS_TEXT[s]}" for s, n in counts.items() if n),
                  highlight=False, soft_wrap=True)


@app.command("diff", help=(
    "Compare two runs step by step.\n\n"
    "Prints the first divergence with a structural diff and its classification, as replay "
    "would name it (prompt_changed, params_changed, tool_args_changed, unexpected_call, "
    "missing_call, order_changed; output_changed for the same request answered "
    "differently), then every step: same, differs, only in A, only in B. Steps compare by "
    "kind, name, input, output and error, not by timing.\n\n"
    "Exit codes: 0 the runs asked and answered the same, 1 they differ, 2 unknown run, "
    "usage or store error."))
def diff_command(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="The reference run (A).")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="The run to compare (B).")],
    ignore_kind: Annotated[list[str] | None, typer.Option(
        "--ignore-kind", metavar="KIND",
        help="Leave steps of this kind out (repeatable), e.g. time and uuid, which differ "
             "between any two live runs.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    dsn: DsnOption = None,
    schema: SchemaOption = "agentreplay",
) -> None:
    """Compare two runs: first divergence, then a step-by-step table; exit 1 if they differ."""
    with cli_errors(), open_cli_store(dsn, schema) as store:
        first, second = store.get_run(run_a), store.get_run(run_b)
        steps_a = store.backend.load_steps(first.run_id)
        steps_b = store.backend.load_steps(second.run_id)
    _check_kinds(ignore_kind or [], steps_a + steps_b)
    result = compare_steps(steps_a, steps_b, ignore_kinds=ignore_kind or ())
    divergence = result.first_divergence
    if as_json:
        print_json({
            "run_a": str(first.run_id), "run_b": str(second.run_id),
            "identical": result.identical, "counts": result.counts(),
            "first_divergence": _divergence_json(divergence) if divergence else None,
            "steps": [_pair_json(p) for p in result.pairs],
        })
    else:
        _print_first(result, first, second)
        if not result.identical:
            _print_table(result)
    raise typer.Exit(0 if result.identical else 1)
