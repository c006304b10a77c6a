"""The persistence interface every store backend implements.

A backend only stores and loads rows. Numbering, hashing, batching, retries, spooling and
replay live above it (`Recorder`, writers, `Player`), so a new backend is small.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from agentreplay_core._model import EmbeddingMatch, Run, RunStatus, Step


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
                    embeddings: Sequence[EmbeddingRow], finish: RunFinish | None) -> None:
        """A run's row, steps and a seal written together: all of them or none where
        `atomic_groups` is set (one commit for a short run instead of three), one by one
        otherwise. A duplicate step is an error, as in `append`."""
        if run is not None:
            self.create_run(run)
        if steps or embeddings:
            self.append(steps, embeddings)
        if finish is not None:
            self.finish_run(finish)

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
