"""Rows to and from the PostgreSQL tables: column values, vectors, loaded runs and steps."""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from agentreplay_core import _codec
from agentreplay_core._model import Run, RunStatus, Step
from agentreplay_core.stores import _sql
from agentreplay_core.stores._backend import PendingStep

__all__ = [
    "MAX_VECTOR_DIMS",
    "gc_paused",
    "run_from_row",
    "step_from_row",
    "step_values",
    "vector_text",
]

MAX_VECTOR_DIMS = 16_000  # pgvector's limit for the `vector` type
_FLOAT32_MAX = 3.4028234663852886e38


def vector_text(vector: Sequence[float]) -> str | None:
    """pgvector's text form of `vector`, or None if pgvector cannot hold it."""
    values = [float(x) for x in vector]
    if not 1 <= len(values) <= MAX_VECTOR_DIMS:
        return None
    if not all(math.isfinite(x) and abs(x) <= _FLOAT32_MAX for x in values):
        return None
    return "[" + ",".join(map(repr, values)) + "]"


def step_values(s: PendingStep) -> tuple[Any, ...]:
    """A step's column values, in `STEP_COLUMNS` order."""
    return (
        s.run_id, s.step, s.kind, s.name, s.match_key, s.path,
        s.input_json.decode(), s.output_json.decode(), s.is_error,
        s.started_at, s.duration_ms, s.checksum,
    )  # fmt: skip


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off the cyclic GC while building many acyclic rows and JSON trees.

    Each collection would rescan every object made so far: for 10,000 steps of 2 KB the pause
    cuts load time by about a third. Re-enabled only if it was enabled, so a host's own
    setting stands.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_from_row(row: tuple[Any, ...]) -> Run:
    values = dict(zip(_sql.RUN_COLUMNS, row, strict=True))
    values["metadata"] = _codec.loads(values["metadata"])
    values["status"] = RunStatus(values["status"])
    return Run(**values)


def step_from_row(r: tuple[Any, ...]) -> Step:
    loads = _codec.loads
    return Step(
        run_id=r[0], step=r[1], kind=r[2], name=r[3], match_key=r[4], path=r[5],
        input=loads(r[6]), output=loads(r[7]), is_error=r[8], started_at=r[9],
        duration_ms=r[10], checksum=r[11],
    )  # fmt: skip
