"""`agentreplay replay RUN -- CMD`, through the installed console script.

Runs are recorded by real programs (`AGENTREPLAY_MODE=record`) into the test PostgreSQL, then
replayed by the command, which hands the program an exported copy and no network.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

AGENTREPLAY = Path(sys.executable).parent / "agentreplay"

AGENT = """
import json, random, sys
from agentreplay_core import active_session

session = active_session()
calls = [int(i) for i in sys.argv[1].split(",")]
print(json.dumps([session.call("tool", "rand", {"i": i}, random.random) for i in calls]))
"""

# connects to the port in argv[2] before or after its first agentreplay call (argv[1])
NETWORK = """
import socket, sys
from agentreplay_core import active_session


def connect():
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=10).close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__


first = connect() if sys.argv[1] == "before" else None
value = active_session().call("tool", "now", {}, lambda: 42)
print(first or connect(), value)
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTREPLAY_")}
    return {**env, **extra}


def record(script: Path, *args: str, dsn: str, schema: str, **env: str) -> tuple[str, str]:
    """Run `script` recording into the test database: (run id, its stdout)."""
    run_id = str(uuid.uuid4())
    result = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
        env=clean_env(AGENTREPLAY_MODE="record", AGENTREPLAY_DSN=dsn,
                      AGENTREPLAY_SCHEMA=schema, AGENTREPLAY_RUN_ID=run_id, **env))
    assert result.returncode == 0, result.stderr
    assert f"recording run {run_id}" in result.stderr
    return run_id, result.stdout


def replay(run_id: str, *command: str, dsn: str, schema: str,
           options: tuple[str, ...] = (), env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AGENTREPLAY), "replay", run_id, "--dsn", dsn, "--schema", schema, *options, "--",
         *command], capture_output=True, text=True, timeout=120, env=clean_env(**(env or {})))


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    return script


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on this host that accepts connections (outside any replay)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def test_replay_serves_the_recording_to_the_program(agent: Path, pg_dsn: str,
                                                    pg_schema: str) -> None:
    run_id, recorded = record(agent, "1,2", dsn=pg_dsn, schema=pg_schema)
    result = replay(run_id, sys.executable, str(agent), "1,2", dsn=pg_dsn, schema=pg_schema)
    assert result.returncode == 0, result.stderr
    assert result.stdout == recorded  # the recorded random numbers, not new ones
    assert len(json.loads(recorded)) == 2
    assert f"replaying run {run_id} (2 steps)" in result.stderr
    assert ("in a new network namespace" in result.stderr
            or "with the in-process network guard only" in result.stderr)
    assert "file:" in result.stderr  # the program read an exported file, not the database
    assert f"replay of run {run_id} finished cleanly" in result.stderr


def test_a_different_call_fails_with_the_divergence(agent: Path, pg_dsn: str,
                                                   pg_schema: str) -> None:
    run_id, _ = record(agent, "1,2", dsn=pg_dsn, schema=pg_schema)
    result = replay(run_id, sys.executable, str(agent), "1,3", dsn=pg_dsn, schema=pg_schema)
    assert result.returncode == 1
    assert "replay diverged (tool_args_changed)" in result.stderr
    assert f"in run {run_id}, step 2: tool 'rand'" in result.stderr
    assert "~ i: 2 -> 3" in result.stderr
    assert "the program exited with code 1" in result.stderr
    assert result.stdout == ""


LOGIN = """
import os
from agentreplay_core import active_session

print(active_session().call("tool", "login", {"password": os.environ["DB_PASSWORD"]},
                            lambda: "session 42"))
"""


