"""Interleaved repeats: every variant runs once per repeat, so drift on a shared, noisy
machine hits baseline and candidate alike; results are compared as ratios of medians."""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Sample:
    """One quantity measured once per repeat (seconds per unit unless said otherwise)."""

    values: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def max(self) -> float:
        return max(self.values)


def alternate(variants: Mapping[str, Callable[[], T]], repeats: int, *,
              warmup: bool = True) -> dict[str, list[T]]:
    """Run each variant once per repeat and collect what each run returns.

    The order rotates every repeat (A B, then B A), so neither variant always runs right after
    the other's leftovers (a writer's backlog, a warm cache). A collection of the cyclic GC
    runs before each measurement, outside it, so no variant pays for another's garbage.
    """
    names = list(variants)
    if warmup:  # imports, caches, first connections: paid once, not measured
        for name in names:
            variants[name]()
    values: dict[str, list[T]] = {name: [] for name in names}
    for repeat in range(repeats):
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            values[name].append(variants[name]())
    return values


def interleave(variants: Mapping[str, Callable[[], float]], repeats: int, *,
               warmup: bool = True) -> dict[str, Sample]:
    """`alternate` for variants that each return one number (seconds per unit, mostly)."""
    found = alternate(variants, repeats, warmup=warmup)
    return {name: Sample(tuple(values)) for name, values in found.items()}


def per_unit(action: Callable[[], object], units: int) -> float:
    """Seconds per unit of one call of `action`, which does `units` units of work."""
    t0 = time.perf_counter()
    action()
    return (time.perf_counter() - t0) / units


def ratio(candidate: Sample, baseline: Sample) -> float:
    """Candidate over baseline, medians (above 1: the candidate takes longer)."""
    return candidate.median / baseline.median


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile `q` (0-100) of `values`."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def pace(count: int, interval: float, action: Callable[[int], None]) -> None:
    """Call `action(i)` for i in 0..count-1, call i at `i * interval` seconds from the start.

    An open loop: after a stall the late calls run back to back until the schedule is met
    again, as steps of agents that do not wait for the recorder would arrive.
    """
    start = time.perf_counter()
    for i in range(count):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        action(i)


def _stat(pid: int | str) -> list[str]:
    """The fields of /proc/`pid`/stat after the command name (state, ppid, ...)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def process_cpu(pid: int | str, *, reaped: bool = False) -> float:
    """CPU seconds (user and system) process `pid` has used so far (Linux: /proc); with
    `reaped`, also that of its children that have exited and been waited for."""
    return _ticks(pid, reaped=reaped) / os.sysconf("SC_CLK_TCK")


def _ticks(pid: int | str, *, reaped: bool = False) -> int:
    fields = _stat(pid)
    return sum(int(f) for f in fields[11:15 if reaped else 13])


def server_cpu(data_dir: str | None) -> float | None:
    """CPU seconds the PostgreSQL server whose data is in `data_dir` has used so far: its
    postmaster and every process it started (backends, WAL writer, checkpointer). None for
    a server the benchmark did not start (`AGENTREPLAY_DSN`: it may not be on this machine)
    or where /proc cannot tell. In clock ticks (10 ms): measure thousands of steps.

    A backend that has exited counts through the postmaster, which waited for it: without
    that, a connection closed between two readings took its CPU out of the second."""
    if data_dir is None:
        return None
    try:
        postmaster = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
        # summed in whole ticks: float sums in another order could make a later reading
        # smaller by a rounding error
        total = _ticks(postmaster, reaped=True)
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if int(_stat(proc.name)[1]) == postmaster:
                    total += _ticks(proc.name)
            except (OSError, ValueError, IndexError):  # exited meanwhile
                continue
        return total / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Cpu:
    """CPU seconds per unit of work of this process and of the server (None: unknown)."""

    process: float
    server: float | None


def with_cpu(data_dir: str | None, action: Callable[[], T], units: int) -> tuple[T, Cpu]:
    """What `action` returns, and the CPU per unit (of `units`) it cost this process and the
    server whose data is in `data_dir` (`server_cpu`)."""
    c0, s0 = time.process_time(), server_cpu(data_dir)
    result = action()
    c1, s1 = time.process_time(), server_cpu(data_dir)
    return result, Cpu((c1 - c0) / units,
                       None if s0 is None or s1 is None else (s1 - s0) / units)


def median_cpu(samples: Sequence[Cpu]) -> Cpu:
    """The medians of `samples`, the server's over the samples that know it."""
    known = [c.server for c in samples if c.server is not None]
    return Cpu(statistics.median(c.process for c in samples),
               statistics.median(known) if known else None)
