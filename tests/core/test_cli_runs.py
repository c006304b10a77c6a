"""`agentreplay runs` and `agentreplay show` as a user runs them, and run id prefixes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import RunNotFound, Store, decode, open_store

AGENTREPLAY = Path(sys.executable).parent / "agentreplay"

# Records three steps, prints the run id, then dies without sealing (as a killed process).
DYING_CHILD = """
import os, sys
from agentreplay_core import open_store
url, schema = sys.argv[1], sys.argv[2]
store = open_store(url, schema=schema) if url.startswith("postgresql") else open_store(url)
with store.record(name="crashed", durability="sync", tags=["nightly"]) as rec:
    for i in range(3):
        rec.record("tool", "step", {"i": i}, i)
    print(rec.run_id, flush=True)
    os._exit(0)
"""


def agentreplay(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script; wide columns so tables are not cut."""
    return subprocess.run([str(AGENTREPLAY), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


def json_of(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def record_then_die(url: str, schema: str = "") -> str:
    """The id of a run whose recording process died mid-run."""
    child = subprocess.run([sys.executable, "-c", DYING_CHILD, url, schema],
                           capture_output=True, text=True, timeout=120, check=True)
    return child.stdout.strip()


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The `error:` line of a failed command, checking there is one and no traceback."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


@pytest.fixture(autouse=True)
def _own_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # every command closes its store, which loads the spool: never the user's own
    monkeypatch.setenv("AGENTREPLAY_SPOOL_DIR", str(tmp_path / "spool"))


def record_sample(store: Store) -> dict[str, uuid.UUID]:
    """alpha (complete, tagged, with a recorded error), beta (failed), a fork of alpha."""
    with store.record(name="alpha", tags=["nightly", "smoke"], durability="sync") as alpha:
        alpha.call("llm", "gpt-4o", {"messages": [{"role": "user", "content": "Hi"}]},
                   lambda: {"content": "Hello!", "price": Decimal("1.10")})
        with pytest.raises(ValueError):
            alpha.call("tool", "lookup", {"city": "Lyon"}, _fail)
    with pytest.raises(RuntimeError), store.record(name="beta", durability="sync") as beta:
        beta.record("tool", "lookup", {"city": "Paris"}, ["09:40"])
        raise RuntimeError("agent crashed")
    with store.record(name="alpha", parent_run_id=alpha.run_id, fork_step=2,
                      durability="sync") as fork:
        fork.record("llm", "gpt-4o", {"messages": []}, {"content": "again"})
    return {"alpha": alpha.run_id, "beta": beta.run_id, "fork": fork.run_id}


def _fail() -> None:
    raise ValueError("no such city")


def test_runs_lists_filters_and_shows_dead_runs_incomplete(pg_dsn: str, pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema) as store:
        ids = record_sample(store)
    dead = record_then_die(pg_dsn, pg_schema)
    where = ("--dsn", pg_dsn, "--schema", pg_schema)

    listed = json_of(agentreplay("runs", "--json", *where))
    assert [r["run_id"] for r in listed] == [
        dead, str(ids["fork"]), str(ids["beta"]), str(ids["alpha"])]  # newest first
    by_id = {r["run_id"]: r for r in listed}
    assert by_id[dead]["status"] == "incomplete" and by_id[dead]["steps"] == 3
    alpha, beta, fork = (by_id[str(ids[k])] for k in ("alpha", "beta", "fork"))
    assert (alpha["status"], alpha["steps"], alpha["tags"]) == ("complete", 2,
                                                                ["nightly", "smoke"])
    assert (beta["status"], beta["steps"]) == ("failed", 1)
    assert (fork["parent_run_id"], fork["fork_step"]) == (str(ids["alpha"]), 2)

    tagged = json_of(agentreplay("runs", "--tag", "nightly", "--json", *where))
    assert {r["run_id"] for r in tagged} == {str(ids["alpha"]), dead}
    incomplete = json_of(agentreplay("runs", "--status", "incomplete", "--json", *where))
    assert [r["run_id"] for r in incomplete] == [dead]
    recent = json_of(agentreplay("runs", "--name", "alpha", "--since", "1h", "--limit", "1",
                                 "--json", *where))
    assert [r["run_id"] for r in recent] == [str(ids["fork"])]
    future = (datetime.now(timezone.utc) + timedelta(days=1)).date().isoformat()
    assert json_of(agentreplay("runs", "--since", future, "--json", *where)) == []

    table = agentreplay("runs", *where)
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line for line in table.stdout.splitlines()[1:]}
    assert set(rows) == {dead[:8], *(str(i)[:8] for i in ids.values())}
    assert "incomplete" in rows[dead[:8]] and "failed" in rows[str(ids["beta"])[:8]]
    assert "nightly, smoke" in rows[str(ids["alpha"])[:8]]
    assert f"{str(ids['alpha'])[:8]}@2" in rows[str(ids["fork"])[:8]]

    bad = agentreplay("runs", "--since", "last tuesday", *where)
    assert "last tuesday" in one_line_error(bad) and "30d" in bad.stderr
    # further back than a date can be, or longer than a duration can be: no traceback
    assert "before the year 1" in one_line_error(agentreplay("runs", "--since", "3000000d",
                                                             *where))
    assert "longer than any duration" in one_line_error(agentreplay(
        "runs", "--since", "99999999999d", *where))


def test_show_prints_steps_one_step_and_json(pg_dsn: str, pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema) as store:
        ids = record_sample(store)
    alpha = str(ids["alpha"])
    where = ("--dsn", pg_dsn, "--schema", pg_schema)

    shown = json_of(agentreplay("show", alpha[:8], "--json", *where))  # a unique prefix
    assert shown["run"]["run_id"] == alpha and shown["run"]["name"] == "alpha"
    steps = shown["steps"]
    assert [(s["step"], s["kind"], s["name"], s["is_error"]) for s in steps] == [
        (1, "llm", "gpt-4o", False), (2, "tool", "lookup", True)]
    assert decode(steps[0]["output"]) == {"content": "Hello!", "price": Decimal("1.10")}
    assert decode(steps[1]["input"]) == {"city": "Lyon"}
    assert steps[1]["output"]["message"] == "no such city"

    table = agentreplay("show", alpha, *where)
    assert table.returncode == 0, table.stderr
    assert f"run {alpha}" in table.stdout and "complete" in table.stdout
    assert "'Hello!'" in table.stdout and "'no such city'" in table.stdout

    one = agentreplay("show", alpha.replace("-", "")[:12].upper(), "--step", "1", *where)
    assert one.returncode == 0, one.stderr
    printed = json.loads(one.stdout)
    assert printed["input"] == {"messages": [{"role": "user", "content": "Hi"}]}
    assert printed["output"] == {"content": "Hello!", "price": "1.10"}  # decoded, then shown

    missing_step = agentreplay("show", alpha, "--step", "9", *where)
    assert "has no step 9" in one_line_error(missing_step)
    assert "1 to 2" in missing_step.stderr

    typo = alpha[:-4] + ("0000" if alpha[-4:] != "0000" else "1111")
    unknown = agentreplay("show", typo, *where)
    assert f"did you mean {alpha}?" in one_line_error(unknown)


def test_runs_and_show_on_a_file_store(tmp_path: Path) -> None:
    url = f"file:{tmp_path / 'runs'}"
    with open_store(url) as store:
        ids = record_sample(store)
    dead = record_then_die(url)
    listed = json_of(agentreplay("runs", "--json", "--dsn", url))
    assert {r["run_id"]: r["status"] for r in listed} == {
        dead: "incomplete", str(ids["alpha"]): "complete", str(ids["beta"]): "failed",
        str(ids["fork"]): "complete"}
    shown = json_of(agentreplay("show", dead[:10], "--json", "--dsn", url))
    assert [decode(s["input"]) for s in shown["steps"]] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert shown["run"]["status"] == "incomplete"
    unknown = agentreplay("show", "not-a-run", "--dsn", url)
    assert "no run with id not-a-run" in one_line_error(unknown)


def test_run_id_prefixes_resolve_on_every_store(any_store: Store) -> None:
    first = uuid.UUID("0a1b2c3d-1111-4000-8000-000000000001")
    second = uuid.UUID("0a1b2c3d-2222-4000-8000-000000000002")
    for run_id in (first, second):
        with any_store.record(run_id=run_id, durability="sync") as rec:
            rec.record("tool", "t", {}, 1)
    assert any_store.get_run(str(first)).run_id == first
    assert any_store.get_run("0a1b2c3d-1").run_id == first
    assert any_store.get_run("0A1B2C3D2").run_id == second  # case and dashes do not matter
    assert [s.output for s in any_store.load_steps("0a1b2c3d-22")] == [1]
    assert any_store.verify("0a1b2c3d1").ok
    with pytest.raises(RunNotFound, match=f"starts 2 run ids \\({first}, {second}\\)"):
        any_store.get_run("0a1b2c3d")
    with pytest.raises(RunNotFound, match=f"did you mean {first}, {second}\\?"):
        any_store.get_run("0a1b2c3d-3")
    with pytest.raises(RunNotFound, match=f"did you mean {first}\\?"):
        any_store.get_run("0a1b2c3d-1111-4000-8000-000000000009")
    with pytest.raises(RunNotFound, match="no run id starts with it"):
        any_store.get_run("ffff")
    with pytest.raises(RunNotFound, match="run ids are UUIDs"):
        any_store.get_run("not-a-run")


def test_list_runs_filters_by_tag_and_start(any_store: Store) -> None:
    with any_store.record(name="a", tags=["keep", "x"], durability="sync"):
        pass
    middle = datetime.now(timezone.utc)
    with any_store.record(name="b", tags=["x"], durability="sync"):
        pass
    assert [r.name for r in any_store.list_runs(tag="x")] == ["b", "a"]
    assert [r.name for r in any_store.list_runs(tag="keep")] == ["a"]
    assert any_store.list_runs(tag="kee") == []
    assert [r.name for r in any_store.list_runs(before=middle)] == ["a"]
    assert [r.name for r in any_store.list_runs(since=middle, tag="x")] == ["b"]


@pytest.mark.parametrize("columns", [80, 100])
def test_show_keeps_step_numbers_and_kinds_whole_in_a_narrow_terminal(
        tmp_path: Path, columns: int) -> None:
    url = f"file:{tmp_path / 'runs'}"
    with open_store(url) as store, store.record(name="narrow") as rec:
        rec.record("embedding", "text-embedding-3-small", {"text": "a long text " * 5}, [0.5])
        rec.record("retriever", "VectorIndexRetriever", {"query": "q " * 30}, ["doc"] * 9)
    shown = subprocess.run([str(AGENTREPLAY), "show", str(rec.run_id), "--dsn", url],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": str(columns)})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    table = lines[lines.index(next(line for line in lines if "kind" in line)):]
    assert max(len(line.rstrip()) for line in table) <= columns
    assert table[0].split()[:2] == ["step", "kind"]  # headers whole, not "s…"
    assert [line.split()[:2] for line in table[1:]] == [["1", "embedding"], ["2", "retriever"]]
