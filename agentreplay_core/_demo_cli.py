"""Presentation of `agentreplay demo` (the agent itself lives in `_demo`)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from agentreplay_core._demo import (
    forecast,
    recording_backends,
    replay_backends,
    run_agent,
    scripted_model,
)
from agentreplay_core._errors import ReplayDivergence
from agentreplay_core._store import Store

QUESTION = "What should I wear in Paris"


def run_demo(store: Store, console: Console) -> bool:
    """Returns True when the replay matched the recording and the chain verified."""
    console.rule("[bold]agentreplay demo")
    console.print(f"run store: {store.backend.description}")
    with store.record(name="demo-agent", entropy=True, tags=["demo"]) as rec:
        live = run_agent(QUESTION, *recording_backends(rec))
    other = run_agent(QUESTION, scripted_model, forecast)
    console.print(f"recorded run [bold]{rec.run_id}[/bold] ({rec.step_count} steps)")

    steps = Table(title="recorded steps")
    for column in ("step", "kind", "name", "path", "ms"):
        steps.add_column(column)
    for step in store.load_steps(rec.run_id):
        steps.add_row(str(step.step), step.kind, step.name, step.path,
                      f"{step.duration_ms:.1f}")
    console.print(steps)

    replays = []
    for _ in range(2):
        with store.replay(rec.run_id) as player:
            replays.append(run_agent(QUESTION, *replay_backends(player)))
    side = Table(title="live (recorded) vs replayed", show_lines=True)
    side.add_column("live run")
    side.add_column("replay 1")
    side.add_column("same", justify="center")
    for index, line in enumerate(live):
        replayed = replays[0][index] if index < len(replays[0]) else ""
        side.add_row(line, replayed, "[green]yes" if line == replayed else "[red]NO")
    console.print(side)
    identical = replays[0] == live and replays[1] == live
    console.print(f"both replays identical to the recording: "
                  f"{'[green]yes' if identical else '[red]no'}")
    console.print(f"a second live run differs from the first: "
                  f"{'yes' if other != live else 'no (rare coincidence)'}")

    report = store.verify(rec.run_id)
    console.print(f"verify: {report}", style="green" if report.ok else "red", markup=False)

    console.rule("a changed prompt during replay")
    diverged = False
    try:
        with store.replay(rec.run_id, allow_unused=True) as player:
            run_agent(QUESTION.replace("Paris", "Lyon"), *replay_backends(player))
    except ReplayDivergence as exc:
        diverged = True
        console.print(f"[yellow]ReplayDivergence[/yellow] ({exc.classification}):")
        console.print(str(exc), markup=False, highlight=False)
    return identical and report.ok and diverged
