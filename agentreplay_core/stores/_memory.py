"""In-memory backend: for tests and short-lived scripts (nothing survives the process)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from agentreplay_core._codec import loads
from agentreplay_core._errors import RunNotFound, StoreError
from agentreplay_core._model import Run, RunStatus, Step, loaded_step
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish, StoreBackend


def step_from_pending(row: PendingStep) -> Step:
    """A loaded `Step` from a stored row (parsing the JSON exactly as other backends do)."""
    return loaded_step(row.run_id, row.step, row.kind, row.name, row.match_key, row.path,
                       loads(row.input_json), loads(row.output_json), row.is_error,
                       row.started_at, row.duration_ms, row.checksum)


def filter_runs(
    runs: Sequence[Run], name: str | None, status: RunStatus | None, since: datetime | None,
    limit: int | None, tag: str | None = None, before: datetime | None = None,
) -> list[Run]:
    """The `list_runs` semantics shared by the non-SQL backends: newest first."""
    selected = [
        r for r in runs
        if (name is None or r.name == name)
        and (status is None or r.status == status)
        and (since is None or r.started_at >= since)
        and (before is None or r.started_at < before)
        and (tag is None or _has_tag(r, tag))
    ]
    selected.sort(key=lambda r: r.started_at, reverse=True)
    return selected[:limit] if limit is not None else selected


def _has_tag(run: Run, tag: str) -> bool:
    tags = run.metadata.get("tags")
    return isinstance(tags, list) and tag in tags


def hex_prefix(prefix: str) -> str | None:
    """A run id prefix as lower-case hex digits without dashes; None if it is not one."""
    digits = prefix.strip().lower().replace("-", "")
    return digits if len(digits) <= 32 and all(c in "0123456789abcdef" for c in digits) else None


class MemoryBackend(StoreBackend):
    description = "memory:"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[UUID, Run] = {}
        self._steps: dict[UUID, dict[int, PendingStep]] = {}

    def create_run(self, run: Run) -> None:
        with self._lock:
            self._runs.setdefault(run.run_id, run.model_copy(deep=True))
            self._steps.setdefault(run.run_id, {})

    def append(self, steps: Sequence[PendingStep], embeddings: Sequence[EmbeddingRow] = (),
               *, idempotent: bool = False) -> None:
        with self._lock:
            if not idempotent:
                for row in steps:
                    if row.step in self._steps.get(row.run_id, {}):
                        raise StoreError(f"run {row.run_id} already has step {row.step}")
            for row in steps:
                self._steps.setdefault(row.run_id, {}).setdefault(row.step, row)

    def finish_run(self, finish: RunFinish) -> None:
        with self._lock:
            run = self._get(finish.run_id)
            run.status = finish.status
            run.step_count = finish.step_count
            run.head_checksum = finish.head_checksum
            run.finished_at = finish.finished_at

    def _get(self, run_id: UUID) -> Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFound(run_id) from None

    def get_run(self, run_id: UUID) -> Run:
        with self._lock:
            return self._get(run_id).model_copy(deep=True)

    def list_runs(self, *, name: str | None = None, status: RunStatus | None = None,
                  since: datetime | None = None, limit: int | None = None,
                  tag: str | None = None, before: datetime | None = None) -> list[Run]:
        with self._lock:
            runs = [r.model_copy(deep=True) for r in self._runs.values()]
        return filter_runs(runs, name, status, since, limit, tag, before)

    def load_steps(self, run_id: UUID) -> list[Step]:
        with self._lock:
            self._get(run_id)
            rows = sorted(self._steps.get(run_id, {}).values(), key=lambda r: r.step)
        return [step_from_pending(r) for r in rows]

    def mark_incomplete(self, run_id: UUID) -> bool:
        with self._lock:
            run = self._get(run_id)
            if run.status != RunStatus.RECORDING:
                return False
            run.status = RunStatus.INCOMPLETE
            return True

    def replace_run(self, run: Run, steps: Sequence[PendingStep]) -> None:
        """Store `run` with exactly `steps`, in place of any stored run with its id, at once
        (an import: no reader ever sees part of it)."""
        rows = {row.step: row for row in steps}
        with self._lock:
            self._runs[run.run_id] = run.model_copy(deep=True)
            self._steps[run.run_id] = rows

    def delete_run(self, run_id: UUID) -> None:
        with self._lock:
            self._runs.pop(run_id, None)
            self._steps.pop(run_id, None)

    def run_ids_like(self, prefix: str, limit: int = 5) -> list[UUID]:
        """Run ids starting with `prefix` (hex digits, dashes ignored), in id order."""
        digits = hex_prefix(prefix)
        if digits is None:
            return []
        with self._lock:
            return sorted(r for r in self._runs if r.hex.startswith(digits))[:limit]
