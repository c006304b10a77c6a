"""What every benchmark group gets: the database, the report and the run's sizes."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks._report import Report


@dataclass
class Bench:
    dsn: str
    report: Report
    quick: bool
    #: the data directory of the private cluster the benchmark started (None with
    #: `AGENTREPLAY_DSN`): how the server's CPU is found (`_timing.server_cpu`)
    data_dir: str | None = None

    def size(self, quick: int, full: int) -> int:
        """`quick` in --quick mode (the whole run under a minute), else `full`."""
        return quick if self.quick else full

    @property
    def repeats(self) -> int:
        """Repeats of the benchmarks made of short blocks (tens of ms): many, so that the
        median stays clear of the bursts of load on a shared machine. Heavy ones choose
        fewer."""
        return self.size(7, 25)
