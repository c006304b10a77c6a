"""Where recorded rows go: the backend, with retries, or the local spool when it is down.

Once a run has spooled anything, the rest of that run is spooled too (its rows then load in
order, and the seal comes after the steps). A short circuit-breaker keeps a dead database
from costing every new row the full retry time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar
from uuid import UUID

from tenacity import Retrying, stop_after_delay, wait_exponential

from agentreplay_core._model import Run
from agentreplay_core._spool import Spool
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish, StoreBackend

log = logging.getLogger("agentreplay")
T = TypeVar("T")


class Sink:
    """Writes to a backend, falling back to a spool; never raises (losses are counted)."""

    def __init__(
        self,
        backend: StoreBackend,
        spool: Spool,
        *,
        retry_seconds: float = 2.0,
        cooldown_seconds: float = 5.0,
    ) -> None:
        self.backend = backend
        self.spool = spool
        self.retry_seconds = retry_seconds
        self.cooldown_seconds = cooldown_seconds
        self._lock = threading.Lock()
        self._spooling: set[UUID] = set()
        self._down_until = 0.0
        #: per run: steps that went to the spool, and rows that could not be kept at all
        self.spooled_steps: dict[UUID, int] = {}
        self.lost_steps: dict[UUID, int] = {}
        self.errors: list[str] = []

    def _try(self, action: Callable[[], T]) -> bool:
        if time.monotonic() < self._down_until:
            return False
        try:  # the common case, without the retry machinery's overhead
            action()
            return True
        except Exception:
            pass
        try:
            for attempt in Retrying(
                stop=stop_after_delay(self.retry_seconds),
                wait=wait_exponential(multiplier=0.05, max=0.5),
                reraise=True,
            ):
                with attempt:
                    action()
            return True
        except Exception as exc:
            self._down_until = time.monotonic() + self.cooldown_seconds
            self._note(f"run store {self.backend.description} failed: {exc!r}; spooling")
            return False

    def _note(self, message: str) -> None:
        log.warning("agentreplay: %s", message)
        with self._lock:
            self.errors.append(message)

    def _spool_or_count(self, run_ids: set[UUID], action: Callable[[], None], steps: int) -> None:
        with self._lock:
            self._spooling |= run_ids
        try:
            action()
        except Exception as exc:  # disk full, permissions: say so loudly, count the loss
            self._note(f"could not spool {steps} step(s) to {self.spool.directory}: {exc!r}")
            with self._lock:
                for run_id in run_ids:
                    self.lost_steps[run_id] = self.lost_steps.get(run_id, 0) + steps

    def is_spooling(self, run_id: UUID) -> bool:
        return run_id in self._spooling

    def write_run(self, run: Run) -> None:
        if self._try(lambda: self.backend.create_run(run)):
            return
        self._spool_or_count({run.run_id}, lambda: self.spool.write_run(run), 0)

    def write_rows(self, steps: Sequence[PendingStep], embeddings: Sequence[EmbeddingRow]) -> None:
        direct = [s for s in steps if s.run_id not in self._spooling]
        spooled = [s for s in steps if s.run_id in self._spooling]
        if direct:
            direct_ids = {s.run_id for s in direct}
            vectors = [e for e in embeddings if e.run_id in direct_ids]
            attempts = [0]

            def append() -> None:
                # A connection lost during COMMIT leaves the batch's fate unknown: later
                # attempts skip the rows that did arrive.
                attempts[0] += 1
                self.backend.append(direct, vectors, idempotent=attempts[0] > 1)

            if not self._try(append):
                spooled.extend(direct)
                with self._lock:
                    self._spooling |= direct_ids
        if spooled:
            ids = {s.run_id for s in spooled}
            vectors = [e for e in embeddings if e.run_id in ids]
            self._spool_or_count(ids, lambda: self.spool.write_rows(spooled, vectors),
                                 len(spooled))
            with self._lock:
                for s in spooled:
                    self.spooled_steps[s.run_id] = self.spooled_steps.get(s.run_id, 0) + 1

    def write_finish(self, finish: RunFinish) -> None:
        if finish.run_id not in self._spooling and self._try(
            lambda: self.backend.finish_run(finish)
        ):
            return
        self._spool_or_count({finish.run_id}, lambda: self.spool.write_finish(finish), 0)

    def flush_spooled(self) -> dict[UUID, int]:
        """Load what this sink spooled, if the database is back; failures are kept for later."""
        loaded: dict[UUID, int] = {}
        with self._lock:
            run_ids = sorted(self._spooling, key=str)
        if run_ids and time.monotonic() < self._down_until:
            self._note(f"{len(run_ids)} spooled run(s) stay in {self.spool.directory}: the "
                       "database was unreachable moments ago; load them later with "
                       "`agentreplay spool flush`")
            return loaded
        for run_id in run_ids:
            try:
                loaded[run_id] = self.spool.load_into(self.backend, run_id)
            except Exception as exc:
                self._note(f"spooled run {run_id} stays in {self.spool.directory}: {exc!r}; "
                           "load it later with `agentreplay spool flush`")
                continue
            with self._lock:
                self._spooling.discard(run_id)
        return loaded
