"""Loading and verifying a long run for replay, against fetching its rows as plain text.

The run (10,000 steps in the full run) is recorded while 40 other runs record into the same
table, ten of their steps between two of its own, all through one writer: its rows share
pages with theirs, as in a busy store. agentreplay: `store.replay(run_id)` entered and left
(get the run, load its steps, verify the chain, build the player). Baseline: the same rows
fetched with one query, every column cast to text, nothing parsed.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

import psycopg
from psycopg import sql

from agentreplay_core import Store
from benchmarks._baselines import STEP_COLUMNS
from benchmarks._context import Bench
from benchmarks._db import fresh_store
from benchmarks._payloads import chat_step
from benchmarks._report import Target
from benchmarks._timing import interleave, per_unit, ratio

SCHEMA = "bench_load"
OTHER_RUNS = 40
OTHERS_PER_STEP = 10  # steps of other runs recorded between two steps of the long run
LIMIT = 2.0


def record_interleaved(store: Store, steps: int) -> str:
    """Record the long run among the others; returns its run id."""
    with ExitStack() as stack:
        target = stack.enter_context(store.record(name="long-run"))
        others = [stack.enter_context(store.record(name=f"other-{k}"))
                  for k in range(OTHER_RUNS)]
        other_step = steps
        for i in range(steps):
            target.record("llm", "chat_model", *chat_step(i))
            for _ in range(OTHERS_PER_STEP):
                others[other_step % OTHER_RUNS].record("llm", "chat_model",
                                                       *chat_step(other_step))
                other_step += 1
    return str(target.run_id)


def run(bench: Bench) -> list[Target]:
    report = bench.report
    steps = bench.size(500, 10_000)
    report.heading("load_verify: load and verify a run for replay",
                   f"a {steps:,}-step run recorded among {OTHER_RUNS} other runs "
                   f"({steps * OTHERS_PER_STEP // OTHER_RUNS:,} steps each), interleaved.")
    with fresh_store(bench.dsn, SCHEMA) as store, psycopg.connect(bench.dsn) as conn:
        run_id = record_interleaved(store, steps)
        as_text = sql.SQL("SELECT {} FROM {} WHERE run_id = %s ORDER BY step").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c))
                               for c in STEP_COLUMNS),
            sql.Identifier(SCHEMA, "run_log"))
        run = store.get_run(run_id)
        loaded = store.load_steps(run_id)

        def fetch_text() -> float:
            t0 = time.perf_counter()
            rows = conn.execute(as_text, (run_id,)).fetchall()
            conn.commit()
            if len(rows) != steps:
                raise RuntimeError(f"run {run_id} has {len(rows)} rows, not {steps}")
            return time.perf_counter() - t0

        def replay_open() -> float:
            t0 = time.perf_counter()
            with store.replay(run_id, allow_unused=True):
                pass
            return time.perf_counter() - t0

        samples = interleave({
            "fetch rows as text": fetch_text,
            "store.replay(run) opened": replay_open,
            "  of which store.load_steps": lambda: per_unit(lambda: store.load_steps(run_id), 1),
            "  of which verify (loaded steps)": lambda: per_unit(
                lambda: store.verify_steps(run, loaded), 1),
        }, bench.size(3, 11))
    report.timing("Load and verify", samples, baseline="fetch rows as text", unit="ms",
                  scale=1e3, per="run",
                  note="The two 'of which' rows are measured on their own, for diagnosis.")
    return [Target(f"Replay: load + verify a {steps:,}-step run vs fetching it as text",
                   ratio(samples["store.replay(run) opened"], samples["fetch rows as text"]),
                   LIMIT)]
