"""A run's hash chain: captured steps become stored rows in step order, on whichever thread
needs them first.

Recording a step on the agent's thread only copies its values (`encode` builds a fresh tree
that nothing else holds) and numbers it. Redaction, the canonical bytes, the match key and the
chain digest are computed later, usually by the batched writer's thread while the agent waits
on its next model call. Any thread that needs a row first (the writer, a caller whose row must
be spooled at once, the seal) settles every earlier step of the run too, under one lock, so
the chain is always computed in step order.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from agentreplay_core._codec import canonical_bytes, unencodable_marker
from agentreplay_core._delta import DeltaEncoder
from agentreplay_core._errors import SerializationError
from agentreplay_core._integrity import GENESIS, chain_next, step_payload
from agentreplay_core._keys import match_key_of_canonical
from agentreplay_core._prepare import Prepared, Screened, prepare_step, screen_ahead
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep

if TYPE_CHECKING:
    from agentreplay_core._recorder import Recorder
    from agentreplay_core._redact import Redactor

log = logging.getLogger("agentreplay")

#: steps screened for secrets in one scan, at most, and the canonical JSON they may hold
#: (made ahead of their turn, and kept until it comes)
_SCREEN_AHEAD = 64
_SCREEN_AHEAD_BYTES = 256 * 1024


@dataclass(eq=False)
class Captured:
    """A numbered step whose row is not made yet."""

    chain: StepChain
    number: int
    kind: str
    name: str
    path: str
    #: encoded trees only this step holds (dropped once the row is made)
    encoded_in: Any
    encoded_out: Any
    is_error: bool
    match_key: str | None
    #: the match key came from the code that recorded the step (rekeyed if it saw secrets)
    caller_key: bool
    started: datetime
    duration_ms: float
    vectors: Sequence[list[float]]
    #: the stored values, when the helper process of `prepare="process"` made them
    prepared: Prepared | None = None
    #: the canonical input and output and the secret screen's verdict, made with the steps
    #: queued behind it (`StepChain._screen_ahead`)
    screened: Screened | None = None
    row: PendingStep | None = None
    #: () until made: an empty list per queued step would be one more object for the
    #: garbage collector to track while the step waits
    embeddings: Sequence[EmbeddingRow] = ()

    def settle(self) -> tuple[PendingStep, Sequence[EmbeddingRow]]:
        """The stored row and its vectors (made now, with every earlier step's, if need be)."""
        if self.row is None:
            self.chain.settle(self)
        if self.row is None:  # only if the chain lost track of it: a bug, said loudly
            raise RuntimeError(f"step {self.number} of run {self.chain.run_id} was never chained")
        return self.row, self.embeddings


class StepChain:
    """Makes the rows of one recorder's steps, in step order."""

    def __init__(self, recorder: Recorder, hmac_key: bytes | None) -> None:
        self.run_id: UUID = recorder.run_id
        self._recorder = recorder
        self._key = hmac_key
        self._lock = threading.Lock()
        self._waiting: deque[Captured] = deque()
        self._deltas = DeltaEncoder()
        self.head = GENESIS

    @property
    def redactor(self) -> Redactor | None:
        return self._recorder.redactor

    @property
    def max_value_bytes(self) -> int:
        return self._recorder.max_value_bytes

    def prepare_here(self, step: Captured) -> None:
        """Make a queued step's stored values now, ahead of its turn in the chain (the writer
        does this for the batches its helper process has no time for). A failure is left for
        `settle`, which prepares the step again and reports why."""
        if step.row is not None or step.prepared is not None:
            return
        # Concurrent with the chain (no lock): a step settled meanwhile simply ignores this,
        # and the delta encoder never takes a later step as an earlier one's base.
        with contextlib.suppress(Exception):
            step.prepared = self._prepare(step)

    def _prepare(self, step: Captured) -> Prepared:
        recorder = self._recorder
        return prepare_step(recorder.redactor, self._deltas, recorder.max_value_bytes,
                            step.number, step.kind, step.name, step.encoded_in,
                            step.encoded_out, step.match_key, step.caller_key, step.screened)

    def _screen_ahead(self, step: Captured) -> None:
        """Screen `step` and the steps queued behind it for secrets in one scan (see
        `JsonScreen.screen_each`: one scan a step would cost the agent a switch of threads
        each). Called under the lock; the queue only grows meanwhile."""
        redactor = self.redactor
        if redactor is None or step.prepared is not None or step.screened is not None:
            return
        waiting = self._waiting
        batch = [step]
        for n in range(min(len(waiting), _SCREEN_AHEAD - 1)):
            later = waiting[n]
            if later.prepared is None and later.screened is None:
                batch.append(later)
        if len(batch) < 2:
            return
        try:
            screened = screen_ahead(redactor, [(s.encoded_in, s.encoded_out) for s in batch],
                                    _SCREEN_AHEAD_BYTES)
        except Exception:  # each step is prepared on its own then, and its error reported
            return
        for later, made in zip(batch, screened, strict=False):  # a prefix of the batch
            later.screened = made

    def add(self, step: Captured) -> None:
        """Queue a step; the recorder calls this in step order (under its own lock)."""
        self._waiting.append(step)

    def settle(self, target: Captured) -> None:
        with self._lock:
            while target.row is None and self._waiting:
                self._settle(self._waiting.popleft())

    def settle_all(self) -> bytes:
        """Make every queued step's row; the digest of the last step (for the seal).

        The lock is taken step by step, so that a writer waiting to make the first row of its
        batch is not held up behind the whole queue.
        """
        while True:
            with self._lock:
                if not self._waiting:
                    return self.head
                self._settle(self._waiting.popleft())

    def _settle(self, step: Captured) -> None:
        if step.screened is None:
            self._screen_ahead(step)
        try:
            input_json, output_json, key, stored_in = self._stored(step)
        except Exception as exc:  # never leave a hole in the chain: store why instead
            self._recorder.stats.internal_errors += 1
            log.exception("agentreplay: run %s: failed to prepare step %s", self.run_id,
                          step.number)
            input_json, output_json, key = self._failed(step, exc)
            stored_in = None
        digest = chain_next(
            self.head,
            step_payload(self.run_id, step.number, step.kind, step.name, key, step.path,
                         input_json, output_json, step.is_error),
            self._key,
        )
        step.row = PendingStep(self.run_id, step.number, step.kind, step.name, key, step.path,
                               input_json, output_json, step.is_error, step.started,
                               step.duration_ms, digest.hex(), stored_in)
        if step.vectors:
            step.embeddings = [EmbeddingRow(self.run_id, step.number, i, v)
                               for i, v in enumerate(step.vectors)]
        step.encoded_in = step.encoded_out = step.prepared = step.screened = None
        self.head = digest

    def _stored(self, step: Captured) -> tuple[bytes, bytes, str, bytes | None]:
        """The step's stored values: made by the helper process already, or made here."""
        prepared = step.prepared or self._prepare(step)
        for where, size, type_name in prepared.oversized:
            self._recorder.note_oversized(where, size, type_name)
        return prepared.input_json, prepared.output_json, prepared.key, prepared.stored_in

    def _failed(self, step: Captured, exc: Exception) -> tuple[bytes, bytes, str]:
        self._recorder.stats.unencodable += 1
        markers = []
        for where in ("input", "output"):
            error = SerializationError(
                f"agentreplay failed to prepare this step for storage ({type(exc).__name__}: "
                f"{exc}); nothing of its {where} was stored", path=where, type_name="step")
            markers.append(canonical_bytes(unencodable_marker("(not stored)", error)))
        key = step.match_key or match_key_of_canonical(step.kind, step.name, markers[0])
        return markers[0], markers[1], key
