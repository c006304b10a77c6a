"""The batched writer's loop when a helper process prepares its steps (`prepare="process"`):
one batch ahead, so that the helper prepares a batch while the writer thread writes the one
before it."""

from __future__ import annotations

from collections import deque
from typing import Protocol

from agentreplay_core._prepare_client import PrepareClient
from agentreplay_core._step_chain import Captured
from agentreplay_core._writer_groups import Item

#: a batch this large (or a queue this long behind it) means steps come faster than the helper
#: process prepares them: the writer thread then prepares some batches itself. An agent
#: waiting on its model records far fewer per batch, and its steps all go to the helper.
SHARED_BATCH = 256
#: batches sent to the helper for each one the writer thread prepares, when sharing (it also
#: chains and writes them all; 1 and 3 measured no better)
HELPER_SHARE = 2


class BatchLoop(Protocol):
    """What the loop needs of the writer (`BatchedWriter`)."""

    def take_batch(self, wait: bool = True) -> list[Item]: ...

    def write_items(self, items: list[Item]) -> bool: ...

    @property
    def queued(self) -> int: ...


def run_with_helper(writer: BatchLoop, helper: PrepareClient) -> None:
    """The writer's `_run`, one batch ahead: the helper prepares a batch while this thread
    writes the previous one (and the agent's threads run). When steps come faster than the
    helper prepares them (a bulk recording, not an agent waiting on its model), this thread
    prepares one batch in three itself meanwhile."""
    pending: deque[tuple[list[Item], list[Captured] | None]] = deque()
    in_a_row = 0  # batches sent to the helper since this thread prepared one
    while True:
        items = writer.take_batch(wait=not pending)
        if items:
            steps = [item[1] for item in items if item[0] == "step"]
            if pending and in_a_row >= HELPER_SHARE and _backlog(writer, len(steps)):
                for step in steps:
                    if type(step) is Captured:
                        step.chain.prepare_here(step)
                pending.append((items, None))
                in_a_row = 0
            else:
                pending.append((items, helper.send(steps)))
                in_a_row += 1
        if pending and (not items or len(pending) > 1):
            batch, sent = pending.popleft()
            helper.receive(sent)
            if writer.write_items(batch):
                # anything queued in a race with close() is written all the same
                for batch, sent in pending:
                    helper.receive(sent)
                    writer.write_items(batch)
                return


def _backlog(writer: BatchLoop, taken: int) -> bool:
    """Whether steps are queued faster than one helper prepares them."""
    return taken >= SHARED_BATCH or writer.queued >= SHARED_BATCH
