"""Moving one run between stores as a file: `export_run` and `import_run`.

An export is a single-file store in the JSONL format of `stores._file` (a header line with the
run as stored, then one line per step, input and output in their canonical JSON), so
`open_store("file:run.jsonl")` replays and verifies it with no database. Rows keep their
checksums: a run verifies after the move exactly as it did before. Usage::

    export_run(pg_store, run_id, "bug-123.jsonl")
    import_run(other_store, "bug-123.jsonl")   # raises StoreError if the run is already there
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from agentreplay_core._delta import DeltaEncoder
from agentreplay_core._errors import IntegrityError, RunNotFound, StoreError
from agentreplay_core._integrity import VerifyReport
from agentreplay_core._model import Run, RunStatus, Step
from agentreplay_core._store import Store
from agentreplay_core._vectors import step_vectors
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish, StoreBackend
from agentreplay_core.stores._file import parse_run, pending_from_step, run_line, step_line

if TYPE_CHECKING:
    from agentreplay_core.stores._postgres import PostgresBackend

__all__ = ["ExportResult", "ImportResult", "MalformedExport", "RunExists", "embedding_rows",
           "export_run", "import_run", "read_export"]

#: called with (steps done, steps in all) as a transfer proceeds
Progress = Callable[[int, int], None]
#: steps written per batch (one COPY transaction per batch into PostgreSQL)
BATCH = 500
#: how compressed copies of an export start (bug reports are often sent zipped)
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"PK\x03\x04", "zip"), (b"\x28\xb5\x2f\xfd", "zstd"),
               (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"))


class MalformedExport(StoreError):
    """The file is not a complete agentreplay export (truncated, damaged, foreign, newer)."""


class RunExists(StoreError):
    """The run being imported is already stored."""


@dataclass(frozen=True)
class ExportResult:
    run: Run
    path: Path
    steps: int
    #: verification of the run as exported (the file carries the same problems, if any)
    report: VerifyReport


@dataclass(frozen=True)
class ImportResult:
    run: Run
    steps: int
    #: vectors handed to the store for similarity search (kept only by PostgreSQL + pgvector)
    embeddings: int
    #: True when it replaced a stored run with the same id
    replaced: bool
    report: VerifyReport
    #: True when the run was exported while still recording: stored `incomplete`
    unsealed: bool = False


def embedding_rows(step: Step) -> list[EmbeddingRow]:
    """The pgvector rows the recorder made for `step`, rebuilt from its stored output: one per
    vector of an embedding step that did not fail (none for any other step)."""
    return [EmbeddingRow(step.run_id, step.step, i, v) for i, v in enumerate(step_vectors(step))]


def _check_suffix(path: Path) -> None:
    if path.suffix != ".jsonl":
        raise StoreError(f"{path}: an export file name must end in .jsonl (open_store reads "
                         "a path ending in .jsonl as one run, any other as a directory)")


def export_run(store: Store, run_id: UUID | str, path: str | os.PathLike[str], *,
               progress: Progress | None = None) -> ExportResult:
    """Write a run, as stored, to a `.jsonl` file (replaced atomically if it exists).

    The run is verified on the way; a run that fails verification is still exported (the
    file then fails verification the same way, which is what a bug report needs): check
    `result.report.ok`.
    """
    target = Path(path)
    _check_suffix(target)
    run = store.get_run(run_id)
    steps = store.backend.load_steps(run.run_id)
    report = store.verify_steps(run, steps)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as out:
            out.write(run_line(run))
            for start in range(0, len(steps), BATCH):
                batch = steps[start:start + BATCH]
                out.write(b"".join(step_line(pending_from_step(s)) for s in batch))
                if progress is not None:
                    progress(start + len(batch), len(steps))
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise StoreError(f"cannot write {target}: {exc.strerror or exc}") from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return ExportResult(run, target, len(steps), report)


#: how every run file and export starts (the file store's writer puts "t" first)
_HEADER = re.compile(rb'\s*\{\s*"t"\s*:\s*"run"\s*,')


def read_export(path: str | os.PathLike[str]) -> tuple[Run, list[Step]]:
    """Parse an exported run file; `StoreError` (one line) for a missing, truncated,
    malformed, foreign or newer-format file."""
    source = Path(path)
    try:
        data = source.read_bytes()
    except OSError as exc:
        what = "is a directory" if source.is_dir() else (exc.strerror or str(exc)).lower()
        raise StoreError(f"cannot read {source}: {what}; import takes one exported .jsonl "
                         "file") from None
    if not data.strip():
        raise MalformedExport(f"{source}: empty file, not an agentreplay export")
    for magic, kind in _COMPRESSED:
        if data.startswith(magic):  # would read as "truncated" or "not valid JSON"
            raise MalformedExport(f"{source}: is a {kind} file, not an export itself; "
                                  "decompress it first")
    if not data.endswith(b"\n"):
        if not _HEADER.match(data):  # random bytes or another file, not one cut short
            raise MalformedExport(f"{source}: not an agentreplay export (it does not start "
                                  "with a run header line)")
        # the file store forgives a torn last line (a recorder killed mid-write); an export
        # is written whole, so a missing newline means the copy was cut short
        raise MalformedExport(f"{source}: truncated (the last line is incomplete); export "
                              "the run again or copy the whole file")
    try:
        return parse_run(data, source)
    except StoreError as exc:
        raise MalformedExport(str(exc)) from None


def _stored(step: Step, deltas: DeltaEncoder) -> PendingStep:
    """The row of an imported step; its input a delta on an earlier step's where it repeats
    that step's conversation (only PostgreSQL stores the delta; see `agentreplay_core._delta`)."""
    row = pending_from_step(step)
    row.stored_input_json = deltas.stored_input(step.step, step.kind, step.name, step.input,
                                                row.input_json, row.output_json)
    return row


