"""Durability modes, and the writer of `sync` mode: each row is written in the caller's
thread before the call returns (`batched` mode's writer is `_writer`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from agentreplay_core._model import Run
from agentreplay_core._sink import Sink
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish

Durability = Literal["batched", "sync"]
DURABILITY_MODES: tuple[str, ...] = ("batched", "sync")


def check_durability(value: str) -> Durability:
    if value not in DURABILITY_MODES:
        raise ValueError(f"durability must be one of {', '.join(DURABILITY_MODES)}, not {value!r}")
    return value  # type: ignore[return-value]


class Settleable(Protocol):
    """A recorded step whose row may still have to be made (see `StepChain`)."""

    def settle(self) -> tuple[PendingStep, Sequence[EmbeddingRow]]: ...


class SyncWriter:
    """Each call returns once its row is committed (or spooled)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def submit_run(self, run: Run) -> None:
        self.sink.write_run(run)

    def submit(self, step: Settleable) -> None:
        row, embeddings = step.settle()
        self.sink.write_rows([row], embeddings)

    def behind(self) -> bool:
        return False

    def submit_finish(self, finish: RunFinish) -> None:
        self.sink.write_finish(finish)

    def wait_durable(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float | None = None) -> None:
        self.sink.flush_spooled()
