"""The examples users read are executed, so they cannot rot."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import agentreplay_core

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)


def test_readme_python_examples_run() -> None:
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert blocks
    # read top to bottom, like a notebook: a block may use names of the blocks before it
    namespace: dict[str, object] = {"__name__": "readme_example"}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)


def test_package_docstring_example_runs() -> None:
    result = doctest.testmod(agentreplay_core, raise_on_error=False)
    assert result.attempted >= 4
    assert result.failed == 0


def test_readme_names_the_ci_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "<!-- test-command -->" in readme and "<!-- demo-command -->" in readme
    assert "test-command" in ci
