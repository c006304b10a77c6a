"""The environment-driven session (`AGENTREPLAY_MODE`), in real programs run as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import RunStatus, Store, open_store, session_from_env

# calls `tool rand` once per number in argv[1]; "crash" in argv[2] dies after the calls
AGENT = """
import json, random, sys
from agentreplay_core import active_session

session = active_session()
call = session.call if session is not None else (lambda kind, name, request, fn: fn())
calls = [int(i) for i in sys.argv[1].split(",")]
print(json.dumps([call("tool", "rand", {"i": i}, random.random) for i in calls]), flush=True)
if sys.argv[2:] == ["crash"]:
    raise RuntimeError("the agent fell over")
"""


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    return script


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[Store]:
    with open_store(pg_dsn, schema=pg_schema) as opened:
        yield opened


def run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTREPLAY_")}
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=120, env={**clean, **env})


def pg(pg_dsn: str, pg_schema: str, **extra: str) -> dict[str, str]:
    return {"AGENTREPLAY_DSN": pg_dsn, "AGENTREPLAY_SCHEMA": pg_schema, **extra}


def report(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def test_record_then_replay_in_real_processes(agent: Path, store: Store, pg_dsn: str,
                                              pg_schema: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    recorded = run(agent, "1,2", **pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="record",
                                      AGENTREPLAY_RUN_ID=run_id, AGENTREPLAY_TAGS="ci, nightly",
                                      AGENTREPLAY_REPORT_FILE=str(tmp_path / "rec.json")))
    assert recorded.returncode == 0, recorded.stderr
    assert f"agentreplay: recording run {run_id}" in recorded.stderr
    stored = store.get_run(run_id)  # the id asked for
    assert (stored.status, stored.step_count, stored.name) == (RunStatus.COMPLETE, 2, "agent")
    assert stored.metadata["tags"] == ["ci", "nightly"]
    assert report(tmp_path / "rec.json") == {"mode": "record", "run_id": run_id, "ok": True,
                                             "steps": 2}

    replayed = run(agent, "1,2", **pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="replay",
                                      AGENTREPLAY_RUN_ID=run_id,
                                      AGENTREPLAY_REPORT_FILE=str(tmp_path / "rep.json")))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == recorded.stdout
    assert f"agentreplay: replaying run {run_id}" in replayed.stderr
    assert report(tmp_path / "rep.json") == {"mode": "replay", "run_id": run_id, "ok": True,
                                             "steps": 2}

    # a unique prefix names the run, as on the command line
    by_prefix = run(agent, "1,2", **pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="replay",
                                       AGENTREPLAY_RUN_ID=run_id[:8]))
    assert by_prefix.returncode == 0, by_prefix.stderr
    assert by_prefix.stdout == recorded.stdout
    assert f"agentreplay: replaying run {run_id}" in by_prefix.stderr


def test_a_program_that_dies_leaves_a_failed_run(agent: Path, store: Store, pg_dsn: str,
                                                 pg_schema: str) -> None:
    run_id = str(uuid.uuid4())
    result = run(agent, "1", "crash", **pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="record",
                                           AGENTREPLAY_RUN_ID=run_id))
    assert result.returncode == 1
    assert "RuntimeError: the agent fell over" in result.stderr  # the program's own traceback
    stored = store.get_run(run_id)
    assert (stored.status, stored.step_count) == (RunStatus.FAILED, 1)
    assert store.verify(run_id).ok


def test_an_unreachable_store_runs_the_program_unrecorded(agent: Path) -> None:
    result = run(agent, "1,2", AGENTREPLAY_MODE="record",
                 AGENTREPLAY_DSN="postgresql://agentreplay@127.0.0.1:1/none")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 2
    assert result.stderr.startswith("agentreplay: not recording (cannot connect")
    assert result.stderr.count("not recording") == 1  # said once


def test_recording_under_an_existing_id_runs_unrecorded(agent: Path, store: Store,
                                                        pg_dsn: str, pg_schema: str) -> None:
    run_id = str(uuid.uuid4())
    env = pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="record", AGENTREPLAY_RUN_ID=run_id)
    assert run(agent, "1", **env).returncode == 0
    again = run(agent, "1,2", **env)
    assert again.returncode == 0
    assert f"not recording (run {run_id} already exists" in again.stderr
    assert store.get_run(run_id).step_count == 1
    assert store.verify(run_id).ok


def test_replay_of_a_missing_run_fails_loudly(agent: Path, pg_dsn: str, pg_schema: str,
                                              tmp_path: Path) -> None:
    missing = str(uuid.uuid4())
    result = run(agent, "1", **pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="replay",
                                  AGENTREPLAY_RUN_ID=missing,
                                  AGENTREPLAY_REPORT_FILE=str(tmp_path / "r.json")))
    assert result.returncode == 1
    assert f"RunNotFound: no run with id {missing}" in result.stderr
    assert result.stdout == ""  # nothing ran live
    written = report(tmp_path / "r.json")
    assert written["ok"] is False and missing in written["error"]
    no_id = run(agent, "1", **pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="replay"))
    assert no_id.returncode == 1
    assert "AGENTREPLAY_MODE=replay needs AGENTREPLAY_RUN_ID" in no_id.stderr


def test_unused_steps_and_divergences_are_reported(agent: Path, pg_dsn: str, pg_schema: str,
                                                   tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    assert run(agent, "1,2", **pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="record",
                                  AGENTREPLAY_RUN_ID=run_id)).returncode == 0
    replay = pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="replay", AGENTREPLAY_RUN_ID=run_id)
    short = run(agent, "1", **replay)
    assert short.returncode == 0  # the program itself succeeded ...
    assert "did not finish cleanly" in short.stderr  # ... but the replay says what is wrong
    assert "1 recorded step was never replayed" in short.stderr
    reported = run(agent, "1", **replay, AGENTREPLAY_REPORT_FILE=str(tmp_path / "r.json"))
    written = report(tmp_path / "r.json")
    assert written["ok"] is False and "missing_call" in written["error"]
    assert "did not finish cleanly" not in reported.stderr  # the report's reader says it
    changed = run(agent, "1,3", **replay, AGENTREPLAY_REPORT_FILE=str(tmp_path / "d.json"))
    assert changed.returncode == 1
    assert "replay diverged (tool_args_changed)" in changed.stderr
    assert report(tmp_path / "d.json")["error"].startswith("ReplayDivergence: replay diverged")


def test_on_divergence_live_forks_into_a_new_run(agent: Path, store: Store, pg_dsn: str,
                                                 pg_schema: str, tmp_path: Path) -> None:
    run_id = str(uuid.uuid4())
    recorded = run(agent, "1,2", **pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="record",
                                      AGENTREPLAY_RUN_ID=run_id))
    result = run(agent, "1,3", **pg(pg_dsn, pg_schema, AGENTREPLAY_MODE="replay",
                                    AGENTREPLAY_RUN_ID=run_id, AGENTREPLAY_ON_DIVERGENCE="live",
                                    AGENTREPLAY_REPORT_FILE=str(tmp_path / "r.json")))
    assert result.returncode == 0, result.stderr
    first, second = json.loads(result.stdout)
    assert first == json.loads(recorded.stdout)[0]  # replayed
    written = report(tmp_path / "r.json")
    assert written["ok"] is True
    fork = store.get_run(written["fork_run_id"])
    assert (str(fork.parent_run_id), fork.fork_step, fork.status) == (
        run_id, 2, RunStatus.COMPLETE)
    steps = store.load_steps(fork.run_id)
    assert [s.input for s in steps] == [{"i": 1}, {"i": 3}]
    assert steps[1].output == second  # the live call went into the fork


def test_bad_settings_are_explained(agent: Path) -> None:
    result = run(agent, "1", AGENTREPLAY_MODE="recrod", AGENTREPLAY_DSN="memory:")
    assert result.returncode == 1
    assert "unknown agentreplay mode 'recrod'; valid modes: record, replay, off" in result.stderr
    with pytest.raises(Exception, match="use raise or live"):
        session_from_env({"AGENTREPLAY_MODE": "replay", "AGENTREPLAY_RUN_ID": str(uuid.uuid4()),
                          "AGENTREPLAY_ON_DIVERGENCE": "fork", "AGENTREPLAY_DSN": "memory:"})
    assert session_from_env({"AGENTREPLAY_MODE": "off"}) is None
    assert session_from_env({}) is None


def test_session_from_env_reads_the_mapping_it_is_given(pg_dsn: str, pg_schema: str,
                                                        store: Store) -> None:
    session = session_from_env({"AGENTREPLAY_MODE": "record", "AGENTREPLAY_DSN": pg_dsn,
                                "AGENTREPLAY_SCHEMA": pg_schema,
                                "AGENTREPLAY_RUN_NAME": "from-mapping"})
    assert session is not None
    with session:
        session.call("tool", "t", {}, lambda: 1)
    assert session.run_id is not None
    assert store.get_run(session.run_id).name == "from-mapping"  # in the schema named
