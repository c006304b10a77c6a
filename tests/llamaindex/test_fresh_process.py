"""Record real LlamaIndex programs into PostgreSQL, replay them in a fresh process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentreplay_core import Store
from agentreplay_llamaindex import instrument
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding, SampledLLM, ToolCallingLLM

ROOT = Path(__file__).resolve().parents[2]


def _record(store: Store, scenario: str, mode: str = "") -> tuple[dict[str, Any], str]:
    with store.record(name=f"{scenario}-{mode}") as rec, instrument(rec):
        if scenario == "rag":
            index = scenarios.build_index(HashEmbedding())
            retriever = index.as_retriever(similarity_top_k=2)
            live = asyncio.run(scenarios.rag(SampledLLM(), retriever, mode))
        elif scenario in ("agent", "workflow"):
            live = asyncio.run(scenarios.agent(ToolCallingLLM(), scenarios.agent_tools(),
                                               workflow=scenario == "workflow"))
        else:
            live = scenarios.structured(ToolCallingLLM())
    assert rec.stats.internal_errors == 0 and rec.stats.unencodable == 0, rec.stats
    return live, str(rec.run_id)


def test_replay_in_a_fresh_process_returns_what_the_live_run_did(
        li_store: Store, pg_dsn: str, pg_schema: str) -> None:
    jobs = [{"scenario": "rag", "mode": m} for m in scenarios.RAG_MODES]
    jobs += [{"scenario": s, "mode": ""} for s in ("agent", "workflow", "structured")]
    expected = []
    for job in jobs:
        live, job["run_id"] = _record(li_store, job["scenario"], job["mode"])
        expected.append(live)
    # the model is sampled: a second live run differs, so equal replays were not live calls
    again, _ = _record(li_store, "rag", "sync")
    assert again["text"] != expected[0]["text"]

    child = subprocess.run(
        [sys.executable, "-m", "tests.llamaindex.replay_child", pg_dsn, pg_schema],
        input=json.dumps(jobs), capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert child.returncode == 0, child.stderr[-4000:]
    replayed = json.loads(child.stdout.strip().splitlines()[-1])

    for job, live, result in zip(jobs, expected, replayed, strict=True):
        assert result.pop("guard") is True, f"{job}: network guard was off during replay"
        assert result == live, job  # text, source node ids, node texts and float scores
    rag_live = expected[0]
    assert len(rag_live["node_ids"]) == 2 and all(isinstance(s, float)
                                                  for s in rag_live["scores"])


def test_recorded_embeddings_are_exact_float64(li_store: Store) -> None:
    with li_store.record(name="index") as rec, instrument(rec):
        scenarios.build_index(HashEmbedding())
    steps = [s for s in li_store.load_steps(rec.run_id) if s.kind == "embedding"]
    assert [s.input["text"] for s in steps] == scenarios.TEXTS
    for step, text in zip(steps, scenarios.TEXTS, strict=True):
        assert step.output == HashEmbedding.vector(text, "text")
        assert step.input["mode"] == "text"
