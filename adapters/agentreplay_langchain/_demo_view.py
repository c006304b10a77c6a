"""What `agentreplay demo` shows: a LangChain RAG agent recorded, replayed twice and compared
with its live run, the run verified, and a changed prompt caught by the replay.

The agent and its backends are in `_demo`; this module runs the phases, times them and prints.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agentreplay_core import ReplayDivergence, Store
from agentreplay_core._plural import counted
from agentreplay_langchain._demo import (
    QUESTION,
    SYSTEM_PROMPT,
    AgentResult,
    live_backends,
    replay_backends,
    run_agent,
)
from agentreplay_langchain._instrument import instrument

#: the deliberate change the last replay makes to the agent's prompt
PROMPT_CHANGE = ("two sentences", "one sentence")
_KIND_STYLES = {"llm": "magenta", "tool": "cyan", "retriever": "green", "embedding": "green"}


class Timings:
    """Wall time of each phase of the demo, in the order they ran (measured, not asserted)."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phases.append((phase, time.perf_counter() - started))

    def table(self) -> Table:
        table = Table(title="timings")
        table.add_column("phase")
        table.add_column("seconds", justify="right")
        for phase, seconds in self.phases:
            table.add_row(phase, f"{seconds:.2f}")
        table.add_row("[bold]total", f"[bold]{sum(s for _, s in self.phases):.2f}")
        return table


def run_demo(store: Store, console: Console, timings: Timings) -> bool:
    """Run the demo on `store`. True when both replays equal the live run, the run verifies
    and the changed prompt raised `ReplayDivergence`."""
    console.rule("[bold]agentreplay demo: a LangChain RAG agent, recorded and replayed")
    console.print(f"run store: {store.backend.description}", markup=False)
    console.print(f"question: {QUESTION}", markup=False)

    with timings("record a live run"), \
            store.record(name="demo-rag-agent", entropy=True, tags=["demo"]) as rec, \
            instrument(rec):
        live = run_agent(QUESTION, live_backends(rec))
    console.print(f"recorded run {rec.run_id} ({counted(rec.step_count, 'step')})", highlight=False)
    console.print(_step_table(store, str(rec.run_id)))

    with timings("another live run (not recorded)"):
        other = run_agent(QUESTION, live_backends())
    replays: list[AgentResult | None] = []
    for number in (1, 2):
        with timings(f"replay {number}"):
            replays.append(_replay(store, str(rec.run_id), console))
    console.print(_side_by_side(live, replays, other))
    identical = all(replay == live for replay in replays)
    console.print("both replays identical to the live run: "
                  + ("[green]yes" if identical else "[red]NO"))
    console.print("the other live run differs from the recorded one: "
                  + ("yes" if other != live else "no (a rare coincidence)"))

    with timings("verify the hash chain"):
        report = store.verify(rec.run_id)
    console.print(f"verify: {report}", style="green" if report.ok else "red", markup=False,
                  highlight=False)

    with timings("replay with a changed prompt"):
        diverged = _changed_prompt(store, str(rec.run_id), console)
    console.print(timings.table())
    ok = identical and report.ok and diverged
    console.print("[bold green]demo ok" if ok else "[bold red]demo FAILED")
    return ok


def _replay(store: Store, run_id: str, console: Console) -> AgentResult | None:
    """The agent again, on replay backends; None (and the error shown) if it diverged."""
    try:
        with store.replay(run_id) as player:
            return run_agent(QUESTION, replay_backends(player))
    except ReplayDivergence as exc:
        console.print(Panel(Text(str(exc)), title="unexpected ReplayDivergence",
                            border_style="red"))
        return None


def _changed_prompt(store: Store, run_id: str, console: Console) -> bool:
    old, new = PROMPT_CHANGE
    console.rule(f"replay with a changed prompt: {old!r} -> {new!r}")
    try:
        with store.replay(run_id) as player:
            run_agent(QUESTION, replay_backends(player), SYSTEM_PROMPT.replace(old, new))
    except ReplayDivergence as exc:
        console.print(f"ReplayDivergence, classification: [bold yellow]{exc.classification}")
        console.print(Panel(Text(str(exc)), title="what the replay reports",
                            border_style="yellow"))
        return True
    console.print("[red]the changed prompt replayed without a divergence")
    return False


def _step_table(store: Store, run_id: str) -> Table:
    table = Table(title="the recorded run, one row per step (a step inside another one is "
                        "replayed with it)")
    for column in ("step", "kind", "name", "inside step"):
        table.add_column(column)
    table.add_column("ms", justify="right")
    steps = store.load_steps(run_id)
    by_path = {step.path: step for step in steps}
    for step in steps:
        parent = by_path.get(step.path.rpartition("/")[0])
        table.add_row(str(step.step), Text(step.kind, style=_KIND_STYLES.get(step.kind, "dim")),
                      step.name, f"{parent.step} ({parent.kind})" if parent else "",
                      f"{step.duration_ms:.1f}")
    return table


def _side_by_side(live: AgentResult, replays: list[AgentResult | None],
                  other: AgentResult) -> Table:
    runs = [live, *replays, other]
    table = Table(title="live run vs its replays (and another live run)", show_lines=True)
    table.add_column("")
    for header in ("live run (recorded)", "replay 1", "replay 2", "another live run"):
        table.add_column(header, overflow="fold")
    rows: dict[str, Callable[[AgentResult], str]] = {
        "conversation": lambda r: r.conversation,
        "retrieved": lambda r: ", ".join(r.retrieved),
        "forecasts": lambda r: "\n".join(r.tool_calls),
        "answer": lambda r: r.answer,
    }
    for label, field in rows.items():
        table.add_row(label, *(Text(field(r)) if r else Text("-", style="red") for r in runs))
    table.add_row("same as live", *(Text("yes", style="green") if r == live
                                    else Text("no", style="red" if r is not other else "")
                                    for r in runs))
    return table
