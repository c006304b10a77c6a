"""Fork and continue (`on_divergence="live"`): at the first divergence, a new run takes over.

The forked run starts with the steps the replay served so far (copied as stored, so values
that cannot be rebuilt here still copy exactly), then records the live calls. Its
`parent_run_id` and `fork_step` point back at the recording it diverged from.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from agentreplay_core._errors import ReplayDivergence
from agentreplay_core._metadata import meta_entropy
from agentreplay_core._model import Run, Step
from agentreplay_core._player import ForkStarter
from agentreplay_core._recorder import Recorder

if TYPE_CHECKING:
    from agentreplay_core._store import Store

log = logging.getLogger("agentreplay")


def fork_starter(store: Store, run: Run, stack: contextlib.ExitStack) -> ForkStarter:
    """What starts the forked run of `run`; `stack` seals it when the replay ends."""
    def start(divergence: ReplayDivergence, served: list[Step]) -> Recorder:
        fork_step = divergence.step or (len(served) + 1)
        recorder = stack.enter_context(store.record(
            name=run.name,
            metadata={"forked_from": str(run.run_id), "divergence": divergence.classification},
            parent_run_id=run.run_id, fork_step=fork_step, _entropy_in_log=meta_entropy(run),
        ))
        for step in served:
            recorder.copy_step(step)
        log.warning("agentreplay: run %s diverged at step %s (%s); continuing live into forked "
                    "run %s", run.run_id, fork_step, divergence.classification, recorder.run_id)
        return recorder

    return start
