"""JSONL file backend: one human-diffable file per run (also the export format).

A file holds, one JSON object per line::

    {"t": "run", "format": "agentreplay-jsonl", "format_version": 1, "run": {...}}
    {"t": "step", "run_id": ..., "step": 1, ..., "input": {...}, "output": {...}, ...}
    {"t": "status", "status": "incomplete"}   (a run whose recording process died)
    {"t": "finish", "status": "complete", "step_count": N, "head_checksum": ..., ...}

Lines are only ever appended (see `_jsonl`), so a killed process leaves a readable file: an
unfinished last line is ignored, and cut off before the next append. `FileBackend(path)` is a
directory of such files, or a single file when `path` ends in `.jsonl` (an exported run,
replayable with no database).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import orjson
from pydantic import BaseModel, ValidationError

from agentreplay_core._codec import canonical_bytes
from agentreplay_core._errors import RunNotFound, StoreError
from agentreplay_core._model import FORMAT_VERSION, Run, RunStatus, Step
from agentreplay_core._plural import counted
from agentreplay_core.stores import _jsonl as jsonl
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish, StoreBackend
from agentreplay_core.stores._memory import filter_runs, hex_prefix

log = logging.getLogger("agentreplay")

FORMAT_NAME = "agentreplay-jsonl"
M = TypeVar("M", bound=BaseModel)


def step_parts(step: PendingStep) -> tuple[bytes, ...]:
    """One step's JSONL line in pieces; input/output are spliced in as their canonical JSON.

    Joined once by the caller: concatenating them here would copy a big output twice.
    """
    head = orjson.dumps({
        "t": "step", "run_id": str(step.run_id), "step": step.step, "kind": step.kind,
        "name": step.name, "match_key": step.match_key, "path": step.path,
        "is_error": step.is_error, "started_at": step.started_at.isoformat(),
        "duration_ms": step.duration_ms, "checksum": step.checksum,
    })
    return head[:-1], b',"input":', step.input_json, b',"output":', step.output_json, b"}\n"


def step_line(step: PendingStep) -> bytes:
    """One step as a JSONL line."""
    return b"".join(step_parts(step))


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


def status_line(status: RunStatus) -> bytes:
    return orjson.dumps({"t": "status", "status": status.value}) + b"\n"


def finish_line(finish: RunFinish) -> bytes:
    return orjson.dumps({
        "t": "finish", "status": finish.status.value, "step_count": finish.step_count,
        "head_checksum": finish.head_checksum, "finished_at": finish.finished_at.isoformat(),
    }) + b"\n"


def _validated(model: type[M], data: Any, path: Path, number: int) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "record"
        raise StoreError(f"{path}: malformed run file: line {number}: {where}: {first['msg']}"
                         f" ({counted(exc.error_count(), 'problem')})") from None


def _own_step(step: Step, run: Run, path: Path, number: int) -> Step:
    # a step line is stored under the run id it names: one naming another run would add
    # rows to that run (an import of a damaged file) instead of this file's
    if step.run_id != run.run_id:
        raise StoreError(f"{path}: malformed run file: line {number}: a step of run "
                         f"{step.run_id} in the file of run {run.run_id}")
    return step


def parse_run(data: bytes, path: Path, *, with_steps: bool = True) -> tuple[Run, list[Step]]:
    """Parse the content of one run file, with clear errors for malformed or newer files.

    `with_steps=False` reads the run row only (step lines are not validated then). Every
    error is a `StoreError` naming the file and, for a bad line, its number.
    """
    run: Run | None = None
    steps: list[Step] = []
    number, kind = 0, None
    try:
        for number, record in jsonl.records(data, path):
            if not isinstance(record, dict) or "t" not in record:
                raise StoreError(f"{path}: line {number} is not an agentreplay record")
            kind = record["t"]
            if kind == "run":
                if run is not None:  # e.g. two exports concatenated: never one run
                    raise StoreError(f"{path}: line {number}: a second run header (run "
                                     f"{run.run_id} started earlier); a file holds one run")
                version = record.get("format_version")
                if record.get("format") != FORMAT_NAME or type(version) is not int:
                    raise StoreError(f"{path}: line {number}: not an agentreplay run file")
                if version > FORMAT_VERSION:
                    raise StoreError(f"{path}: written by a newer agentreplay (format "
                                     f"{version} > {FORMAT_VERSION}); upgrade agentreplay")
                run = _validated(Run, record["run"], path, number)
                if run.format_version > FORMAT_VERSION:
                    raise StoreError(f"{path}: run {run.run_id} was recorded by a newer "
                                     f"agentreplay (run format {run.format_version} > "
                                     f"{FORMAT_VERSION}); upgrade agentreplay")
            elif run is None:
                raise StoreError(f"{path}: no run header line before line {number}; "
                                 "is this an agentreplay export?")
            elif kind == "step":
                if with_steps:
                    record.pop("t")
                    steps.append(_own_step(_validated(Step, record, path, number), run, path,
                                           number))
            elif kind == "finish":
                run.status = RunStatus(record["status"])
                run.step_count = int(record["step_count"])
                run.head_checksum = record["head_checksum"]
                run.finished_at = datetime.fromisoformat(record["finished_at"])
            elif kind == "status":
                # only a run still recording changes (a seal already read wins), as when written
                if run.status == RunStatus.RECORDING:
                    run.status = RunStatus(record["status"])
            else:
                raise StoreError(f"{path}: line {number}: unexpected record {kind!r}")
    except StoreError:
        raise
    except KeyError as exc:
        raise StoreError(f"{path}: malformed run file: line {number}: the {kind!r} record "
                         f"lacks {exc}") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise StoreError(f"{path}: malformed run file: line {number}: {kind!r} record: "
                         f"{exc}") from None
    if run is None:
        raise StoreError(f"{path}: no run header line; is this an agentreplay export?")
    steps.sort(key=lambda s: s.step)
    return run, steps


def read_run_file(path: Path) -> tuple[Run, list[Step]]:
    """Parse one run file (see `parse_run`)."""
    return parse_run(path.read_bytes(), path)


def _step_numbers(data: bytes, path: Path) -> set[int]:
    return {int(r["step"]) for _, r in jsonl.records(data, path)
            if isinstance(r, dict) and r.get("t") == "step"}


class FileBackend(StoreBackend):
    """Runs as JSONL files in a directory, or one run in a single `.jsonl` file.

    Every write appends under an exclusive `flock` of the run file, so several processes may
    share a directory (a recorder, a spool flush, a reader marking dead runs).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.single = self.path.suffix == ".jsonl"
        self.description = f"file:{self.path}"
        if not self.single:
            self.path.mkdir(parents=True, exist_ok=True)

    def _file(self, run_id: UUID) -> Path:
        return self.path if self.single else self.path / f"{run_id}.jsonl"

    @contextmanager
    def _locked(self, run_id: UUID) -> Iterator[int]:
        """The run's file, locked; `RunNotFound` if there is none."""
        try:
            with jsonl.locked(self._file(run_id), create=False) as fd:
                yield fd
        except FileNotFoundError:
            raise RunNotFound(run_id) from None

    def create_run(self, run: Run) -> None:
        path = self._file(run.run_id)
        with jsonl.locked(path, create=True) as fd:
            jsonl.repair_tail(fd, path)  # a header torn at birth leaves an empty file
            if os.fstat(fd).st_size:
                if self.single and run.run_id != parse_run(
                        jsonl.read_all(fd), path, with_steps=False)[0].run_id:
                    raise StoreError(f"{path} already holds another run; use a directory")
                return
            jsonl.append(fd, run_line(run), path)

    def append(self, steps: Sequence[PendingStep], embeddings: Sequence[EmbeddingRow] = (),
               *, idempotent: bool = False) -> None:
        by_run: dict[UUID, list[PendingStep]] = {}
        for row in steps:
            by_run.setdefault(row.run_id, []).append(row)
        for run_id, rows in by_run.items():
            path = self._file(run_id)
            with self._locked(run_id) as fd:
                if idempotent:
                    have = _step_numbers(jsonl.read_all(fd), path)
                    rows = [r for r in rows if r.step not in have]
                if rows:
                    jsonl.append(fd, b"".join([p for r in rows for p in step_parts(r)]), path)

    def finish_run(self, finish: RunFinish) -> None:
        with self._locked(finish.run_id) as fd:
            jsonl.append(fd, finish_line(finish), self._file(finish.run_id))

    def mark_incomplete(self, run_id: UUID) -> bool:
        path = self._file(run_id)
        with self._locked(run_id) as fd:
            # read under the lock: a seal appended meanwhile (e.g. by a spool flush) wins
            run = self._own(parse_run(jsonl.read_all(fd), path, with_steps=False)[0], run_id)
            if run.status != RunStatus.RECORDING:
                return False
            jsonl.append(fd, status_line(RunStatus.INCOMPLETE), path)
            return True

    def _own(self, run: Run, run_id: UUID) -> Run:
        if run.run_id != run_id:
            raise RunNotFound(run_id, f"{self._file(run_id)} holds run {run.run_id}")
        return run

    def _read(self, run_id: UUID, *, with_steps: bool) -> tuple[Run, list[Step]]:
        path = self._file(run_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise RunNotFound(run_id) from None
        run, steps = parse_run(data, path, with_steps=with_steps)
        return self._own(run, run_id), steps

    def get_run(self, run_id: UUID) -> Run:
        return self._read(run_id, with_steps=False)[0]

    def load_steps(self, run_id: UUID) -> list[Step]:
        return self._read(run_id, with_steps=True)[1]

    def _all_files(self) -> list[Path]:
        if self.single:
            return [self.path] if self.path.exists() else []
        return sorted(self.path.glob("*.jsonl"))

    def list_runs(self, *, name: str | None = None, status: RunStatus | None = None,
                  since: datetime | None = None, limit: int | None = None,
                  tag: str | None = None, before: datetime | None = None) -> list[Run]:
        runs: list[Run] = []
        for path in self._all_files():
            try:
                runs.append(parse_run(path.read_bytes(), path, with_steps=False)[0])
            except FileNotFoundError:
                continue  # deleted since the directory was listed
            except (StoreError, OSError) as exc:
                if self.single:  # the file is the whole store: its problem is the answer
                    raise
                # one damaged file must not hide every other run; get_run on it still raises
                log.warning("file store %s: list_runs skips %s: %s", self.path, path.name,
                            str(exc).removeprefix(f"{path}: "))
        return filter_runs(runs, name, status, since, limit, tag, before)

    def replace_run(self, run: Run, steps: Sequence[PendingStep]) -> None:
        """Write `run` with exactly `steps` as a new file and swap it in for any stored run
        with its id (an import): a reader, or a process killed meanwhile, sees the old file
        or the new one, never part of it."""
        path = self._file(run.run_id)
        if self.single and path.exists():
            self._read(run.run_id, with_steps=False)  # RunNotFound: it holds another run
        # not named *.jsonl: listing the store must not see it
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        try:
            with open(partial, "wb") as out:
                out.write(run_line(run))
                for start in range(0, len(steps), 500):
                    out.write(b"".join(step_line(s) for s in steps[start:start + 500]))
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    def delete_run(self, run_id: UUID) -> None:
        self._file(run_id).unlink(missing_ok=True)

    def run_ids_like(self, prefix: str, limit: int = 5) -> list[UUID]:
        """Run ids starting with `prefix` (hex digits, dashes ignored), in id order."""
        digits = hex_prefix(prefix)
        if digits is None:
            return []
        if self.single:
            ids = [r.run_id for r in self.list_runs()]
        else:  # a directory names each file after its run: no file needs reading
            ids = []
            for path in self.path.glob("*.jsonl"):
                with contextlib.suppress(ValueError):
                    ids.append(UUID(path.stem))
        return sorted(i for i in ids if i.hex.startswith(digits))[:limit]
