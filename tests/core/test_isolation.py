"""The core stays framework-free."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

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


def _installed(distribution: str) -> bool:
    try:
        version(distribution)
    except PackageNotFoundError:
        return False
    return True


@pytest.mark.parametrize(
    ("adapter", "framework", "distribution", "extra"),
    [
        ("agentreplay_langchain", "langchain_core", "langchain-core", "agentreplay[langchain]"),
        ("agentreplay_llamaindex", "llama_index", "llama-index-core", "agentreplay[llamaindex]"),
    ],
)
def test_adapter_without_its_framework_names_the_extra(adapter: str, framework: str,
                                                       distribution: str, extra: str) -> None:
    installed = _installed(distribution)
    if os.environ.get("AGENTREPLAY_TEST_WITHOUT_FRAMEWORKS"):
        # the nox `core` sessions: the framework must really be absent, so that the import
        # below is a user's import, not a simulation
        assert not installed, f"{distribution} is installed in a session meant to have none"
    # Where the framework is installed, a None entry in sys.modules makes `import framework`
    # fail as if it were not.
    hide = f"import sys; sys.modules[{framework!r}] = None\n" if installed else ""
    result = subprocess.run([sys.executable, "-c", f"{hide}import {adapter}"],
                            capture_output=True, text=True)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith(f"ImportError: {adapter} needs {distribution}"), last_line
    assert f'pip install "{extra}"' in last_line


def test_public_names_are_imported_on_first_use() -> None:
    # The pytest plugin imports this package in every pytest run where agentreplay is
    # installed: importing it alone must not load the implementation (pydantic, the codec).
    code = (
        "import sys, agentreplay_core, agentreplay_core.pytest_plugin\n"
        "heavy = sorted(m for m in ('pydantic', 'orjson', 'agentreplay_core._store') "
        "if m in sys.modules)\n"
        "names = [n for n in agentreplay_core.__all__ if getattr(agentreplay_core, n) is None]\n"
        "print(heavy, names, 'Session' in dir(agentreplay_core))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[] [] True"
