"""The persistence interface every store backend implements.

A backend only stores and loads rows. Numbering, hashing, batching, retries, spooling and
replay live above it (`Recorder`, writers, `Player`), so a new backend is small.
"""

from __future__ import annotations

import abc
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from typing import overload
from uuid import UUID

from agentreplay_core._model import EmbeddingMatch, Run, RunStatus, Step

log = logging.getLogger("agentreplay")


class ThisProcess:
    """This process's id, kept current across forks (`os.register_at_fork`): what was made in
    another process (a forked child's parent) is told apart by comparing a pid, which costs an
    attribute read instead of a system call on every recorded step."""

    pid: int = os.getpid()
    #: guards what a forked child replaces of its parent's (writers, connection pools); made
    #: anew in the child, since a lock some parent thread held at the fork stays held there
    lock: threading.Lock = threading.Lock()


def _after_fork_in_child() -> None:
    ThisProcess.pid = os.getpid()
    ThisProcess.lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(slots=True)
class PendingStep:
    """A step on its way to storage.

    `input_json` / `output_json` are the canonical JSON bytes of `input` / `output` (the encoded
    trees), computed once by the recorder for the checksum and reused as the stored text.
    `stored_input_json`, when set, is what a backend that resolves it on load (PostgreSQL)
    stores instead of `input_json`: a delta on an earlier step (`agentreplay_core._delta`).
    Other backends, and the spool, ignore it and keep the logical input.
    """

    run_id: UUID
    step: int
    kind: str
    name: str
    match_key: str
    path: str
    input_json: bytes
    output_json: bytes
    is_error: bool
    started_at: datetime
    duration_ms: float
    checksum: str
    stored_input_json: bytes | None = None

    @property
    def stored_input(self) -> bytes:
        """What a backend that resolves deltas stores in the input column."""
        return self.input_json if self.stored_input_json is None else self.stored_input_json


@dataclass(slots=True)
class EmbeddingRow:
    """One recorded vector, also kept as a pgvector value for similarity search."""

    run_id: UUID
    step: int
    position: int
    vector: list[float]


@dataclass(slots=True)
class RunFinish:
    """What sealing a run writes into its `runs` row."""

    run_id: UUID
    status: RunStatus
    step_count: int
    head_checksum: str | None
    finished_at: datetime


class SealLater:
    """A seal made when its writer reaches it, after the rows written before it: a run's head
    checksum needs every row of the run made, and a writer that makes them itself (or has
    them made) need not wait for that before it starts writing. `make` returns None when
    there turns out to be nothing to seal; it runs once (`made`), whoever asks first."""

    __slots__ = ("_made", "_make", "run_id")

    def __init__(self, run_id: UUID, make: Callable[[], RunFinish | None]) -> None:
        self.run_id = run_id
        self._make: Callable[[], RunFinish | None] | None = make
        self._made: RunFinish | None = None

    def made(self) -> RunFinish | None:
        make, self._make = self._make, None
        if make is not None:
            try:
                self._made = make()
            except Exception:  # never expected: the chain records its own failures
                log.exception("agentreplay: run %s could not be sealed", self.run_id)
        return self._made


def made(finish: RunFinish | SealLater | None) -> RunFinish | None:
    """The seal itself: `finish`, or what a `SealLater` makes (once)."""
    return finish.made() if isinstance(finish, SealLater) else finish


class LazyRows(Sequence[PendingStep]):
    """Rows made when first read, in step order (`make(i)` makes the `i`th). A backend that
    streams them (PostgreSQL's COPY) sends the first rows while the next ones are still being
    made, so that the server works on a group while the client makes the rest of it.
    `run_ids` are known before any row is made."""

    __slots__ = ("_count", "_make", "_rows", "run_ids")

    def __init__(self, run_ids: Set[UUID], count: int,
                 make: Callable[[int], PendingStep]) -> None:
        self.run_ids = run_ids
        self._count = count
        self._make = make
        self._rows: list[PendingStep] = []

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> PendingStep: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[PendingStep]: ...

    def __getitem__(self, index: int | slice) -> PendingStep | Sequence[PendingStep]:
        last = self._count - 1 if isinstance(index, slice) else range(self._count)[index]
        self._make_to(last)
        return self._rows[index]

    def __iter__(self) -> Iterator[PendingStep]:
        rows = self._rows
        for i in range(self._count):
            if i == len(rows):  # else made already (read before, or by index)
                rows.append(self._make(i))
            yield rows[i]

    def _make_to(self, last: int) -> None:
        rows = self._rows
        for i in range(len(rows), last + 1):
            rows.append(self._make(i))


