"""The `agentreplay` command on stores it cannot use as asked: damaged run files, a mistyped
store path, a file store given to `db`, and arguments that would be silently ignored."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import psycopg
import pytest

from agentreplay_core import open_store
from tests.core.test_cli_runs import agentreplay, one_line_error

READING_COMMANDS = [
    ["runs"], ["show", "3f2a9c1e"], ["verify", "--all"], ["verify", "3f2a9c1e"],
    ["diff", "3f2a9c1e", "8b07d512"], ["export", "3f2a9c1e"],
    ["replay", "3f2a9c1e", "--", "true"],
]


def _record(url: str, name: str) -> UUID:
    with open_store(url) as store, store.record(name=name) as rec:
        rec.record("tool", "t", {"a": 1}, "x")
        rec.record("tool", "t", {"a": 2}, "y")
    return rec.run_id


def _damaged_store(tmp_path: Path) -> tuple[str, UUID, Path]:
    """A file store with one good run and one whose second line a careless hand edit broke:
    its URL, the good run's id and the damaged file."""
    url = f"file:{tmp_path / 'runs'}"
    good = _record(url, "good")
    damaged = tmp_path / "runs" / f"{_record(url, 'damaged')}.jsonl"
    lines = damaged.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"kind":"tool"', '"kind":"tool', 1)
    damaged.write_text("".join(lines))
    return url, good, damaged


def test_verify_all_fails_on_a_damaged_run_file_and_names_it(tmp_path: Path) -> None:
    url, good, damaged = _damaged_store(tmp_path)
    result = agentreplay("verify", "--all", "--dsn", url)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"run {good}: 2 steps, chain intact" in result.stdout
    assert (f"run file {damaged} cannot be read: line 2 is not valid JSON" in result.stdout)
    assert "[unreadable]" in result.stdout
    assert "list_runs skips" not in result.stderr  # said once, by the command


def test_verify_of_a_damaged_run_file_is_a_failed_check(tmp_path: Path) -> None:
    """Exit 1 (a check failed), as `verify --all` reports the same run; not 2 (store error)."""
    url, _, damaged = _damaged_store(tmp_path)
    result = agentreplay("verify", damaged.stem[:8], "--dsn", url)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"run {damaged.stem} run: cannot read the run: {damaged}: line 2" in result.stdout
    unknown = agentreplay("verify", "00000000-0000-4000-8000-00000000abcd", "--dsn", url)
    assert "no run with id" in one_line_error(unknown)


def test_runs_warns_about_a_run_file_it_cannot_list(tmp_path: Path) -> None:
    url, good, damaged = _damaged_store(tmp_path)
    for args in ([], ["--json"]):
        result = agentreplay("runs", "--dsn", url, *args)
        assert result.returncode == 0, result.stderr
        assert str(good)[:8] in result.stdout and damaged.stem[:8] not in result.stdout
        warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1, result.stderr
        assert warnings[0].startswith(f"warning: {damaged} is not listed: its run cannot be "
                                      "read: line 2 is not valid JSON")
        assert "list_runs skips" not in result.stderr


@pytest.mark.parametrize("command", READING_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("target", ["runz", "run.jsonl"])
def test_a_reading_command_never_creates_a_mistyped_store(
    tmp_path: Path, command: list[str], target: str
) -> None:
    missing = tmp_path / "typo" / target
    # the option first: after `--` it would be replay's program's
    result = agentreplay(command[0], "--dsn", f"file:{missing}", *command[1:])
    assert f"no run store at {missing}" in one_line_error(result)
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("command", [["runs"], ["verify", "--all"],
                                     ["prune", "--older-than", "1d"]], ids=" ".join)
def test_a_reading_command_never_creates_a_mistyped_schema(
    pg_dsn: str, pg_schema: str, command: list[str]
) -> None:
    """An empty schema made by a typo answered "no runs yet", and `verify --all` passed."""
    result = agentreplay(command[0], "--dsn", pg_dsn, "--schema", pg_schema, *command[1:])
    error = one_line_error(result)
    assert f"schema {pg_schema!r} does not exist" in error
    assert f"agentreplay db migrate --schema {pg_schema}" in error
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                            (pg_schema,)).fetchone() is None


def test_commands_that_store_runs_may_create_the_file_store(tmp_path: Path) -> None:
    exported = tmp_path / "run.jsonl"
    run_id = _record(f"file:{exported}", "exported")
    target = tmp_path / "new" / "runs"
    result = agentreplay("import", str(exported), "--dsn", f"file:{target}")
    assert result.returncode == 0, result.stderr
    assert (target / f"{run_id}.jsonl").exists()


@pytest.mark.parametrize("command", [["db", "status"], ["db", "migrate"]], ids=" ".join)
def test_db_commands_say_they_need_postgresql(tmp_path: Path, command: list[str]) -> None:
    for url, what in ((f"file:{tmp_path}", f"file:{tmp_path} is a file store"),
                      ("memory:", "memory: is an in-memory store")):
        line = one_line_error(agentreplay(*command, "--dsn", url))
        assert line == f"error: agentreplay db works on a PostgreSQL store only; {what}"
    typo = one_line_error(agentreplay(*command, "--dsn", "postgressql://me:s3cret@db/x"))
    assert "PostgreSQL store only" in typo and "s3cret" not in typo
    shown = agentreplay(*command, "--help").stdout
    assert "file:PATH" not in shown and "memory:" not in shown
    assert "PostgreSQL URL" in shown


def test_verify_takes_a_run_or_all_not_both(tmp_path: Path) -> None:
    url = f"file:{tmp_path}"
    run_id = _record(url, "one")
    both = agentreplay("verify", str(run_id), "--all", "--dsn", url)
    assert one_line_error(both) == "error: name a run id or pass --all, not both"


def test_verify_help_describes_its_argument_and_exit_codes() -> None:
    shown = agentreplay("verify", "--help").stdout
    assert "[OPTIONS] [RUN]" in shown and "A run id, or a unique prefix; or --all." in shown
    assert "Exit codes: 0 every run verified, 1 a run failed verification or cannot be" in shown
    assert "RUN_ID" not in shown


def test_diff_refuses_an_unknown_ignore_kind(tmp_path: Path) -> None:
    url = f"file:{tmp_path}"
    with open_store(url) as store, store.record(name="a") as rec:
        rec.record("decision", "route", {}, "left")
    run = str(rec.run_id)
    line = one_line_error(agentreplay("diff", run, run, "--ignore-kind", "no-such-kind",
                                      "--dsn", url))
    assert line == ("error: --ignore-kind 'no-such-kind' is no step kind; the kinds are llm, "
                    "tool, retriever, embedding, time, random, uuid, sleep (and in these runs: "
                    "decision)")
    for kind in ("uuid", "decision"):  # a known kind, and one only these runs hold
        assert agentreplay("diff", run, run, "--ignore-kind", kind, "--dsn", url
                           ).returncode == 0
