"""Sustained recording throughput into PostgreSQL, until durable.

agentreplay (batched, and sync for reference) records steps as fast as the caller can hand
them over; the time runs from the first `record` to `flush()` returning (every row
committed). Baselines: raw COPY of the same rows, pre-built, into tables of the same shape
(the ceiling of this server) and the seed recorder (INSERT + commit per step). Every
variant writes into empty tables, and the CPU a step costs this process and the server is
reported beside the times: which of the two sets the pace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from agentreplay_core import Store, open_store
from benchmarks._baselines import (
    COPY_BATCH,
    create_raw_tables,
    create_seed_table,
    raw_copy,
    seed_record,
    step_rows,
)
from benchmarks._context import Bench
from benchmarks._db import fresh_store, helped_store, truncate
from benchmarks._payloads import chat_steps, fresh_chat_steps, json_text
from benchmarks._report import Target, cpu_text
from benchmarks._timing import Cpu, interleave, median_cpu, with_cpu

SCHEMA = "bench_throughput"
COPY_SHARE = 85.0  # percent of raw COPY's steps/s
SEED_FACTOR = 5.0
RAW = "raw COPY of pre-built rows"
BATCHED = "agentreplay batched"
SEED = "seed recorder (INSERT per step)"
#: the same recording into a store opened with `redaction=None`: what redaction costs
UNREDACTED = "agentreplay batched, no redaction"
#: the same recording into a store opened with `prepare="process"`
PROCESS = "agentreplay batched, prepare=process"


def recorded_rate(store: Store, steps: Sequence[tuple[Any, Any]], durability: str) -> float:
    """Seconds per step from the first `record` until every row is committed."""
    with store.record(name=f"throughput-{durability}", durability=durability) as rec:
        t0 = time.perf_counter()
        for request, response in steps:
            rec.record("llm", "chat_model", request, response)
        if not rec.flush(timeout=600):
            raise RuntimeError("the batched writer did not get the rows written within 600 s; "
                               "see the log for why (database down? spooling?)")
        return (time.perf_counter() - t0) / len(steps)


def run(bench: Bench) -> list[Target]:
    report = bench.report
    steps = chat_steps(bench.size(1_000, 10_000))
    few = steps[:bench.size(200, 2_000)]  # one commit per step: fewer suffice for a rate
    megabytes = sum(len(json_text(a)) + len(json_text(b)) for a, b in steps) / 1e6
    report.heading("throughput: sustained steps/s until durable",
                   f"{len(steps):,} chat steps ({megabytes * 1e6 / len(steps):,.0f} bytes of "
                   f"JSON each) per repeat; the seed recorder and sync mode record "
                   f"{len(few):,}.")
    with fresh_store(bench.dsn, SCHEMA) as store, \
            open_store(bench.dsn, schema=SCHEMA, redaction=None) as unredacted, \
            helped_store(bench.dsn, SCHEMA) as helped, \
            psycopg.connect(bench.dsn, autocommit=True) as conn:
        create_seed_table(conn, SCHEMA)
        create_raw_tables(conn, SCHEMA)

        raw_rows = step_rows(steps)  # the same rows every repeat: the tables start empty
        cpu: dict[str, list[Cpu]] = {}

        def emptied(name: str, made: Callable[[], Sequence[Any]],
                    measure: Callable[[Sequence[Any]], float]) -> Callable[[], float]:
            """`measure` of what `made` makes (before the clock starts) into empty tables,
            so that every variant writes into tables of the same size: left to grow, raw
            COPY's table and agentreplay's (four variants write there) grow apart, and each
            variant pays for the rows of the ones before it. The CPU per step of this
            process and of the server go to `cpu[name]`."""
            def run() -> float:
                truncate(bench.dsn, SCHEMA, "run_log", "runs", "raw_log", "seed_log")
                work = made()
                per_step, used = with_cpu(bench.data_dir, lambda: measure(work), len(work))
                cpu.setdefault(name, []).append(used)
                return per_step
            return run

        def fresh() -> Sequence[Any]:  # new steps each repeat (see `_payloads.fresh`)
            return fresh_chat_steps(len(steps))

        samples = interleave({name: emptied(name, made, measure) for name, (made, measure) in {
            RAW: (lambda: raw_rows, lambda rows: raw_copy(conn, SCHEMA, rows) / len(rows)),
            BATCHED: (fresh, lambda work: recorded_rate(store, work, "batched")),
            UNREDACTED: (fresh, lambda work: recorded_rate(unredacted, work, "batched")),
            PROCESS: (fresh, lambda work: recorded_rate(helped, work, "batched")),
            "agentreplay sync": (lambda: fresh_chat_steps(len(few)),
                                 lambda work: recorded_rate(store, work, "sync")),
            SEED: (lambda: few, lambda work: seed_record(conn, SCHEMA, work)),
        }.items()}, bench.size(3, 7))
    raw_s, batched, seed = samples[RAW], samples[BATCHED], samples[SEED]
    report.timing("Steps until durable", samples, baseline=RAW, rate=True, note=(
        f"raw COPY: {COPY_BATCH:,} rows per transaction, "
        f"{megabytes / (raw_s.median * len(steps)):.1f} MB/s of JSON; agentreplay batched "
        f"{megabytes / (batched.median * len(steps)):.1f} MB/s.\n"
        f"CPU per step (median), this process / the server: raw COPY {_cpu(cpu[RAW])}; "
        f"agentreplay batched {_cpu(cpu[BATCHED])}; without redaction "
        f"{_cpu(cpu[UNREDACTED])}."))
    plain, process = samples[UNREDACTED], samples[PROCESS]
    return [
        Target("Throughput batched: share of raw COPY's steps/s",
               100 * raw_s.median / batched.median, COPY_SHARE, "%", higher_is_better=True,
               detail=f"{1 / batched.median:,.0f} vs {1 / raw_s.median:,.0f} steps/s"),
        Target("Throughput batched vs seed recorder's steps/s",
               seed.median / batched.median, SEED_FACTOR, higher_is_better=True,
               detail=f"seed {1 / seed.median:,.0f} steps/s"),
        Target("Throughput batched without redaction vs seed recorder's steps/s "
               "(documented)", seed.median / plain.median, None,
               detail=f"{1 / plain.median:,.0f} steps/s: what the default secret patterns "
                      "cost on new text"),
        Target('Throughput batched, prepare="process", vs seed recorder\'s steps/s '
               "(documented)", seed.median / process.median, None,
               detail=f"{1 / process.median:,.0f} steps/s, "
                      f"{100 * raw_s.median / process.median:.1f}% of raw COPY"),
    ]


def _cpu(samples: list[Cpu]) -> str:
    """Median CPU per step over the measured repeats: the first sample is `interleave`'s
    warm-up."""
    return cpu_text(median_cpu(samples[1:]))
