"""Local spool: where rows go when the database cannot take them, until `flush_spool` loads them.

One append-only JSONL file per run (`<run_id>.jsonl`), each line one of::

    {"t": "run", "run": {...}}                       the run header
    {"t": "rows", "steps": [...], "embeddings": [...]}   a batch of steps
    {"t": "finish", ...}                             the run's seal

Lines are written whole and fsynced; a torn last line (process killed mid-write) is ignored.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from uuid import UUID

import orjson
import platformdirs

from agentreplay_core._model import Run, RunStatus
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish, StoreBackend

log = logging.getLogger("agentreplay")

SPOOL_ENV = "AGENTREPLAY_SPOOL_DIR"


def default_spool_dir() -> Path:
    configured = os.environ.get(SPOOL_ENV)
    if configured:
        return Path(configured)
    return Path(platformdirs.user_cache_dir("agentreplay")) / "spool"


def _step_to_json(step: PendingStep) -> dict[str, object]:
    return {
        "run_id": str(step.run_id), "step": step.step, "kind": step.kind, "name": step.name,
        "match_key": step.match_key, "path": step.path,
        "input": base64.b64encode(step.input_json).decode(),
        "output": base64.b64encode(step.output_json).decode(),
        "is_error": step.is_error, "started_at": step.started_at.isoformat(),
        "duration_ms": step.duration_ms, "checksum": step.checksum,
    }


def _step_from_json(data: dict[str, object]) -> PendingStep:
    return PendingStep(
        run_id=UUID(str(data["run_id"])), step=int(str(data["step"])), kind=str(data["kind"]),
        name=str(data["name"]), match_key=str(data["match_key"]), path=str(data["path"]),
        input_json=base64.b64decode(str(data["input"])),
        output_json=base64.b64decode(str(data["output"])),
        is_error=bool(data["is_error"]),
        started_at=datetime.fromisoformat(str(data["started_at"])),
        duration_ms=float(str(data["duration_ms"])), checksum=str(data["checksum"]),
    )


class Spool:
    """Append-only spool files in one directory."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = Path(directory) if directory else default_spool_dir()
        self._lock = threading.Lock()

    def _file(self, run_id: UUID) -> Path:
        return self.directory / f"{run_id}.jsonl"

    def _append(self, run_id: UUID, record: dict[str, object]) -> None:
        line = orjson.dumps(record) + b"\n"
        path = self._file(run_id)
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX)
                # A flush in another process may have renamed the file between open and lock:
                # write only into the file that still carries the live name.
                try:
                    same = os.fstat(fd).st_ino == os.stat(path).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
                os.close(fd)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    def write_run(self, run: Run) -> None:
        self._append(run.run_id, {"t": "run", "run": run.model_dump(mode="json")})

    def write_rows(self, steps: Sequence[PendingStep], embeddings: Sequence[EmbeddingRow]) -> None:
        by_run: dict[UUID, list[PendingStep]] = {}
        for step in steps:
            by_run.setdefault(step.run_id, []).append(step)
        for run_id, run_steps in by_run.items():
            vectors = [
                {"step": e.step, "position": e.position, "vector": e.vector}
                for e in embeddings if e.run_id == run_id
            ]
            self._append(run_id, {"t": "rows", "steps": [_step_to_json(s) for s in run_steps],
                                  "embeddings": vectors})

    def write_finish(self, finish: RunFinish) -> None:
        self._append(finish.run_id, {
            "t": "finish", "status": finish.status.value, "step_count": finish.step_count,
            "head_checksum": finish.head_checksum, "finished_at": finish.finished_at.isoformat(),
        })

    def pending(self) -> list[UUID]:
        """Run ids that have spooled rows waiting."""
        if not self.directory.is_dir():
            return []
        ids: set[UUID] = set()
        for path in self.directory.iterdir():
            stem = path.name.split(".", 1)[0]
            if path.name.endswith((".jsonl", ".jsonl.loading")):
                try:
                    ids.add(UUID(stem))
                except ValueError:
                    continue
        return sorted(ids, key=str)

    def _records(self, path: Path) -> Iterator[dict[str, object]]:
        raw = path.read_bytes()
        lines = raw.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                if number >= len(lines) - 1:  # torn last line: the write never completed
                    log.warning("spool %s: ignoring a torn last line", path)
                    return
                raise

    def load_into(self, backend: StoreBackend, run_id: UUID) -> int:
        """Load one run's spooled rows into `backend` (idempotently); returns steps loaded.

        The file is renamed before loading, so a recorder still spooling into it starts a new
        file instead of racing with the load; a crash mid-load leaves the renamed file for the
        next flush, and loading twice is harmless.
        """
        live = self._file(run_id)
        loading = live.with_name(live.name + ".loading")
        count = 0
        if not loading.exists() and live.exists():
            with self._lock:
                fd = os.open(live, os.O_RDONLY)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    live.rename(loading)
                finally:
                    os.close(fd)
        if loading.exists():
            count = self._load_file(backend, run_id, loading)
            loading.unlink()
        return count

    def _load_file(self, backend: StoreBackend, run_id: UUID, path: Path) -> int:
        count = 0
        for record in self._records(path):
            kind = record.get("t")
            if kind == "run":
                backend.create_run(Run.model_validate(record["run"]))
            elif kind == "rows":
                steps = [_step_from_json(s) for s in record["steps"]]  # type: ignore[attr-defined]
                vectors = [
                    EmbeddingRow(run_id, int(e["step"]), int(e["position"]), list(e["vector"]))
                    for e in record["embeddings"]  # type: ignore[attr-defined]
                ]
                backend.append(steps, vectors, idempotent=True)
                count += len(steps)
            elif kind == "finish":
                backend.finish_run(RunFinish(
                    run_id=run_id, status=RunStatus(str(record["status"])),
                    step_count=int(str(record["step_count"])),
                    head_checksum=record["head_checksum"]  # type: ignore[arg-type]
                    if record["head_checksum"] is not None else None,
                    finished_at=datetime.fromisoformat(str(record["finished_at"])),
                ))
        return count

    def flush(self, backend: StoreBackend) -> dict[UUID, int]:
        """Load every spooled run into `backend`; files are removed once loaded."""
        loaded: dict[UUID, int] = {}
        for run_id in self.pending():
            loaded[run_id] = self.load_into(backend, run_id)
        return loaded

    def discard(self, run_id: UUID) -> None:
        self._file(run_id).unlink(missing_ok=True)
