"""Recording cost per step against the length of the run: 100, 10,000 and 100,000 steps.

Per step: the wall time of the whole run, from opening `store.record` to the run sealed (all
rows durable), divided by its steps; and the caller's share (the `record` calls alone, which
the bounded queue throttles once the writer falls behind). Every run starts from an empty
`run_log` so that longer runs do not make later ones write into a bigger table, and every
step recorded is new to the recorder (`_payloads.fresh`): runs of 100 steps that recorded the
same 100 steps again would find their text in the redactor's memo, which an agent's new text
never is, and so look cheaper than they are.
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass, field

from agentreplay_core import Store
from benchmarks._context import Bench
from benchmarks._db import fresh_store, truncate
from benchmarks._payloads import fresh_chat_steps
from benchmarks._report import Target, cpu_text, fmt
from benchmarks._timing import Cpu, interleave, median_cpu, with_cpu

SCHEMA = "bench_scaling"
FLAT = 1.25  # largest per-step cost over the smallest


@dataclass
class Shares:
    """Per step, for one run length: the caller's share of the time, and the CPU."""

    caller: list[float] = field(default_factory=list)
    cpu: list[Cpu] = field(default_factory=list)


def recorded(bench: Bench, store: Store, length: int, runs: int, shares: Shares) -> float:
    """Seconds per step of `runs` whole runs of `length` steps each, one after the other,
    each step new to the recorder (`fresh`); adds the caller's share and the CPU to
    `shares`."""
    truncate(bench.dsn, SCHEMA, "run_log", "runs")
    steps = fresh_chat_steps(runs * length)  # made before the clock starts

    def record_all() -> tuple[float, float]:
        """(seconds in all, seconds in the `record` calls)"""
        in_calls = 0.0
        t0 = time.perf_counter()
        for first in range(0, len(steps), length):
            with store.record(name=f"scaling-{length}") as rec:
                t1 = time.perf_counter()
                for request, response in steps[first:first + length]:
                    rec.record("llm", "chat_model", request, response)
                in_calls += time.perf_counter() - t1
        return time.perf_counter() - t0, in_calls

    (elapsed, in_calls), used = with_cpu(bench.data_dir, record_all, len(steps))
    shares.caller.append(in_calls / len(steps))
    shares.cpu.append(used)
    return elapsed / len(steps)


def run(bench: Bench) -> list[Target]:
    report = bench.report
    lengths = (100, 1_000, 5_000) if bench.quick else (100, 10_000, 100_000)
    # short runs are measured as many runs in a row, at least as many steps as the middle
    # length: long enough to time, and their per-run costs (open, seal) are counted
    runs = {n: max(1, lengths[1] // n) for n in lengths}
    report.heading("scaling: cost per step against run length",
                   "; ".join(f"{runs[n]:,} run(s) of {n:,} steps" for n in lengths) +
                   " per measurement.")
    shares = {n: Shares() for n in lengths}
    with fresh_store(bench.dsn, SCHEMA) as store:
        recorded(bench, store, 100, 1, Shares())  # connections and caches, not measured
        samples = interleave({f"{n:,} steps": functools.partial(
            recorded, bench, store, n, runs[n], shares[n]) for n in lengths},
            bench.size(2, 3), warmup=False)
    middle = f"{lengths[1]:,} steps"
    cpu = {n: median_cpu(s.cpu) for n, s in shares.items()}
    report.timing("Recording cost per step, run opened to sealed", samples, baseline=middle,
                  rate=True, note="Per step (median), the caller's share of the time; the CPU "
                  "of this process / the server: " + "; ".join(
                      f"{n:,}: {fmt(statistics.median(s.caller) * 1e6)} us; {cpu_text(cpu[n])}"
                      for n, s in shares.items()))
    process = {n: c.process for n, c in cpu.items()}
    medians = [s.median for s in samples.values()]
    return [
        Target(f"Scaling: per-step cost, largest/smallest over {lengths[0]:,} to "
               f"{lengths[-1]:,} steps", max(medians) / min(medians), FLAT,
               detail=", ".join(f"{name}: {fmt(s.median * 1e6)} us"
                                for name, s in samples.items())),
        # what the time leaves out: a short run's waits (round trips, the commit's flush to
        # disk) cost no CPU, but the work done for each run does
        Target("Scaling: this process's CPU per step, largest/smallest (documented)",
               max(process.values()) / min(process.values()), None,
               detail=", ".join(f"{n:,} steps: {fmt(c * 1e6)} us" for n, c in process.items())),
    ]
