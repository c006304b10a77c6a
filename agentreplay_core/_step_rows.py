"""The rows of a batch of recorded steps, made as they are read.

The batched writer hands a batch to the store before its rows exist: the store reads them in
order (a COPY streams them), and each row is made when it is read. PostgreSQL then takes the
first rows of a COPY while this process makes the next ones, on the other core, instead of
the two waiting for each other in turn.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Protocol
from uuid import UUID

from agentreplay_core.stores._backend import EmbeddingRow, PendingStep

log = logging.getLogger("agentreplay")


class Settleable(Protocol):
    """A recorded step whose row may still have to be made (see `StepChain`)."""

    @property
    def run_id(self) -> UUID: ...

    @property
    def has_vectors(self) -> bool: ...

    def settle(self) -> tuple[PendingStep, Sequence[EmbeddingRow]]: ...


class SettlingRows:
    """Rows of `items`, made in order as they are first read; `embeddings` fills up as they
    are. Iterable any number of times (the rows made are kept, for a retry)."""

    __slots__ = ("_items", "_made", "embeddings", "has_embeddings", "rows", "run_ids")

    def __init__(self, items: Sequence[Settleable]) -> None:
        self._items = items
        self._made = 0
        self.rows: list[PendingStep] = []
        self.embeddings: list[EmbeddingRow] = []
        self.run_ids = {item.run_id for item in items}
        self.has_embeddings = any(item.has_vectors for item in items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[PendingStep]:
        rows = self.rows
        i = 0
        while True:
            while i >= len(rows):
                if not self._make_next():
                    return
            yield rows[i]
            i += 1

    def all(self) -> list[PendingStep]:
        """Every row, made now if need be."""
        while self._make_next():
            pass
        return self.rows

    def _make_next(self) -> bool:
        if self._made >= len(self._items):
            return False
        item = self._items[self._made]
        self._made += 1
        try:
            row, embeddings = item.settle()
        except Exception:  # settle never raises; this is a last line of defence
            log.exception("agentreplay: writer could not prepare a step")
            return True
        self.rows.append(row)
        self.embeddings.extend(embeddings)
        return True
