"""`agentreplay demo`, run as a user runs it: the console script, in a process of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentreplay_core import decode, open_store
from agentreplay_langchain._convert import revive

SCRIPT = Path(sys.executable).with_name("agentreplay")


def run_cli(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("AGENTREPLAY_DSN", "AGENTREPLAY_SCHEMA", "FORCE_COLOR")}
    # wide enough that every table row is one line, as on a wide terminal
    env.update(COLUMNS="1000", TERM="dumb")
    return subprocess.run([*prefix, *args], capture_output=True, text=True, env=env,
                          timeout=240)


def cells(output: str, label: str) -> list[str]:
    """The cells of the side-by-side table's row `label`: live, replay 1, replay 2, other."""
    row = next(line for line in output.splitlines() if line.startswith(f"│ {label} "))
    return [cell.strip() for cell in row.split("│")[2:-1]]


def test_demo_records_replays_verifies_and_catches_a_changed_prompt(
        pg_dsn: str, pg_schema: str) -> None:
    assert SCRIPT.exists(), f"the console script is not installed next to {sys.executable}"
    result = run_cli(str(SCRIPT), "demo", "--dsn", pg_dsn, "--schema", pg_schema)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr

    # the printed run is a real, sealed run of the store that verifies
    found = re.search(r"recorded run ([0-9a-f-]{36}) \((\d+) steps\)", out)
    assert found is not None, out
    with open_store(pg_dsn, schema=pg_schema) as store:
        run = store.get_run(found.group(1))
        steps = store.load_steps(run.run_id)
        report = store.verify(run.run_id)
    assert run.status == "complete" and report.ok
    assert len(steps) == int(found.group(2)) == run.step_count
    kinds = {s.kind for s in steps}
    assert {"llm", "tool", "retriever", "embedding", "time", "uuid"} <= kinds
    assert f"verify: run {run.run_id}" in out and "chain intact" in out

    # live and replayed answers side by side: the replays show what the store holds
    last_llm = [s for s in steps if s.kind == "llm"][-1]
    recorded_answer = revive(decode(last_llm.output)["generations"])[0].message.content
    live, replay1, replay2, other = cells(out, "answer")
    assert live == replay1 == replay2 == recorded_answer
    assert other != live  # the other live run drew other forecasts (and report ids)
    # the conversation id is the first uuid4 the agent drew, served again by the replays
    first_uuid: Any = decode(next(s for s in steps if s.kind == "uuid").output)
    conversations = cells(out, "conversation")
    assert conversations[0] == conversations[1] == conversations[2]
    assert conversations[0].startswith(first_uuid.hex[:8])
    assert cells(out, "same as live") == ["yes", "yes", "yes", "no"]

    # the changed prompt diverged, and the user is told how
    assert "ReplayDivergence, classification: prompt_changed" in out
    assert "[-two sentences-]{+one sentence+}" in out
    assert "demo ok" in out
    assert "timings" in out and "replay 1" in out


def test_demo_without_langchain_core_says_what_to_install() -> None:
    # a None entry in sys.modules makes the import fail as if the package were missing
    code = ("import sys; sys.modules['langchain_core'] = None; "
            "sys.argv = ['agentreplay', 'demo', '--dsn', 'memory:']; "
            "from agentreplay_core._cli import main; main()")
    result = run_cli(sys.executable, "-c", code)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and "langchain-core" in lines[0]
    assert lines[1] == 'hint: pip install "agentreplay[demo]"'
    assert result.stdout == ""


def test_the_readme_demo_command_runs(pg_dsn: str, pg_schema: str) -> None:
    # The quick start's first command, as written: its install part is checked for shape (the
    # `demo` nox session runs it for real in a fresh environment), its run part is run here.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"<!-- demo-command -->\n```bash\n(.*?)\n```", readme)
    assert block is not None
    install, run = (part.strip() for part in block.group(1).split("&&"))
    assert re.fullmatch(r'python3 -m pip install -q -e "\.\[demo\]"', install)
    argv = run.split()
    assert argv[:2] == ["python3", "-m"]
    result = run_cli(sys.executable, *argv[1:], "--dsn", pg_dsn, "--schema", pg_schema)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo ok" in result.stdout
