"""Tables and targets: printed with rich as the run goes, and kept as Markdown for
benchmarks/RESULTS.md (`--markdown FILE`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from benchmarks._timing import Cpu, Sample

_STATUS_STYLE = {"PASS": "green", "MISS": "bold red", "INFO": "cyan", "N/A": "yellow"}


def fmt(value: float) -> str:
    """Three significant figures or so, with thousands separators."""
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3g}"


def cpu_text(cpu: Cpu) -> str:
    """"this process / the server" in us ("?" where the server's is unknown)."""
    server = "?" if cpu.server is None else f"{fmt(cpu.server * 1e6)} us"
    return f"{fmt(cpu.process * 1e6)} us / {server}"


@dataclass
class Target:
    """One target of the issue: a measured value against its limit.

    `limit` None makes it informational (a cost documented, nothing to meet); `value` None
    means it could not be measured here (said in `detail`).
    """

    name: str
    value: float | None
    limit: float | None
    unit: str = "x"
    higher_is_better: bool = False
    detail: str = ""

    @property
    def status(self) -> str:
        if self.limit is None:
            return "INFO"
        if self.value is None:
            return "N/A"
        met = self.value >= self.limit if self.higher_is_better else self.value <= self.limit
        return "PASS" if met else "MISS"

    @property
    def measured(self) -> str:
        return "-" if self.value is None else f"{fmt(self.value)}{self.unit}"

    @property
    def wanted(self) -> str:
        if self.limit is None:
            return "-"
        return f"{'>=' if self.higher_is_better else '<='} {fmt(self.limit)}{self.unit}"


class Report:
    """Prints each table as it comes and remembers it as Markdown."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.targets: list[Target] = []
        self._markdown: list[str] = []

    def heading(self, title: str, text: str = "") -> None:
        # the machine is shared: how busy it was says how far to trust absolute times
        text = f"{text}\n\nLoad average (1 min) at start: {os.getloadavg()[0]:.1f}.".strip()
        self.console.rule(f"[bold]{title}")
        self.console.print(text)
        self._markdown += [f"## {title}", "", text, ""]

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]],
              note: str = "") -> None:
        table = Table(title=title, title_justify="left")
        for i, column in enumerate(columns):
            table.add_column(column, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        self.console.print(table)
        if note:
            self.console.print(f"[dim]{note}")
        self._markdown += [f"**{title}**", "", "| " + " | ".join(columns) + " |",
                           "| " + " | ".join(["---"] + ["---:"] * (len(columns) - 1)) + " |"]
        self._markdown += ["| " + " | ".join(row) + " |" for row in rows]
        self._markdown += ["", *([note, ""] if note else [])]

    def timing(self, title: str, samples: Mapping[str, Sample], *, baseline: str,
               unit: str = "us", scale: float = 1e6, per: str = "step",
               rate: bool = False, note: str = "") -> None:
        """The standard table: min and median per unit, and the ratio of medians."""
        columns = ["variant", f"min {unit}/{per}", f"median {unit}/{per}"]
        if rate:
            columns.append(f"{per}s/s (median)")
        columns.append(f"ratio vs {baseline}")
        rows = []
        for name, sample in samples.items():
            row = [name, fmt(sample.min * scale), fmt(sample.median * scale)]
            if rate:
                row.append(fmt(1 / sample.median))
            row.append(f"{sample.median / samples[baseline].median:.2f}x")
            rows.append(row)
        self.table(title, columns, rows, note)

    def add(self, *targets: Target) -> None:
        self.targets.extend(targets)
        for t in targets:
            style = _STATUS_STYLE[t.status]
            self.console.print(f"[{style}]{t.status}[/] {t.name}: {t.measured} "
                               f"(target {t.wanted}) {t.detail}")

    def summary(self) -> None:
        table = Table(title="Targets", title_justify="left")
        for column in ("target", "measured", "target value", "result"):
            table.add_column(column)
        rows = [[t.name + (f" ({t.detail})" if t.detail else ""), t.measured, t.wanted,
                 t.status] for t in self.targets]
        for row in rows:
            table.add_row(*row[:3], f"[{_STATUS_STYLE[row[3]]}]{row[3]}")
        self.console.rule("[bold]Summary")
        self.console.print(table)
        counts = {s: sum(t.status == s for t in self.targets) for s in _STATUS_STYLE}
        line = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        self.console.print(line)
        self._markdown += ["## Summary", "", "| target | measured | target value | result |",
                           "| --- | ---: | ---: | --- |"]
        self._markdown += ["| " + " | ".join(row) + " |" for row in rows]
        self._markdown += ["", line, ""]

    def markdown(self) -> str:
        return "\n".join(self._markdown)
