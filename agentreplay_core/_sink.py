"""Where recorded rows go: the backend, with retries, or the local spool when it is down.

Once a run has spooled anything, the rest of that run is spooled too (its rows then load in
order, and the seal comes after the steps). A short circuit-breaker keeps a dead database
from costing every new row the full retry time. A row the database *rejects* (bad data, not
an outage) is neither retried nor spooled, which would only fail again at flush: the rest of
its batch is written row by row and the rejected row is reported and counted as lost. A
later step of the run that was to be stored as a delta on a lost row is stored whole.
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from uuid import UUID

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from agentreplay_core._delta import delta_base
from agentreplay_core._model import Run
from agentreplay_core._plural import counted
from agentreplay_core._spool import Spool
from agentreplay_core.stores._backend import (
    EmbeddingRow,
    PendingStep,
    RunFinish,
    SealLater,
    StoreBackend,
    made,
    run_ids_of,
)

log = logging.getLogger("agentreplay")


#: while the database counts as down, how often a write tries it once nonetheless
PROBE_SECONDS = 1.0


class Outcome(enum.Enum):
    WRITTEN = "written"
    UNREACHABLE = "unreachable"  # retry later: spool
    REJECTED = "rejected"  # the database refuses this data: spooling would not help


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
        self._next_probe = 0.0
        #: per run: steps written, steps that went to the spool, and rows not kept at all
        self.written_steps: dict[UUID, int] = {}
        self.spooled_steps: dict[UUID, int] = {}
        self.lost_steps: dict[UUID, int] = {}
        #: per run, the steps counted in `lost_steps`: a later step stored as a delta on one
        #: of them would be unreadable, so it is stored whole instead
        self._lost: dict[UUID, set[int]] = {}
        #: runs whose `runs` row the store refused, or that could be neither stored nor
        #: spooled: their steps cannot be stored either
        self._rejected_runs: set[UUID] = set()
        self.errors: list[str] = []

    def _try(self, action: Callable[[], object], what: str) -> Outcome:
        if time.monotonic() < self._down_until:
            return self._probe(action, what)
        try:  # the common case, without the retry machinery's overhead
            action()
            return Outcome.WRITTEN
        except Exception as exc:
            error: Exception = exc
        if not self.backend.is_permanent(error):
            try:
                for attempt in Retrying(
                    stop=stop_after_delay(self.retry_seconds),
                    wait=wait_exponential(multiplier=0.05, max=0.5),
                    retry=retry_if_exception(lambda e: not self.backend.is_permanent(e)),
                    reraise=True,
                ):
                    with attempt:
                        action()
                return Outcome.WRITTEN
            except Exception as exc:
                error = exc
        if self.backend.is_permanent(error):
            return self._rejected(what, error)
        self._down_until = time.monotonic() + self.cooldown_seconds
        self._note(f"run store {self.backend.description} failed ({what}): {error!r}; spooling")
        return Outcome.UNREACHABLE

    def _probe(self, action: Callable[[], object], what: str) -> Outcome:
        """While the database was unreachable moments ago (`cooldown_seconds`): one attempt,
        without retries, every `PROBE_SECONDS` at most, so that writes go to the database as
        soon as it is back (a `sync` run started then was spooled for the rest of the
        cooldown), and the others spool at once instead of each waiting for a connection."""
        now = time.monotonic()
        if now < self._next_probe:
            return Outcome.UNREACHABLE
        self._next_probe = now + PROBE_SECONDS
        try:
            action()
        except Exception as exc:
            return self._rejected(what, exc) if self.backend.is_permanent(exc) \
                else Outcome.UNREACHABLE
        self._down_until = 0.0
        return Outcome.WRITTEN

    def _rejected(self, what: str, error: Exception) -> Outcome:
        self._note(f"run store {self.backend.description} rejected {what}: {error}")
        return Outcome.REJECTED

    def _note(self, message: str, level: int = logging.WARNING) -> None:
        log.log(level, "agentreplay: %s", message)
        with self._lock:
            self.errors.append(message)

    def _count(self, table: dict[UUID, int], steps: Sequence[PendingStep]) -> None:
        with self._lock:
            for s in steps:
                table[s.run_id] = table.get(s.run_id, 0) + 1
                if table is self.lost_steps:
                    self._lost.setdefault(s.run_id, set()).add(s.step)

    def _unbase_lost(self, steps: Sequence[PendingStep]) -> None:
        """Store whole the inputs of steps that are deltas on a lost step (rare: a row the
        database refused, or that neither it nor the spool could take)."""
        if not self._lost:
            return
        for s in steps:
            lost = self._lost.get(s.run_id)
            if lost and s.stored_input_json is not None \
                    and delta_base(s.stored_input_json) in lost:
                s.stored_input_json = None

    def _spool(self, run_ids: set[UUID], action: Callable[[], None], what: str) -> bool:
        with self._lock:
            self._spooling |= run_ids
        try:
            action()
            return True
        except Exception as exc:  # disk full, permissions: say so loudly, count the loss
            self._note(f"could not spool {what} to {self.spool.directory}: {exc!r}; LOST",
                       logging.ERROR)
            return False

    def is_spooling(self, run_id: UUID) -> bool:
        return run_id in self._spooling

    def write_run(self, run: Run) -> None:
        outcome = self._try(lambda: self.backend.create_run(run), f"run {run.run_id}")
        if outcome is Outcome.REJECTED:
            with self._lock:
                self._rejected_runs.add(run.run_id)
        if outcome is not Outcome.UNREACHABLE:
            return
        if not self._spool({run.run_id}, lambda: self.spool.write_run(run), f"run {run.run_id}"):
            with self._lock:  # no step loads without the header: count them lost, not spooled
                self._rejected_runs.add(run.run_id)

    def write_group(self, run: Run | None, steps: Sequence[PendingStep],
                    embeddings: Sequence[EmbeddingRow],
                    finish: RunFinish | SealLater | None) -> None:
        """A run's row, steps (of any runs) and a seal, in this order. In one transaction
        where the backend can (`StoreBackend.write_group`) unless one of the runs is being
        spooled; if that fails, or otherwise, one by one with the usual retries, spooling
        and rejection of single rows. `steps` may be `LazyRows`, `finish` a `SealLater`."""
        self._unbase_lost(steps)
        run_ids = run_ids_of(steps)
        run_ids.update(r.run_id for r in (run, finish) if r is not None)
        together = (self.backend.atomic_groups
                    and run_ids.isdisjoint(self._spooling)
                    and run_ids.isdisjoint(self._rejected_runs)
                    and time.monotonic() >= self._down_until)
        unsure = False
        if together:
            try:
                self.backend.write_group(run, steps, embeddings, finish)
            except Exception as exc:
                log.debug("agentreplay: writing %s in one transaction failed (%r); "
                          "writing them one by one", counted(len(steps), "step"), exc)
                # a refusal rolled everything back; a lost connection may have lost only
                # the answer to a commit that went through
                unsure = not self.backend.is_permanent(exc)
            else:
                self._count(self.written_steps, steps)
                return
        if run is not None:
            self.write_run(run)
        if steps:
            self.write_rows(steps, embeddings, retried=unsure)
        sealed = made(finish)
        if sealed is not None:
            self.write_finish(sealed)

    def write_rows(self, steps: Sequence[PendingStep], embeddings: Sequence[EmbeddingRow],
                   *, retried: bool = False) -> None:
        orphans = [s for s in steps if s.run_id in self._rejected_runs]
        if orphans:
            self._count(self.lost_steps, orphans)
            steps = [s for s in steps if s.run_id not in self._rejected_runs]
        direct = [s for s in steps if s.run_id not in self._spooling]
        spooled = [s for s in steps if s.run_id in self._spooling]
        if direct:
            spooled.extend(self._write_direct(direct, embeddings, retried=retried))
        if spooled:
            self._spool_steps(spooled, embeddings)

    def _spool_steps(self, steps: Sequence[PendingStep], embeddings: Sequence[EmbeddingRow]
                     ) -> None:
        """Spool run by run (a line each), so a full disk counts as lost only what it lost."""
        by_run: dict[UUID, list[PendingStep]] = {}
        for step in steps:
            by_run.setdefault(step.run_id, []).append(step)
        for run_id, rows in by_run.items():
            vectors = [e for e in embeddings if e.run_id == run_id]
            kept = self._spool({run_id}, functools.partial(self.spool.write_rows, rows, vectors),
                               f"{counted(len(rows), 'step')} of run {run_id}")
            self._count(self.spooled_steps if kept else self.lost_steps, rows)

    def _write_direct(self, steps: list[PendingStep], embeddings: Sequence[EmbeddingRow],
                      *, retried: bool = False) -> list[PendingStep]:
        """Write to the backend; returns the steps that must be spooled instead."""
        self._unbase_lost(steps)  # also a step after one refused just now, row by row
        ids = {s.run_id for s in steps}
        vectors = [e for e in embeddings if e.run_id in ids]
        attempts = [1 if retried else 0]

        def append() -> None:
            # A connection lost during COMMIT leaves the batch's fate unknown: later attempts
            # skip the rows that did arrive.
            attempts[0] += 1
            self.backend.append(steps, vectors, idempotent=attempts[0] > 1)

        outcome = self._try(append, counted(len(steps), "step"))
        if outcome is Outcome.WRITTEN:
            self._count(self.written_steps, steps)
            return []
        if outcome is Outcome.UNREACHABLE:
            with self._lock:
                self._spooling |= ids
            return steps
        if len(steps) == 1:
            self._count(self.lost_steps, steps)
            return []
        to_spool: list[PendingStep] = []
        for step in steps:  # find the rejected row(s); keep the others
            own = [e for e in vectors if e.run_id == step.run_id and e.step == step.step]
            to_spool.extend(self._write_direct([step], own, retried=retried))
        return to_spool

    def spool_rows(self, steps: Sequence[PendingStep], embeddings: Sequence[EmbeddingRow]) -> None:
        """Spool straight away (the writer's queue stayed full too long)."""
        self._spool_steps(steps, embeddings)

    def spool_finish(self, finish: RunFinish) -> None:
        self._spool({finish.run_id}, lambda: self.spool.write_finish(finish),
                    f"the seal of run {finish.run_id}")

    def write_finish(self, finish: RunFinish) -> None:
        if finish.run_id in self._rejected_runs:
            return  # nothing of it could be stored; its loss was reported already
        if finish.run_id not in self._spooling and self._try(
            lambda: self.backend.finish_run(finish), f"the seal of run {finish.run_id}"
        ) in (Outcome.WRITTEN, Outcome.REJECTED):
            return
        self._spool({finish.run_id}, lambda: self.spool.write_finish(finish),
                    f"the seal of run {finish.run_id}")

    def flush_spooled(self) -> dict[UUID, int]:
        """Load what this sink spooled, if the database is back; failures are kept for later."""
        loaded: dict[UUID, int] = {}
        with self._lock:
            run_ids = sorted(self._spooling, key=str)
        if run_ids and time.monotonic() < self._down_until:
            # no write reached the database since it went away (one that did ends this): a
            # load now would only fail, leaving the spool files renamed for a later load
            self._note(f"{counted(len(run_ids), 'spooled run')} left in "
                       f"{self.spool.directory}: the database was unreachable moments ago; "
                       "load spooled runs later with `agentreplay spool flush`")
            return loaded
        for n, run_id in enumerate(run_ids):
            try:
                loaded[run_id] = self.spool.load_into(self.backend, run_id)
            except Exception as exc:
                if not self.backend.is_permanent(exc):  # unreachable: so for the others too
                    self._note(f"{counted(len(run_ids) - n, 'spooled run')} left in "
                               f"{self.spool.directory}: {exc!r}; load spooled runs later "
                               "with `agentreplay spool flush`")
                    break
                self._note(f"spooled run {run_id} stays in {self.spool.directory}: {exc!r}; "
                           "load it later with `agentreplay spool flush`")
                continue
            with self._lock:
                self._spooling.discard(run_id)
        return loaded