def test_a_machine_without_the_redaction_key_replays_with_no_check_secrets(
        tmp_path: Path, pg_dsn: str, pg_schema: str) -> None:
    script = tmp_path / "login.py"
    script.write_text(LOGIN)
    run_id, recorded = record(script, dsn=pg_dsn, schema=pg_schema,
                              AGENTREPLAY_REDACTION_KEY="production", DB_PASSWORD="prod-pass-1")
    assert recorded == "session 42\n"
    laptop = {"AGENTREPLAY_REDACTION_KEY": "laptop", "DB_PASSWORD": "laptop-pass-2"}
    checked = replay(run_id, sys.executable, str(script), dsn=pg_dsn, schema=pg_schema,
                     env=laptop)
    assert checked.returncode == 1
    assert "but for its secrets" in checked.stderr and "check_secrets=False" in checked.stderr
    unchecked = replay(run_id, sys.executable, str(script), dsn=pg_dsn, schema=pg_schema,
                       options=("--no-check-secrets",), env=laptop)
    assert unchecked.returncode == 0, unchecked.stderr
    assert unchecked.stdout == recorded
    assert "its placeholders match any text" in unchecked.stderr
    assert "its placeholders match any text" not in checked.stderr
    assert f"replay of run {run_id} finished cleanly" in unchecked.stderr


def test_recorded_steps_never_asked_for_fail(agent: Path, pg_dsn: str, pg_schema: str) -> None:
    run_id, recorded = record(agent, "1,2", dsn=pg_dsn, schema=pg_schema)
    result = replay(run_id, sys.executable, str(agent), "1", dsn=pg_dsn, schema=pg_schema)
    assert result.returncode == 1
    assert json.loads(result.stdout) == json.loads(recorded)[:1]
    assert f"replay of run {run_id} did not finish cleanly" in result.stderr
    assert "1 recorded step was never replayed: 2 (tool 'rand')" in result.stderr


def test_a_program_that_never_asks_is_not_a_clean_replay(agent: Path, pg_dsn: str,
                                                         pg_schema: str) -> None:
    run_id, _ = record(agent, "1", dsn=pg_dsn, schema=pg_schema)
    result = replay(run_id, sys.executable, "-c", "print('hello')", dsn=pg_dsn,
                    schema=pg_schema)
    assert result.returncode == 1
    assert "never asked agentreplay for a recorded result" in result.stderr


def test_the_program_gets_no_network(tmp_path: Path, listener: int, pg_dsn: str,
                                     pg_schema: str) -> None:
    script = tmp_path / "net.py"
    script.write_text(NETWORK)
    run_id, recorded = record(script, "after", str(listener), dsn=pg_dsn, schema=pg_schema)
    assert recorded.split() == ["connected", "42"]  # the port is reachable outside a replay
    guarded = replay(run_id, sys.executable, str(script), "after", str(listener), dsn=pg_dsn,
                     schema=pg_schema, options=("--isolation", "guard"))
    assert guarded.returncode == 0, guarded.stderr
    assert guarded.stdout.split() == ["NetworkAccessDuringReplay", "42"]
    assert "with the in-process network guard only (--isolation guard)" in guarded.stderr
    # before its first agentreplay call only a network namespace keeps the program in
    auto = replay(run_id, sys.executable, str(script), "before", str(listener), dsn=pg_dsn,
                  schema=pg_schema)
    assert auto.returncode == 0, auto.stderr
    if "in a new network namespace" in auto.stderr:
        assert auto.stdout.split()[0] in ("ConnectionRefusedError", "OSError")
    else:  # no namespace on this machine: the command says why
        assert "in-process network guard only" in auto.stderr
        assert "no network namespace: " in auto.stderr


def test_unknown_run_names_the_closest_ids(agent: Path, pg_dsn: str, pg_schema: str) -> None:
    run_id, _ = record(agent, "1", dsn=pg_dsn, schema=pg_schema)
    typo = run_id[:-1] + ("0" if run_id[-1] != "0" else "1")
    result = replay(typo, sys.executable, str(agent), "1", dsn=pg_dsn, schema=pg_schema)
    assert result.returncode == 2
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and typo in error_lines[0]
    assert run_id in result.stderr  # offered as the closest id
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_command_is_required(pg_dsn: str, pg_schema: str) -> None:
    result = subprocess.run([str(AGENTREPLAY), "replay", str(uuid.uuid4()), "--dsn", pg_dsn,
                             "--schema", pg_schema], capture_output=True, text=True,
                            timeout=120, env=clean_env())
    assert result.returncode == 2
    assert "name the program to run after `--`" in result.stderr