def _exists(store: Store, run_id: UUID) -> bool:
    try:
        store.backend.get_run(run_id)
    except RunNotFound:
        return False
    return True


def import_run(store: Store, path: str | os.PathLike[str], *, replace: bool = False,
               verify: bool = True, progress: Progress | None = None) -> ImportResult:
    """Load an exported run into `store`, with its pgvector rows where the store keeps them.

    The run lands whole or not at all: an import interrupted (Ctrl-C, a kill, a lost
    connection) leaves the store as it was, a replaced run included. A run exported while
    it was still recording is stored `incomplete` (`result.unsealed`): nothing will ever
    write the rest of it here.

    Raises:
        MalformedExport: the file is not a complete agentreplay export.
        RunExists: the run is already stored (`replace=True` replaces the stored one).
        StoreError: the file cannot be read, or the store cannot write.
        IntegrityError: the run fails verification with this store's key (pass `verify=False`
            to import it anyway; it keeps failing verification).
    """
    source = Path(path)
    run, steps = read_export(source)
    report = store.verify_steps(run, steps)
    if verify and not report.ok:
        raise IntegrityError(f"{source}: run {run.run_id} fails verification, not imported "
                             f"(import it as is with verify=False):\n{report}", report=report)
    unsealed = run.status == RunStatus.RECORDING
    if unsealed:
        run = run.model_copy(update={"status": RunStatus.INCOMPLETE})
    batches = list(_batches(steps))
    vectors = sum(len(rows) for _, rows in batches)
    pg = _postgres(store.backend)
    if pg is not None:
        replaced = _import_postgres(pg, run, batches, replace, len(steps), progress)
    else:
        replaced = _exists(store, run.run_id)
        if replaced and not replace:
            raise RunExists(f"run {run.run_id} already exists in {store.backend.description}")
        _import_other(store.backend, run, batches, replaced, len(steps), progress)
    return ImportResult(run, len(steps), vectors, replaced, report, unsealed)


Batch = tuple[list[PendingStep], list[EmbeddingRow]]


def _batches(steps: Sequence[Step]) -> Iterator[Batch]:
    deltas = DeltaEncoder()  # a growing conversation is stored as recording stores it
    for start in range(0, len(steps), BATCH):
        batch = steps[start:start + BATCH]
        yield [_stored(s, deltas) for s in batch], [e for s in batch for e in embedding_rows(s)]


def _postgres(backend: StoreBackend) -> PostgresBackend | None:
    if "agentreplay_core.stores._postgres" not in sys.modules:  # not imported: not one
        return None
    from agentreplay_core.stores._postgres import PostgresBackend

    return backend if isinstance(backend, PostgresBackend) else None


def _import_postgres(backend: PostgresBackend, run: Run, batches: list[Batch], replace: bool,
                     total: int, progress: Progress | None) -> bool:
    from agentreplay_core.stores._pgimport import AlreadyStored, import_whole

    try:
        return import_whole(backend, run, batches, replace=replace,
                            done=None if progress is None else lambda n: progress(n, total))
    except AlreadyStored as exc:
        raise RunExists(str(exc)) from None


def _import_other(backend: StoreBackend, run: Run, batches: list[Batch], replaced: bool,
                  total: int, progress: Progress | None) -> None:
    """Into a store of files or memory: swapped in whole where the backend can
    (`replace_run`); else the stored run deleted, then the steps before the seal."""
    rows = [s for steps, _ in batches for s in steps]
    replace_run = getattr(backend, "replace_run", None)
    if replace_run is not None:
        replace_run(run, rows)
        if progress is not None:
            progress(total, total)
        return
    if replaced:
        backend.delete_run(run.run_id)
    backend.create_run(run.model_copy(update={
        "status": RunStatus.RECORDING, "step_count": 0, "head_checksum": None,
        "finished_at": None}))
    written = 0
    for steps, vectors in batches:
        backend.append(steps, vectors)
        written += len(steps)
        if progress is not None:
            progress(written, total)
    if run.status == RunStatus.INCOMPLETE:
        backend.mark_incomplete(run.run_id)
    elif run.finished_at is not None:
        backend.finish_run(RunFinish(run.run_id, run.status, run.step_count,
                                     run.head_checksum, run.finished_at))
