"""JSONL file backend: one human-diffable file per run (also the export format).

A file holds, one JSON object per line::

    {"t": "run", "format": "agentreplay-jsonl", "format_version": 1, "run": {...}}
    {"t": "step", "run_id": ..., "step": 1, ..., "input": {...}, "output": {...}, ...}
    {"t": "finish", "status": "complete", "step_count": N, "head_checksum": ..., ...}

Lines are only ever appended, so a killed process leaves a readable file (a torn last line is
ignored). `FileBackend(path)` is a directory of such files, or a single file when `path` ends
in `.jsonl` (an exported run, replayable with no database).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import orjson
from pydantic import BaseModel, ValidationError

from agentreplay_core._codec import canonical_bytes, loads
from agentreplay_core._errors import RunNotFound, StoreError
from agentreplay_core._model import FORMAT_VERSION, Run, RunStatus, Step
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish, StoreBackend
from agentreplay_core.stores._memory import filter_runs

FORMAT_NAME = "agentreplay-jsonl"
M = TypeVar("M", bound=BaseModel)


def step_line(step: PendingStep) -> bytes:
    """One step as a JSONL line; input/output are spliced in as their canonical JSON."""
    head = orjson.dumps({
        "t": "step", "run_id": str(step.run_id), "step": step.step, "kind": step.kind,
        "name": step.name, "match_key": step.match_key, "path": step.path,
        "is_error": step.is_error, "started_at": step.started_at.isoformat(),
        "duration_ms": step.duration_ms, "checksum": step.checksum,
    })
    return head[:-1] + b',"input":' + step.input_json + b',"output":' + step.output_json + b"}\n"


def pending_from_step(step: Step) -> PendingStep:
    """The storable row of a loaded step (for export and import)."""
    return PendingStep(
        step.run_id, step.step, step.kind, step.name, step.match_key, step.path,
        canonical_bytes(step.input), canonical_bytes(step.output), step.is_error,
        step.started_at, step.duration_ms, step.checksum,
    )


def run_line(run: Run) -> bytes:
    return orjson.dumps({"t": "run", "format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                         "run": run.model_dump(mode="json")}) + b"\n"


def finish_line(finish: RunFinish) -> bytes:
    return orjson.dumps({
        "t": "finish", "status": finish.status.value, "step_count": finish.step_count,
        "head_checksum": finish.head_checksum, "finished_at": finish.finished_at.isoformat(),
    }) + b"\n"


def _parse_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    lines = path.read_bytes().split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = loads(line)
        except orjson.JSONDecodeError as exc:
            if number == len(lines) and not line.endswith(b"}"):
                return  # torn last line: the writer was killed mid-line
            raise StoreError(f"{path}: line {number} is not valid JSON ({exc})") from None
        if not isinstance(record, dict) or "t" not in record:
            raise StoreError(f"{path}: line {number} is not an agentreplay record")
        yield number, record


def _validated(model: type[M], data: Any, path: Path, number: int) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise StoreError(f"{path}: malformed run file: line {number}: {where}: {first['msg']}"
                         f" ({exc.error_count()} problem(s))") from None


def read_run_file(path: Path) -> tuple[Run, list[Step]]:
    """Parse one run file, with clear errors for malformed or newer-format files."""
    run: Run | None = None
    steps: list[Step] = []
    try:
        for number, record in _parse_lines(path):
            kind = record["t"]
            if kind == "run":
                version = record.get("format_version")
                if record.get("format") != FORMAT_NAME or not isinstance(version, int):
                    raise StoreError(f"{path}: not an agentreplay run file")
                if version > FORMAT_VERSION:
                    raise StoreError(f"{path}: written by a newer agentreplay (format "
                                     f"{version} > {FORMAT_VERSION}); upgrade agentreplay")
                run = _validated(Run, record["run"], path, number)
            elif run is None:
                raise StoreError(f"{path}: no run header line before line {number}; "
                                 "is this an agentreplay export?")
            elif kind == "step":
                record.pop("t")
                steps.append(_validated(Step, record, path, number))
            elif kind == "finish":
                run.status = RunStatus(record["status"])
                run.step_count = int(record["step_count"])
                run.head_checksum = record["head_checksum"]
                run.finished_at = datetime.fromisoformat(record["finished_at"])
            else:
                raise StoreError(f"{path}: line {number}: unexpected record {kind!r}")
    except StoreError:
        raise
    except (KeyError, ValueError, TypeError) as exc:
        raise StoreError(f"{path}: malformed run file ({exc})") from None
    if run is None:
        raise StoreError(f"{path}: no run header line; is this an agentreplay export?")
    steps.sort(key=lambda s: s.step)
    return run, steps


class FileBackend(StoreBackend):
    """Runs as JSONL files in a directory, or one run in a single `.jsonl` file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.single = self.path.suffix == ".jsonl"
        self.description = f"file:{self.path}"
        self._lock = threading.Lock()
        if not self.single:
            self.path.mkdir(parents=True, exist_ok=True)

    def _file(self, run_id: UUID) -> Path:
        return self.path if self.single else self.path / f"{run_id}.jsonl"

    def _append_bytes(self, path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def create_run(self, run: Run) -> None:
        with self._lock:
            path = self._file(run.run_id)
            if path.exists() and path.stat().st_size:
                if self.single and read_run_file(path)[0].run_id != run.run_id:
                    raise StoreError(f"{path} already holds another run; use a directory")
                return
            self._append_bytes(path, run_line(run))

    def append(self, steps: Sequence[PendingStep], embeddings: Sequence[EmbeddingRow] = (),
               *, idempotent: bool = False) -> None:
        by_run: dict[UUID, list[PendingStep]] = {}
        for row in steps:
            by_run.setdefault(row.run_id, []).append(row)
        with self._lock:
            for run_id, rows in by_run.items():
                path = self._file(run_id)
                if not path.exists():
                    raise RunNotFound(run_id)
                if idempotent:
                    have = {s.step for s in read_run_file(path)[1]}
                    rows = [r for r in rows if r.step not in have]
                self._append_bytes(path, b"".join(step_line(r) for r in rows))

    def finish_run(self, finish: RunFinish) -> None:
        with self._lock:
            path = self._file(finish.run_id)
            if not path.exists():
                raise RunNotFound(finish.run_id)
            self._append_bytes(path, finish_line(finish))

    def _read(self, run_id: UUID) -> tuple[Run, list[Step]]:
        path = self._file(run_id)
        if not path.exists():
            raise RunNotFound(run_id)
        run, steps = read_run_file(path)
        if run.run_id != run_id:
            raise RunNotFound(run_id, f"{path} holds run {run.run_id}")
        return run, steps

    def get_run(self, run_id: UUID) -> Run:
        return self._read(run_id)[0]

    def load_steps(self, run_id: UUID) -> list[Step]:
        return self._read(run_id)[1]

    def _all_files(self) -> list[Path]:
        if self.single:
            return [self.path] if self.path.exists() else []
        return sorted(self.path.glob("*.jsonl"))

    def list_runs(self, *, name: str | None = None, status: RunStatus | None = None,
                  since: datetime | None = None, limit: int | None = None) -> list[Run]:
        runs = [read_run_file(p)[0] for p in self._all_files()]
        return filter_runs(runs, name, status, since, limit)

    def set_status(self, run_id: UUID, status: RunStatus) -> None:
        run = self.get_run(run_id)
        with self._lock:
            self._append_bytes(self._file(run_id), finish_line(RunFinish(
                run_id, status, run.step_count, run.head_checksum,
                run.finished_at or run.started_at)))

    def delete_run(self, run_id: UUID) -> None:
        with self._lock:
            self._file(run_id).unlink(missing_ok=True)

    def run_ids_like(self, prefix: str, limit: int = 5) -> list[UUID]:
        return [r.run_id for r in self.list_runs() if str(r.run_id).startswith(prefix)][:limit]
