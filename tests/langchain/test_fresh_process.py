"""The user story: a run recorded in production is replayed elsewhere, from the database only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agentreplay_core import Store
from tests.langchain.fakes import Counter
from tests.langchain.test_langgraph import record

ROOT = Path(__file__).resolve().parents[2]


def test_a_langgraph_run_replays_in_a_fresh_process(store: Store, pg_dsn: str,
                                                    pg_schema: str) -> None:
    run_id, live = record(store, Counter())
    child = subprocess.run(
        [sys.executable, "-m", "tests.langchain.replay_child", pg_dsn, pg_schema, str(run_id)],
        capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert child.returncode == 0, child.stderr[-4000:]
    replayed = json.loads(child.stdout.strip().splitlines()[-1])
    assert replayed == [m.model_dump(mode="json") for m in live]
