"""Concurrent async calls complete in replay in the order they completed while recording.

A fan-out (`asyncio.gather` of tasks that append as they finish, `as_completed`, a LlamaIndex
workflow's `collect_events`, a queue its workers feed) sees its results in the order the calls
ended: the first answer back from a remote model comes first. That order is an input of the
run as much as the answers are. Replay serves every call at once, so without this the calls
would end in the order they were asked for, and a prompt built from the results in that order
differs from the recorded one.

So an async call served from the recording waits, before it returns, until the calls that ended
while it ran, before it did, have been served and are not waiting themselves (calls recorded
inside it excepted). A call the replay never asks for would hold it up for good: after
`PATIENCE` the wait gives up, says so, and the rest of the replay returns calls as they are
asked for, as it did before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Container, Sequence
from uuid import UUID

from agentreplay_core._keys import is_inside
from agentreplay_core._model import Step
from agentreplay_core._replay_index import started

log = logging.getLogger("agentreplay")

#: seconds a replayed call waits for the calls that ended before it while recording
PATIENCE = 1.0
#: seconds the event loop runs the code after the calls that returned before a call, before it
SETTLE = 0.001
#: turns of the event loop spent in the wait before it sleeps between checks
_SPINS = 64


class CompletionOrder:
    """Which served steps a replayed async call waits for, and the wait itself."""

    def __init__(self, run_id: UUID, steps: Sequence[Step]) -> None:
        self.run_id = run_id
        self._steps = steps
        self._ends: list[float] | None = None  # each step's end, built at the first wait
        #: the latest end among each step and those before it: where no step before a call
        #: can have ended while it ran, the look back stops (steps are numbered in the order
        #: they ended, but for a call a timeout cancelled, recorded at the end of the run)
        self._reach: list[float] = []
        self._position: dict[int, int] = {}
        #: served steps whose calls wait for their turn to return; a served step not in it
        #: has returned (a call's step is served and its wait begun with no await between)
        self._holding: set[int] = set()
        self.off = False

    def _build(self) -> list[float]:
        ends, reach, latest = [], self._reach, float("-inf")
        for i, step in enumerate(self._steps):
            self._position[step.step] = i
            end = started(step) + step.duration_ms / 1000
            ends.append(end)
            latest = max(latest, end)
            reach.append(latest)
        self._ends = ends
        return ends

    def ended_first(self, step: Step, consumed: Container[int]) -> list[Step]:
        """The steps that ended while `step`'s call ran, before it did, other than those
        recorded inside it, whose calls have not returned yet."""
        ends = self._ends if self._ends is not None else self._build()
        index = self._position.get(step.step)
        if not index:  # the first step, or one not in this run
            return []
        reach = self._reach
        begun = started(step)
        if reach[index - 1] <= begun:  # all before it had ended when it began: the usual
            return []
        waiting: list[Step] = []
        holding = self._holding
        for i in range(index - 1, -1, -1):
            if reach[i] <= begun:
                break
            if ends[i] <= begun:
                continue
            other = self._steps[i]
            if (other.step not in consumed or other.step in holding) \
                    and not is_inside(other.path, step.path):
                waiting.append(other)
        return waiting

    async def wait_turn(self, step: Step, consumed: Container[int]) -> None:
        """Return once the calls that ended before `step`'s while it ran have returned."""
        if self.off:
            return
        waiting = self.ended_first(step, consumed)
        if not waiting:
            return
        holding = self._holding
        holding.add(step.step)
        try:
            await self._wait(step, waiting, consumed)
            # the calls before have returned; what their callers do next (put the result on
            # a queue, hand an event on) happened before this call ended while recording
            # too: a moment of the loop's for it
            await asyncio.sleep(SETTLE)
        finally:
            holding.discard(step.step)

    async def _wait(self, step: Step, waiting: list[Step], consumed: Container[int]) -> None:
        deadline = time.monotonic() + PATIENCE
        spins = 0
        holding = self._holding
        while True:
            waiting = [s for s in waiting if s.step not in consumed or s.step in holding]
            if not waiting or self.off:
                return
            if time.monotonic() > deadline:
                self.off = True
                late = waiting[-1]
                asked = "was still waiting itself" if late.step in consumed \
                    else "was not asked for"
                log.warning(
                    "agentreplay: run %s: replayed calls no longer complete in the recorded "
                    "order: step %s (%s %r) ended before step %s (%s %r) while recording, and "
                    "%s after %ss; the rest of the replay returns calls as they are asked for",
                    self.run_id, late.step, late.kind, late.name, step.step, step.kind,
                    step.name, asked, PATIENCE)
                return
            spins += 1
            await asyncio.sleep(0 if spins < _SPINS else 0.001)
