"""The core stays framework-free."""

from __future__ import annotations

import subprocess
import sys


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
