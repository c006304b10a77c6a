"""Recording cost against the seed design's recorder, in the same process and run.

    python -m benchmarks.bench_record [--steps N] [--repeats R]

Starts a throwaway PostgreSQL 16 (pgserver binaries, fsync on) and prints, for 2 KB-in /
1 KB-out steps: the caller-thread latency per recorded step and the sustained steps/s until
durable, for agentreplay's batched and sync modes and for the seed recorder (one autocommit
INSERT per step, SHA-256 of json.dumps computed in Python). Absolute times depend on the
machine and its disk that day; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from agentreplay_core import open_store
from tests.support.pgcluster import PgCluster, pgserver_bin_dir

REQUEST = {"messages": [{"role": "user", "content": "x" * 1900}], "model": "m",
           "temperature": 0.2}
RESPONSE = {"content": "y" * 950, "usage": {"in": 500, "out": 250}}


def seed_recorder(dsn: str, steps: int) -> tuple[float, float]:
    """(caller seconds per step, steps/s) of the seed design: INSERT + commit per step."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS seed_log (run_id uuid, step int, kind text, "
                     "input jsonb, output jsonb, checksum text, PRIMARY KEY (run_id, step))")
        run_id = uuid.uuid4()
        previous = ""
        t0 = time.perf_counter()
        for step in range(1, steps + 1):
            payload_in, payload_out = json.dumps(REQUEST), json.dumps(RESPONSE)
            previous = hashlib.sha256((previous + payload_in + payload_out).encode()).hexdigest()
            conn.execute("INSERT INTO seed_log VALUES (%s, %s, %s, %s, %s, %s)",
                         (run_id, step, "llm", payload_in, payload_out, previous))
        elapsed = time.perf_counter() - t0
    return elapsed / steps, steps / elapsed


def agentreplay_recorder(dsn: str, steps: int, durability: str) -> tuple[float, float]:
    """(caller seconds per step, steps/s until durable) of agentreplay."""
    with open_store(dsn, schema="bench") as store, \
            store.record(name="bench", durability=durability) as rec:
        t0 = time.perf_counter()
        for _ in range(steps):
            rec.record("llm", "m", REQUEST, RESPONSE)
        caller = time.perf_counter() - t0
        rec.flush(timeout=600)
        durable = time.perf_counter() - t0
    return caller / steps, steps / durable


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cluster = PgCluster(pgserver_bin_dir(), fsync=True)
    cluster.start()
    try:
        runners: dict[str, Callable[[], tuple[float, float]]] = {
            "seed (INSERT/step)": lambda: seed_recorder(cluster.dsn, args.steps),
            "agentreplay batched": lambda: agentreplay_recorder(cluster.dsn, args.steps,
                                                                "batched"),
            "agentreplay sync": lambda: agentreplay_recorder(cluster.dsn, args.steps, "sync"),
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
        for _ in range(args.repeats):  # interleaved, so drift hits every variant alike
            for name, runner in runners.items():
                results[name].append(runner())
    finally:
        cluster.destroy()
    seed_latency = statistics.median(r[0] for r in results["seed (INSERT/step)"])
    seed_rate = statistics.median(r[1] for r in results["seed (INSERT/step)"])
    print(f"{args.steps} steps x {args.repeats} repeats, 2 KB in / 1 KB out per step")
    print(f"{'variant':<22}{'caller us/step (min/med)':>28}{'steps/s (med)':>16}"
          f"{'latency vs seed':>18}{'rate vs seed':>15}")
    for name, rows in results.items():
        latencies = [r[0] * 1e6 for r in rows]
        rate = statistics.median(r[1] for r in rows)
        row: dict[str, Any] = {
            "lat": f"{min(latencies):.1f}/{statistics.median(latencies):.1f}",
            "lx": seed_latency * 1e6 / statistics.median(latencies),
            "rx": rate / seed_rate,
        }
        print(f"{name:<22}{row['lat']:>28}{rate:>16.0f}{row['lx']:>17.1f}x{row['rx']:>14.1f}x")


if __name__ == "__main__":
    main()
