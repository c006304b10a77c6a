"""`SettlingRows`: rows made in order as they are first read, kept for a second reading."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from uuid import UUID, uuid4

import pytest

from agentreplay_core._step_rows import SettlingRows
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep

RUN = uuid4()


class _Step:
    """A recorded step of the protocol `SettlingRows` reads; counts how often it is made."""

    def __init__(self, number: int, vectors: int = 0, broken: bool = False) -> None:
        self.number, self.vectors, self.broken, self.made = number, vectors, broken, 0

    @property
    def run_id(self) -> UUID:
        return RUN

    @property
    def has_vectors(self) -> bool:
        return self.vectors > 0

    def settle(self) -> tuple[PendingStep, Sequence[EmbeddingRow]]:
        self.made += 1
        if self.broken:
            raise RuntimeError("a bug while preparing the row")
        row = PendingStep(RUN, self.number, "tool", "t", "k", "p", b"{}", b"1", False,
                          datetime.now(timezone.utc), 0.0, "c", None)
        return row, [EmbeddingRow(RUN, self.number, i, [0.5]) for i in range(self.vectors)]


def test_rows_are_made_as_they_are_read_and_once() -> None:
    steps = [_Step(1), _Step(2, vectors=2), _Step(3)]
    rows = SettlingRows(steps)
    assert (len(rows), rows.has_embeddings, rows.run_ids) == (3, True, {RUN})
    reading = iter(rows)
    assert next(reading).step == 1
    assert [s.made for s in steps] == [1, 0, 0]  # nothing is made before it is read
    assert next(reading).step == 2
    assert [(e.step, e.position) for e in rows.embeddings] == [(2, 0), (2, 1)]
    assert [r.step for r in rows] == [1, 2, 3]  # a second reading, from the start
    assert [r.step for r in rows.all()] == [1, 2, 3]
    assert [s.made for s in steps] == [1, 1, 1]


def test_all_makes_what_a_failed_reading_left(caplog: pytest.LogCaptureFixture) -> None:
    steps = [_Step(1), _Step(2, broken=True), _Step(3)]
    rows = SettlingRows(steps)
    assert next(iter(rows)).step == 1
    with caplog.at_level(logging.ERROR, logger="agentreplay"):
        assert [r.step for r in rows.all()] == [1, 3]  # a step that cannot be made is skipped
    assert "could not prepare a step" in caplog.text
    assert not SettlingRows([_Step(4)]).has_embeddings
