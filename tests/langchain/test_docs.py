"""The adapter's documented usage runs as written."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import agentreplay_langchain

ROOT = Path(__file__).resolve().parents[2]


def test_module_docstring_example_runs() -> None:
    result = doctest.testmod(agentreplay_langchain, raise_on_error=False)
    assert result.attempted >= 5 and result.failed == 0


def test_docs_page_python_examples_run() -> None:
    text = (ROOT / "docs" / "langchain.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    namespace: dict[str, object] = {}  # later examples build on earlier ones, as in the page
    for block in blocks:
        exec(compile(block, "docs/langchain.md", "exec"), namespace)
