"""The core stays framework-free."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_core_imports_neither_langchain_nor_llama_index() -> None:
    code = (
        "import sys, agentreplay_core, agentreplay_core.stores\n"
        "from agentreplay_core import open_store\n"
        "s = open_store('memory:')\n"
        "with s.record() as r: r.record('tool', 't', {}, 1)\n"
        "with s.replay(r.run_id) as p: p.next('tool', 't', {})\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langchain', 'langchain_core', 'langgraph', 'llama_index'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == ""


@pytest.mark.parametrize(
    ("adapter", "framework", "extra"),
    [
        ("agentreplay_langchain", "langchain_core", "agentreplay[langchain]"),
        ("agentreplay_llamaindex", "llama_index", "agentreplay[llamaindex]"),
    ],
)
def test_adapter_without_its_framework_names_the_extra(adapter: str, framework: str,
                                                       extra: str) -> None:
    # A None entry in sys.modules makes `import framework` fail as if it were not installed.
    code = (
        f"import sys; sys.modules[{framework!r}] = None\n"
        f"try:\n    import {adapter}\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert extra in result.stdout
