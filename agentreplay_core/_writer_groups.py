"""What the batched writer does with a batch it took from its queue: it cuts the batch into
groups, each written in one transaction (a run's row, steps, a seal), and makes each group's
rows for the sink."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Literal, Union
from uuid import UUID

from agentreplay_core._model import Run
from agentreplay_core._plural import counted
from agentreplay_core._sink import Sink
from agentreplay_core._step_chain import Captured
from agentreplay_core._writer_sync import Settleable
from agentreplay_core.stores._backend import (
    EmbeddingRow,
    LazyRows,
    PendingStep,
    RunFinish,
    SealLater,
)

log = logging.getLogger("agentreplay")

Item = Union[  # noqa: UP007 - a runtime alias; `|` between tuple types needs 3.10+ anyway
    tuple[Literal["run"], Run],
    tuple[Literal["step"], Settleable],
    tuple[Literal["finish"], Union[RunFinish, SealLater]],  # noqa: UP007
    tuple[Literal["barrier"], threading.Event],
    tuple[Literal["stop"], threading.Event],
]
#: the seal queued next, if it seals the given run (whose rows are made): it joins them
QueuedSeal = Callable[[UUID], Union[RunFinish, None]]  # noqa: UP007


class _Group:
    """Consecutive items of a batch that are written together: a run's row, steps, a seal."""

    __slots__ = ("finish", "run", "steps")

    def __init__(self) -> None:
        self.run: Run | None = None
        self.steps: list[Settleable] = []
        self.finish: RunFinish | SealLater | None = None


def write_batch(sink: Sink, items: list[Item], queued_seal: QueuedSeal) -> bool:
    """Write a batch's groups in order, setting its barriers as the rows before them are
    written; True if the batch ends with the writer's stop."""
    group = _Group()
    stop: threading.Event | None = None

    def write() -> None:
        _write(sink, group, queued_seal)

    for item in items:
        if item[0] == "step":
            if group.finish is not None:
                write()
            group.steps.append(item[1])
        elif item[0] == "run":
            write()
            group.run = item[1]
        elif item[0] == "finish":
            if group.finish is not None:
                write()
            group.finish = item[1]  # a `SealLater` is made once the rows before it are
        else:
            write()
            if item[0] == "barrier":
                item[1].set()
            else:
                stop = item[1]
    write()
    if stop is not None:
        stop.set()
        return True
    return False


def _write(sink: Sink, group: _Group, queued_seal: QueuedSeal) -> None:
    """Make the rows of a group and write them; empties the group."""
    if not (group.run or group.steps or group.finish):
        return
    rows: Sequence[PendingStep]
    vectors: list[EmbeddingRow] = []
    steps = [s for s in group.steps if isinstance(s, Captured) and not s.vectors] \
        if group.finish is not None else []
    if steps and len(steps) == len(group.steps):
        # the end of a run, whose seal waits for this commit: the rows are made while the
        # first ones are sent (see `LazyRows`), so the server's work overlaps their making
        rows = LazyRows({s.chain.run_id for s in steps}, len(steps),
                        lambda i: steps[i].settle()[0])
    else:
        rows = _made(group.steps, vectors)
        if group.finish is None and rows:  # a seal queued while they were made joins them
            group.finish = queued_seal(rows[-1].run_id)
    try:
        sink.write_group(group.run, rows, vectors, group.finish)
    except Exception:  # the sink never raises; this is a last line of defence
        log.exception("agentreplay: writer failed to write %s", counted(len(rows), "step"))
    group.run, group.steps, group.finish = None, [], None


def _made(steps: list[Settleable], vectors: list[EmbeddingRow]) -> list[PendingStep]:
    rows = []
    for step in steps:
        try:
            row, embeddings = step.settle()
        except Exception:  # settle never raises; this is a last line of defence
            log.exception("agentreplay: writer could not prepare a step")
            continue
        rows.append(row)
        vectors.extend(embeddings)
    return rows
