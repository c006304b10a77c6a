"""A new process's first run: what starting up costs a process that records one short run.

Every other group measures a process that has been recording for a while. A CLI call, a
serverless function or a job that records one run pays, besides its steps, what a process
pays once: the connection, and compiling the secret screens' Hyperscan databases (~75 ms of
CPU for the default rules). Each sample here is a new Python process that opens the store and
records 100 new chat steps, timed from opening the store to the run sealed (all rows
durable), with its CPU: the compiled screens kept on disk by an earlier process (the default),
against that cache turned off (what every process paid before it existed) and an empty one
(the first process, which compiles and writes the files).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentreplay_core import open_store
from agentreplay_core._screen_cache import CACHE_ENV
from benchmarks._context import Bench
from benchmarks._db import fresh_store
from benchmarks._payloads import fresh_chat_steps
from benchmarks._report import Target, fmt
from benchmarks._timing import Sample, alternate

SCHEMA = "bench_startup"
STEPS = 100
ROOT = Path(__file__).resolve().parent.parent


def first_run(dsn: str, schema: str) -> dict[str, float]:
    """In the new process: seconds and CPU seconds from opening the store to the run sealed."""
    steps = fresh_chat_steps(STEPS)  # made before the clock starts
    c0, t0 = time.process_time(), time.perf_counter()
    store = open_store(dsn, schema=schema)
    with store.record(name="startup") as rec:
        for request, response in steps:
            rec.record("llm", "chat_model", request, response)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.close()
    return {"seconds": elapsed, "cpu": cpu}


def in_new_process(dsn: str, cache: str) -> dict[str, float]:
    env = {**os.environ, CACHE_ENV: cache}
    # an installed package has its bytecode compiled; a checkout run with this set would
    # compile every module from source in every sample (the warm-up run writes it instead)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, "-m", "benchmarks.startup", dsn, SCHEMA], env=env,
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=120)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def run(bench: Bench) -> list[Target]:
    report = bench.report
    report.heading("startup: a new process's first run",
                   f"Each sample a new process recording one run of {STEPS} new steps; "
                   "opened to sealed. The secret screens' compiled databases kept on disk "
                   f"(`{CACHE_ENV}`), not kept, or kept in an empty directory.")
    with fresh_store(bench.dsn, SCHEMA), tempfile.TemporaryDirectory() as scratch:
        warm = str(Path(scratch, "warm"))
        empties = itertools.count()
        found = alternate({
            "cache off": lambda: in_new_process(bench.dsn, ""),
            "cache empty": lambda: in_new_process(bench.dsn,
                                                  str(Path(scratch, f"empty-{next(empties)}"))),
            "cache warm": lambda: in_new_process(bench.dsn, warm),
        }, bench.size(3, 9))  # the warm-up run fills the warm cache
    samples = {name: Sample(tuple(r["seconds"] for r in runs)) for name, runs in found.items()}
    cpu = {name: Sample(tuple(r["cpu"] for r in runs)) for name, runs in found.items()}
    report.timing(f"A new process's first run of {STEPS} steps, opened to sealed", samples,
                  baseline="cache off", unit="ms", scale=1e3, per="run",
                  note="CPU of the process (median): " + "; ".join(
                      f"{name}: {fmt(s.median * 1e3)} ms" for name, s in cpu.items()))
    off, on = samples["cache off"].median, samples["cache warm"].median
    return [Target(
        f"Startup: a new process's first {STEPS}-step run, screen cache warm vs off "
        "(documented)", on / off, None,
        detail=f"{fmt(on * 1e3)} ms vs {fmt(off * 1e3)} ms; CPU "
               f"{fmt(cpu['cache warm'].median * 1e3)} ms vs "
               f"{fmt(cpu['cache off'].median * 1e3)} ms")]


if __name__ == "__main__":
    print(json.dumps(first_run(sys.argv[1], sys.argv[2])))
