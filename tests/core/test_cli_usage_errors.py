"""Usage errors (a bad option value, a missing argument, an unknown command) as one `error:`
line and one line naming the command's help, exit code 2, never wrapped."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.core.test_cli_runs import AGENTREPLAY


def cli_80(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script as in a CI log: 80 columns, no terminal."""
    return subprocess.run([str(AGENTREPLAY), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "80"})


@pytest.mark.parametrize(("args", "said", "command"), [
    (["runs", "--status", "bogus", "--dsn", "memory:"],
     "'bogus' is not one of 'recording', 'complete', 'failed', 'incomplete'", "runs"),
    (["show", "--dsn", "memory:"], "Missing argument 'RUN'", "show"),
    (["export", "2326", "--dsn", "memory:", "--output"], "'--output' requires an argument",
     "export"),
    (["runs", "--limit", "0", "--dsn", "memory:"], "'--limit'", "runs"),
    (["runs", "--dsn", "memory:", "--nope"], "No such option: --nope", "runs"),
    (["bogus"], "No such command 'bogus'", ""),
    (["db", "bogus"], "No such command 'bogus'", "db"),
])
def test_a_usage_error_is_one_error_line_and_where_to_read_the_usage(
        args: list[str], said: str, command: str) -> None:
    result = cli_80(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("error: ") and said in lines[0]
    assert lines[1] == f"try: agentreplay {command} --help".replace("  ", " ")


def test_no_arguments_still_print_the_help() -> None:
    result = cli_80()
    assert result.returncode == 2
    assert "Usage:" in result.stdout and "runs" in result.stdout
