"""agentreplay against its baselines, in the same process and run, printed as ratios.

    python -m benchmarks [--quick] [--only NAME ...] [--markdown FILE]

Starts a private PostgreSQL 16 + pgvector (pgserver's binaries, fsync on) in a temporary
directory, or uses AGENTREPLAY_DSN, runs each benchmark group with interleaved repeats and
prints a table per benchmark (baseline, agentreplay, ratio of medians) and a PASS/MISS line
per target of issue 7. Absolute times depend on the machine and its load that day; the
ratios are what to compare. Not part of the test suite: `nox -s bench` runs it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from benchmarks._context import Bench
from benchmarks._db import bench_database, server_description
from benchmarks._report import Report, Target

#: the groups, in the order they run (each is benchmarks/<name>.py with `run(bench)`)
GROUPS = ("record_caller", "throughput", "latency", "replay", "load_verify", "embeddings",
          "storage", "scaling", "startup")


def machine_description(dsn: str, data_dir: str | None) -> list[str]:
    cpu = next((line.split(":", 1)[1].strip() for line in _lines("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor() or "unknown CPU")
    mem = next((line.split()[1] for line in _lines("/proc/meminfo")
                if line.startswith("MemTotal")), "0")
    versions = ", ".join(f"{p} {_version(p)}" for p in (
        "langchain-core", "llama-index-core", "psycopg", "orjson", "hyperscan", "pgserver"))
    return [
        f"CPU: {os.cpu_count()} cores, {cpu}; RAM {int(mem) / 2**20:.1f} GiB",
        f"Python {platform.python_version()} on {platform.platform()}",
        f"{server_description(dsn)}; " + (f"data in {data_dir} ({_filesystem(data_dir)})"
                                          if data_dir else "AGENTREPLAY_DSN"),
        f"Packages: {versions}",
    ]


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _filesystem(path: str) -> str:
    """The device and filesystem type holding `path`, from /proc/mounts."""
    best = ("", "unknown device", "unknown filesystem")
    for line in _lines("/proc/mounts"):
        device, mount, kind = line.split()[:3]
        if path.startswith(mount) and len(mount) >= len(best[0]):
            best = (mount, device, kind)
    return f"{best[1]}, {best[2]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="few repeats and small sizes (under a minute)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help=f"run only these groups (repeatable or comma-separated): "
                             f"{', '.join(GROUPS)}")
    parser.add_argument("--markdown", type=Path, metavar="FILE",
                        help="also write the machine, the tables and the summary as Markdown")
    args = parser.parse_args(argv)
    only = [name for text in args.only for name in text.split(",") if name]
    unknown = sorted(set(only) - set(GROUPS))
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    console = Console(width=max(Console().width, 120))
    report = Report(console)
    started = time.perf_counter()
    with bench_database() as (dsn, data_dir):
        machine = machine_description(dsn, data_dir)
        report.heading(f"Machine ({'quick' if args.quick else 'full'} run)",
                       "\n".join(f"- {line}" for line in machine))
        bench = Bench(dsn, report, args.quick, data_dir)
        for name in only or GROUPS:
            group: Callable[[Bench], list[Target]] = importlib.import_module(
                f"benchmarks.{name}").run
            report.add(*group(bench))
    report.summary()
    console.print(f"total {time.perf_counter() - started:.0f} s")
    if args.markdown:
        args.markdown.write_text(report.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
