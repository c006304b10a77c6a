"""Bytes on disk against the canonical JSON size of what was recorded.

Each case records into a schema of its own; after VACUUM ANALYZE, `run_log`'s table, TOAST
and index sizes (less those of the empty table) are compared with the canonical JSON of the
stored steps (every column, as `canonical_bytes` writes it). Two cases: distinct chat steps
(~2 KB in / ~1 KB out), and a 100-turn conversation whose prompt resends every earlier turn,
where a store that keeps the repeated prefix once would hold little more than the last
prompt and the answers.
"""

from __future__ import annotations

from typing import Any

from agentreplay_core import Step, canonical_bytes
from benchmarks._context import Bench
from benchmarks._db import fresh_store, table_bytes
from benchmarks._payloads import chat_steps, conversation
from benchmarks._report import Target, fmt

SCHEMA = "bench_storage"
LIMIT = 1.5
TURNS = 100


def canonical_size(step: Step) -> int:
    """Canonical JSON bytes of a stored step, every column."""
    return len(canonical_bytes({
        "run_id": str(step.run_id), "step": step.step, "kind": step.kind, "name": step.name,
        "match_key": step.match_key, "path": step.path, "input": step.input,
        "output": step.output, "is_error": step.is_error,
        "started_at": step.started_at.isoformat(), "duration_ms": step.duration_ms,
        "checksum": step.checksum}))


def stored(bench: Bench, schema: str, steps: list[tuple[Any, Any]]
           ) -> tuple[dict[str, int], list[Step]]:
    """Record `steps` as one run; the bytes it added to `run_log`, and the stored steps."""
    with fresh_store(bench.dsn, schema) as store:
        empty = table_bytes(bench.dsn, schema, "run_log")
        with store.record(name=schema) as rec:
            for request, response in steps:
                rec.record("llm", "chat_model", request, response)
        full = table_bytes(bench.dsn, schema, "run_log")
        loaded = store.load_steps(rec.run_id)
    return {part: full[part] - empty[part] for part in full}, loaded


def run(bench: Bench) -> list[Target]:
    report = bench.report
    count = bench.size(1_000, 10_000)
    report.heading("storage: bytes on disk per recorded byte",
                   f"{count:,} distinct chat steps, and a {TURNS}-turn conversation.")
    sizes, steps = stored(bench, SCHEMA, chat_steps(count))
    canonical = sum(map(canonical_size, steps)) / count
    report.table("Distinct chat steps: bytes per step", ["part", "bytes/step", "vs canonical"],
                 [[part, fmt(size / count), f"{size / count / canonical:.2f}x"]
                  for part, size in sizes.items()] +
                 [["canonical JSON of the step", fmt(canonical), "1.00x"]])
    chat, turns = stored(bench, SCHEMA + "_chat", conversation(TURNS))
    logical = sum(map(canonical_size, turns))
    # what a store keeping each distinct message once must hold: every step without its
    # prompt, plus the last prompt, which holds every earlier message
    distinct = logical - sum(len(canonical_bytes(s.input)) for s in turns[:-1])
    report.table(f"{TURNS}-turn conversation, growing prompt", ["measure", "bytes", "vs stored"],
                 [["logically recorded (canonical JSON)", fmt(logical),
                   f"{logical / chat['total']:.2f}x"],
                  ["distinct content (prefix once)", fmt(distinct),
                   f"{distinct / chat['total']:.2f}x"],
                  ["stored (table + TOAST + indexes)", fmt(chat["total"]), "1.00x"]])
    return [
        Target("Storage: bytes on disk per step vs canonical JSON", sizes["total"] / count /
               canonical, LIMIT, detail=f"{fmt(sizes['total'] / count)} vs {fmt(canonical)} "
                                        "bytes"),
        Target(f"Storage: {TURNS}-turn growing conversation, stored vs distinct content",
               chat["total"] / distinct, LIMIT,
               detail=f"stored {chat['total'] / logical:.0%} of the {fmt(logical / 1e6)} MB "
                      "logically recorded"),
    ]