def run_ids_of(steps: Sequence[PendingStep]) -> set[UUID]:
    """The runs `steps` belong to, without making the rows of `LazyRows`."""
    return set(steps.run_ids) if isinstance(steps, LazyRows) else {s.run_id for s in steps}


class StoreBackend(abc.ABC):
    """Low-level storage of runs, steps and embedding vectors."""

    #: a short URL-like description for messages, never containing a password
    description: str = ""

    @abc.abstractmethod
    def create_run(self, run: Run) -> None:
        """Insert a new run row (idempotent: an existing row with the same id is kept)."""

    @abc.abstractmethod
    def append(
        self,
        steps: Sequence[PendingStep],
        embeddings: Sequence[EmbeddingRow] = (),
        *,
        idempotent: bool = False,
    ) -> None:
        """Store a batch of steps (and their vectors) atomically.

        With `idempotent=True` rows whose `(run_id, step)` already exist are skipped, so a
        spool can be loaded twice safely; otherwise a duplicate is an error.
        """

    @abc.abstractmethod
    def finish_run(self, finish: RunFinish) -> None:
        """Seal a run: status, step count, head checksum, finish time."""

    #: `write_group` stores its rows in one transaction (a backend that sets this overrides it)
    atomic_groups: bool = False

    def write_group(self, run: Run | None, steps: Sequence[PendingStep],
                    embeddings: Sequence[EmbeddingRow],
                    finish: RunFinish | SealLater | None) -> None:
        """A run's row, steps and a seal written together: all of them or none where
        `atomic_groups` is set (one commit for a short run instead of three), one by one
        otherwise. A duplicate step is an error, as in `append`. A `SealLater` is made
        after the steps are written (they may be `LazyRows`)."""
        if run is not None:
            self.create_run(run)
        if steps or embeddings:
            self.append(steps, embeddings)
        sealed = made(finish)
        if sealed is not None:
            self.finish_run(sealed)

    @abc.abstractmethod
    def get_run(self, run_id: UUID) -> Run:
        """The run row; raises `RunNotFound`."""

    @abc.abstractmethod
    def list_runs(
        self,
        *,
        name: str | None = None,
        status: RunStatus | None = None,
        since: datetime | None = None,
        limit: int | None = None,
        tag: str | None = None,
        before: datetime | None = None,
    ) -> list[Run]:
        """Runs, newest first: started at `since` or later and before `before`, recorded with
        `tag` among `metadata["tags"]`."""

    @abc.abstractmethod
    def load_steps(self, run_id: UUID) -> list[Step]:
        """All steps of a run ordered by step number (input/output as encoded JSON trees)."""

    @abc.abstractmethod
    def mark_incomplete(self, run_id: UUID) -> bool:
        """Mark a run whose recording process died `incomplete`, without sealing it.

        Only a run still `recording` changes (a concurrent seal, e.g. from a spool flush, must
        not be overwritten); returns whether it changed. Raises `RunNotFound`.
        """

    @abc.abstractmethod
    def delete_run(self, run_id: UUID) -> None:
        """Remove a run, its steps and its vectors."""

    def search_embeddings(self, vector: Sequence[float], limit: int = 10) -> list[EmbeddingMatch]:
        """Nearest recorded vectors (L2 distance). Backends without vector search raise."""
        from agentreplay_core._errors import StoreError

        raise StoreError(f"{self.description or type(self).__name__} has no vector search")

    def is_permanent(self, error: BaseException) -> bool:
        """True when `error` means the backend refuses this data (retrying or spooling it
        would fail again), as opposed to being unreachable for now."""
        return False

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files."""
