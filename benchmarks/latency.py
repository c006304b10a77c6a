"""Time from enqueue to durable, batched mode, steps arriving at one per millisecond.

A step's latency runs from `Recorder.record` returning to the store's write of the batch
holding it returning (`write_group`, or `append` when rows are written one batch at a time),
which is after its COMMIT (fsync on): the benchmark wraps both methods of `store.backend` to
stamp that moment for each step of the batch, and changes nothing else.
`sync` mode has no queue: its cost is the time `record` itself takes, a commit per step.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from agentreplay_core import Store
from agentreplay_core.stores import StoreBackend
from benchmarks._context import Bench
from benchmarks._db import fresh_store, helped_store
from benchmarks._payloads import fresh_chat_steps
from benchmarks._report import Target, fmt
from benchmarks._timing import alternate, pace, percentile

SCHEMA = "bench_latency"
INTERVAL = 0.001  # one step per millisecond
P99_LIMIT_MS = 50.0
#: the same, into a store opened with `prepare="process"` (its helper started beforehand)
PROCESS = "batched, prepare=process"


class DurableClock:
    """When each step's batch was committed, stamped on the writer thread."""

    def __init__(self, backend: StoreBackend) -> None:
        self.at: dict[tuple[UUID, int], float] = {}
        append, write_group = backend.append, backend.write_group

        def stamped_append(steps: Sequence[Any], embeddings: Sequence[Any] = (), *,
                           idempotent: bool = False) -> None:
            append(steps, embeddings, idempotent=idempotent)
            self._stamp(steps)

        def stamped_group(run: Any, steps: Any, embeddings: Any, finish: Any) -> None:
            write_group(run, steps, embeddings, finish)
            self._stamp(steps)  # read again: the rows made while they were written

        backend.append = stamped_append  # type: ignore[method-assign]
        backend.write_group = stamped_group  # type: ignore[method-assign]

    def _stamp(self, steps: Iterable[Any]) -> None:
        now = time.perf_counter()
        for step in steps:
            self.at[(step.run_id, step.step)] = now


def paced(store: Store, steps: Sequence[tuple[Any, Any]], durability: str,
          clock: DurableClock) -> dict[str, list[float]]:
    """Record `steps` at one per ms; per step: the `record` call's duration and (batched)
    the time from its return to its commit, in seconds."""
    calls: list[float] = []
    returned: dict[int, float] = {}
    with store.record(name=f"latency-{durability}", durability=durability) as rec:
        def one(i: int) -> None:
            t0 = time.perf_counter()
            number = rec.record("llm", "chat_model", *steps[i])
            t1 = time.perf_counter()
            calls.append(t1 - t0)
            if number is not None:  # None: not recorded (counted in rec.stats, checked below)
                returned[number] = t1

        pace(len(steps), INTERVAL, one)
        rec.flush(timeout=600)
    missing = [n for n in returned if (rec.run_id, n) not in clock.at]
    if missing or len(returned) < len(steps):
        raise RuntimeError(f"run {rec.run_id}: {len(steps) - len(returned)} steps not recorded "
                           f"and {len(missing)} not committed by the store ({rec.stats}); the "
                           "latency cannot be measured")
    if durability == "sync":
        return {"call": calls}
    return {"call": calls,
            "durable": [clock.at[(rec.run_id, n)] - t for n, t in returned.items()]}


def run(bench: Bench) -> list[Target]:
    report = bench.report
    count, few = bench.size(1_000, 5_000), bench.size(300, 1_000)
    report.heading("latency: enqueue to durable at one step per ms",
                   f"batched: {count:,} steps per repeat, sync: {few:,}; paced in an "
                   "open loop (a late step does not delay the schedule).")
    with fresh_store(bench.dsn, SCHEMA) as store, helped_store(bench.dsn, SCHEMA) as helped:
        clock, helped_clock = DurableClock(store.backend), DurableClock(helped.backend)
        # new steps each repeat (see `_payloads.fresh`)
        found = alternate({"batched": lambda: paced(store, fresh_chat_steps(count),
                                                    "batched", clock),
                           PROCESS: lambda: paced(helped, fresh_chat_steps(count),
                                                  "batched", helped_clock),
                           "sync": lambda: paced(store, fresh_chat_steps(few), "sync",
                                                 clock)},
                          bench.size(2, 3), warmup=False)
    measures = {"batched: record() returned -> committed": ("batched", "durable"),
                "batched: record() on the caller": ("batched", "call"),
                f"{PROCESS}: record() returned -> committed": (PROCESS, "durable"),
                "sync: record() on the caller (commit included)": ("sync", "call")}
    stats: dict[str, dict[str, list[float]]] = {}
    for label, (variant, metric) in measures.items():
        runs = [repeat[metric] for repeat in found[variant]]
        stats[label] = {q: [percentile(r, float(q[1:])) * 1e3 for r in runs]
                        for q in ("p50", "p90", "p99")}
        stats[label]["max"] = [max(r) * 1e3 for r in runs]
    report.table("Latency per step (ms; medians over repeats)",
                 ["measure", "p50", "p90", "p99 (min / median)", "max"],
                 [[label, fmt(statistics.median(s["p50"])), fmt(statistics.median(s["p90"])),
                   f"{fmt(min(s['p99']))} / {fmt(statistics.median(s['p99']))}",
                   fmt(statistics.median(s["max"]))] for label, s in stats.items()])
    durable = stats["batched: record() returned -> committed"]
    helped_durable = stats[f"{PROCESS}: record() returned -> committed"]
    sync = stats["sync: record() on the caller (commit included)"]
    return [
        Target("Batched: enqueue to durable p99 at 1 step/ms", statistics.median(durable["p99"]),
               P99_LIMIT_MS, " ms"),
        Target('Batched, prepare="process": enqueue to durable p99 at 1 step/ms',
               statistics.median(helped_durable["p99"]), P99_LIMIT_MS, " ms"),
        Target("Sync mode: caller cost per step p50 (documented)", statistics.median(sync["p50"]),
               None, " ms", detail=f"p99 {fmt(statistics.median(sync['p99']))} ms, one commit "
                                   "per step"),
    ]
