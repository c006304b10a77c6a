"""Deleting old runs (`agentreplay prune`): which runs go, and deleting them.

A run is pruned when it started before the cutoff, matches the statuses asked for (any, if
none), and carries none of the tags to keep. A run still `recording` is never pruned: reading
the list marks runs whose recording process died on this host `incomplete` first, so what
stays `recording` is alive, or recorded on another host where its process cannot be checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from agentreplay_core._errors import RunNotFound
from agentreplay_core._model import Run, RunStatus
from agentreplay_core._store import Store

__all__ = ["PrunePlan", "plan_prune", "prune"]


@dataclass
class PrunePlan:
    cutoff: datetime
    #: runs to delete, newest first
    delete: list[Run] = field(default_factory=list)
    #: old enough, but still recording (a live process, or one on another host)
    still_recording: list[Run] = field(default_factory=list)


def plan_prune(store: Store, older_than: timedelta, *, keep_tags: Iterable[str] = (),
               statuses: Iterable[RunStatus | str] = (), now: datetime | None = None
               ) -> PrunePlan:
    """The runs `prune` would delete: started more than `older_than` ago (see the module)."""
    cutoff = (now or datetime.now(timezone.utc)) - older_than
    keep = frozenset(keep_tags)
    wanted = frozenset(RunStatus(s) for s in statuses)
    plan = PrunePlan(cutoff)
    for run in store.list_runs(limit=None, before=cutoff):
        if wanted and run.status not in wanted:
            continue
        tags = run.metadata.get("tags")
        if keep and isinstance(tags, list) and keep.intersection(map(str, tags)):
            continue
        (plan.still_recording if run.status == RunStatus.RECORDING else plan.delete).append(run)
    return plan


def prune(store: Store, plan: PrunePlan, *,
          progress: Callable[[int, int], None] | None = None) -> list[Run]:
    """Delete the runs of `plan` (each with its steps and vectors); returns those deleted.

    A run that another process deleted meanwhile is skipped.
    """
    deleted: list[Run] = []
    for number, run in enumerate(plan.delete, 1):
        try:
            store.delete_run(run.run_id)
        except RunNotFound:
            continue
        deleted.append(run)
        if progress is not None:
            progress(number, len(plan.delete))
    return deleted
