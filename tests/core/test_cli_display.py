"""What `agentreplay` prints for people: recorded text made harmless to a terminal, tables that
keep ids whole, error steps marked in words, strict JSON, broken pipes, keys and replay hints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentreplay_core import open_store
from tests.core.test_cli_runs import AGENTREPLAY

ESC = "\x1b]0;PWNED\x07\x1b[2J"  # set the terminal's title, clear the screen
BIDI = "\u202e"  # right-to-left override: shows what follows reversed


@pytest.fixture(autouse=True)
def _own_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # every command closes its store, which loads the spool: never the user's own
    monkeypatch.setenv("AGENTREPLAY_SPOOL_DIR", str(tmp_path / "spool"))


def cli(*args: str, columns: int = 200,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script, `columns` wide, with `env` added to the environment."""
    return subprocess.run([str(AGENTREPLAY), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": str(columns), **(env or {})})


def _raise_value_error() -> None:
    raise ValueError("no flights for Nowhere")


def _hostile_runs(store_dir: Path) -> tuple[uuid.UUID, uuid.UUID]:
    """Two runs whose names, tags and step names hold terminal escapes and a newline."""
    store = open_store(f"file:{store_dir}")
    with store.record(name=f"evil{ESC}name\nsecond line", tags=[f"t{ESC}", f"x{BIDI}gpj.exe"],
                      durability="sync") as first:
        first.record("tool", f"tool{ESC}", {"q": 1}, "ok")
    with store.record(name=f"other{ESC}", durability="sync") as second:
        second.record("tool", f"tool{ESC}", {"q": 1}, "changed")
        second.record("tool", f"extra\x9b2J{BIDI}", {"q": 2}, "more")
    return first.run_id, second.run_id


def _assert_harmless(result: subprocess.CompletedProcess[str]) -> None:
    for stream in (result.stdout, result.stderr):
        assert "\x1b" not in stream and "\x07" not in stream and "\x9b" not in stream
        assert BIDI not in stream


def test_runs_show_and_diff_print_recorded_control_characters_escaped(tmp_path: Path) -> None:
    first, second = _hostile_runs(tmp_path / "runs")
    dsn = f"file:{tmp_path / 'runs'}"
    listed = cli("runs", "--dsn", dsn)
    assert listed.returncode == 0, listed.stderr
    _assert_harmless(listed)
    # the header and one line per run: the name's newline does not start a row of its own
    assert len(listed.stdout.splitlines()) == 3, listed.stdout
    assert "evil\\x1b]0;PWNED\\x07\\x1b[2Jname\\nsecond line" in listed.stdout
    assert "x\\u202egpj.exe" in listed.stdout
    shown = cli("show", str(first), "--dsn", dsn)
    assert shown.returncode == 0, shown.stderr
    _assert_harmless(shown)
    assert "tool\\x1b]0;PWNED" in shown.stdout  # the name column is 20 wide
    diffed = cli("diff", str(first), str(second), "--dsn", dsn)
    assert diffed.returncode == 1, diffed.stderr
    _assert_harmless(diffed)
    assert "extra\\x9b2J\\u202e" in diffed.stdout
    # machine output keeps the recorded text exactly
    rows = json.loads(cli("runs", "--json", "--dsn", dsn).stdout)
    assert {r["name"] for r in rows} == {f"evil{ESC}name\nsecond line", f"other{ESC}"}


def test_a_cut_cell_never_ends_inside_an_escape_sequence(tmp_path: Path) -> None:
    first, _ = _hostile_runs(tmp_path / "runs")
    for columns in (60, 80, 100):
        shown = cli("show", str(first), "--dsn", f"file:{tmp_path / 'runs'}", columns=columns)
        assert shown.returncode == 0, shown.stderr
        _assert_harmless(shown)


def test_error_lines_quote_names_with_control_characters_escaped(tmp_path: Path) -> None:
    _hostile_runs(tmp_path / "runs")
    result = cli("show", f"ab{ESC}", "--dsn", f"file:{tmp_path / 'runs'}")
    assert result.returncode == 2
    _assert_harmless(result)
    assert result.stderr.startswith("error: ")


def _forked_runs(store_dir: Path) -> list[uuid.UUID]:
    """A tagged run with a long name and a fork of it: the table's widest case."""
    store = open_store(f"file:{store_dir}")
    with store.record(name="travel-agent-production", tags=["nightly", "customer:acme-corp"],
                      durability="sync") as parent:
        parent.record("tool", "search", {"city": "Lyon"}, "ok")
        parent.record("llm", "chat", {"content": "pick"}, "A")
    with store.record(name="travel-agent-production", parent_run_id=parent.run_id, fork_step=2,
                      tags=["nightly"], durability="sync") as fork:
        fork.record("llm", "chat", {"content": "CHANGED"}, "B")
    return [parent.run_id, fork.run_id]


@pytest.mark.parametrize("columns", [80, 60, 30])
def test_runs_table_never_cuts_ids_statuses_or_start_times(tmp_path: Path,
                                                           columns: int) -> None:
    ids = _forked_runs(tmp_path / "runs")
    listed = cli("runs", "--dsn", f"file:{tmp_path / 'runs'}", columns=columns)
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()[1:]
    assert sorted(row.split()[0] for row in rows) == sorted(str(i)[:8] for i in ids)
    for row in rows:
        assert " complete " in row
        assert any(len(word) == 10 and word.count("-") == 2 for word in row.split())
    parent_row = next(row for row in rows if row.startswith(str(ids[1])[:8]))
    assert f"{str(ids[0])[:8]}@2" in parent_row


def test_show_marks_error_steps_in_words(tmp_path: Path) -> None:
    store = open_store(f"file:{tmp_path / 'runs'}")
    with pytest.raises(ValueError), store.record(name="travel-agent",
                                                 durability="sync") as rec:
        rec.call("tool", "search_flights", {"city": "Paris"}, lambda: ["Paris 09:40"])
        rec.call("tool", "search_flights", {"city": "Nowhere"}, _raise_value_error)
    shown = cli("show", str(rec.run_id), "--dsn", f"file:{tmp_path / 'runs'}",
                env={"NO_COLOR": "1"})
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line for line in shown.stdout.splitlines()
            if line.split() and line.split()[0].isdigit()}
    assert "error ValueError: 'no flights for Nowhere'" in rows["2"]
    assert "error" not in rows["1"]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def test_show_step_prints_strict_json_for_non_finite_floats(tmp_path: Path) -> None:
    store = open_store(f"file:{tmp_path / 'runs'}")
    with store.record(name="nan", durability="sync") as rec:
        rec.record("tool", "score", {"x": 1},
                   {"score": float("nan"), "hi": float("inf"), "lo": float("-inf"), "ok": 1.5})
    shown = cli("show", str(rec.run_id), "--step", "1", "--dsn", f"file:{tmp_path / 'runs'}")
    assert shown.returncode == 0, shown.stderr
    step = json.loads(shown.stdout, parse_constant=_refuse_constant)
    # the form `show --json` and the run log give them
    assert step["output"] == {"score": {"__ar__": "float", "v": "nan"},
                              "hi": {"__ar__": "float", "v": "inf"},
                              "lo": {"__ar__": "float", "v": "-inf"}, "ok": 1.5}


@pytest.mark.parametrize("extra", [[], ["--json"], ["--step", "1"]])
def test_a_reader_that_went_away_ends_every_output_the_same_quiet_way(
        tmp_path: Path, extra: list[str]) -> None:
    store = open_store(f"file:{tmp_path / 'runs'}")
    with store.record(name="piped", durability="sync") as rec:
        rec.record("tool", "t", {"i": 1}, "x")
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head` does once it has its lines
    try:
        result = subprocess.run([str(AGENTREPLAY), "show", str(rec.run_id), *extra, "--dsn",
                                 f"file:{tmp_path / 'runs'}"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 141  # as a shell reports a writer killed by SIGPIPE


# Ctrl-C arriving while the command's modules load (the first second of every command).
INTERRUPTED_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "agentreplay_core._cli_app":
            raise KeyboardInterrupt
        return None
sys.meta_path.insert(0, Interrupt())
sys.argv = ["agentreplay", "runs", "--dsn", "memory:"]
from agentreplay_core._cli import main
main()
"""


def test_ctrl_c_while_the_command_loads_prints_no_traceback() -> None:
    result = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 130
    assert "Traceback" not in result.stderr


def _unkeyed_run(path: Path) -> uuid.UUID:
    with open_store(f"file:{path}", hmac_key=None) as store, store.record(
            name="before-the-key", durability="sync") as rec:
        rec.record("tool", "t", {"i": 1}, "ok")
    return rec.run_id


AGENT = """
from agentreplay_core import active_session
active_session().call("tool", "t", {"i": 1}, lambda: "live")
"""


def test_runs_recorded_before_the_key_verify_and_replay_when_accepted(tmp_path: Path) -> None:
    run_id = _unkeyed_run(tmp_path / "old.jsonl")
    dsn, keyed = f"file:{tmp_path / 'old.jsonl'}", {"AGENTREPLAY_HMAC_KEY": "new-key"}
    refused = cli("verify", str(run_id), "--dsn", dsn, env=keyed)
    assert refused.returncode == 1
    # the hint names what can be passed: the open_store keyword, the variable, the option
    assert "accept_unkeyed_runs=True" in refused.stdout
    assert "AGENTREPLAY_ACCEPT_UNKEYED_RUNS=1" in refused.stdout
    assert "accept_unkeyed=True" not in refused.stdout
    lax = {**keyed, "AGENTREPLAY_ACCEPT_UNKEYED_RUNS": "1"}
    assert cli("verify", str(run_id), "--dsn", dsn, env=lax).returncode == 0
    assert cli("verify", str(run_id), "--accept-unkeyed-runs", "--dsn", dsn,
               env=keyed).returncode == 0
    out = tmp_path / "by-option.jsonl"
    assert cli("export", str(run_id), "-o", str(out), "--dsn", dsn, env=keyed).returncode == 1
    assert cli("export", str(run_id), "-o", str(out), "--accept-unkeyed-runs", "--dsn", dsn,
               env=keyed).returncode == 0
    target = f"file:{tmp_path / 'laptop'}"
    assert cli("import", str(out), "--dsn", target, env=keyed).returncode == 1
    imported = cli("import", str(out), "--accept-unkeyed-runs", "--dsn", target, env=keyed)
    assert imported.returncode == 0, imported.stderr
    exported = cli("export", str(run_id), "-o", str(tmp_path / "out.jsonl"), "--dsn", dsn, env=lax)
    assert exported.returncode == 0, exported.stderr
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT, encoding="utf-8")
    replay = ["replay", str(run_id), "--isolation", "guard", "--dsn", dsn]
    assert cli(*replay, "--", sys.executable, str(agent), env=keyed).returncode == 1
    replayed = cli(*replay, "--accept-unkeyed-runs", "--", sys.executable, str(agent), env=keyed)
    assert replayed.returncode == 0, replayed.stderr
    assert "finished cleanly" in replayed.stderr


def test_open_store_reads_accept_unkeyed_runs_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = _unkeyed_run(tmp_path / "old.jsonl")
    with open_store(f"file:{tmp_path / 'old.jsonl'}", hmac_key="new-key") as strict:
        assert not strict.verify(run_id).ok
    monkeypatch.setenv("AGENTREPLAY_ACCEPT_UNKEYED_RUNS", "1")
    with open_store(f"file:{tmp_path / 'old.jsonl'}", hmac_key="new-key") as lax:
        assert lax.verify(run_id).ok


SHORT_AGENT = """
import os
from agentreplay_core import active_session
s = active_session()
s.call("tool", "a", {"x": 1}, lambda: 1)
if os.environ.get("AGENTREPLAY_MODE") != "replay":
    s.call("tool", "b", {"x": 2}, lambda: 2)
"""


def test_replay_names_and_takes_allow_unused(tmp_path: Path) -> None:
    agent, run_id = tmp_path / "agent.py", str(uuid.uuid4())
    agent.write_text(SHORT_AGENT, encoding="utf-8")
    dsn = f"file:{tmp_path / 'store'}"
    subprocess.run([sys.executable, str(agent)], check=True, timeout=120, capture_output=True,
                   env={**os.environ, "AGENTREPLAY_MODE": "record",
                        "AGENTREPLAY_RUN_ID": run_id, "AGENTREPLAY_DSN": dsn})
    replay = ["replay", run_id, "--isolation", "guard", "--dsn", dsn]
    stopped = cli(*replay, "--", sys.executable, str(agent))
    assert stopped.returncode == 1
    assert "pass --allow-unused if that is expected" in stopped.stderr
    assert "allow_unused=True" not in stopped.stderr
    allowed = cli(*replay, "--allow-unused", "--", sys.executable, str(agent))
    assert allowed.returncode == 0, allowed.stderr
    assert "1 of 2 recorded steps" in allowed.stderr
