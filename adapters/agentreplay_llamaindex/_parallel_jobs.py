"""`run_jobs` workers start in job order while a run is recorded or tracked.

LlamaIndex's `async_utils.run_jobs` (the metadata extractors, LLM rerankers, batched
embeddings) runs each job in a `worker` span. With `show_progress=True`, the extractors'
default, it gathers them through `tqdm_asyncio.gather`, which starts them in the order of a
*set* (hash and address dependent): the n-th worker to start, whose span the run tree numbers
`run_jobs.<locals>.worker#n`, is another job live than in replay. Jobs sending equal requests
(nodes with equal text) then got each other's recorded answers, silently.

While an instrumentation is active in the calling context, this `run_jobs` hands the
original the jobs with `show_progress` off (plain `asyncio.gather`, which starts them in job
order, so `worker#n` is job n, as in recordings made without a progress bar) and draws the
progress bar itself. Elsewhere the original runs unchanged.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from agentreplay_llamaindex import _routing
from agentreplay_llamaindex._loop_threads import replace_in_llama_index

log = logging.getLogger("agentreplay.llamaindex")

RunJobs = Callable[..., Coroutine[Any, Any, Any]]


class _Progress:
    """A tqdm bar counting finished jobs (nothing when tqdm cannot be imported)."""

    def __init__(self, total: int, desc: Any) -> None:
        self._bar: Any = None
        try:
            # the bar `tqdm_asyncio.gather` would have drawn (tqdm ships no type stubs)
            tqdm: Any = importlib.import_module("tqdm").tqdm
            self._bar = tqdm(total=total, desc=desc)
        except Exception:  # no bar is better than a failed ingestion
            self._bar = None

    def update(self) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


async def _counted(job: Coroutine[Any, Any, Any], progress: _Progress) -> Any:
    try:
        return await job
    finally:
        progress.update()


def _ordered_arguments(signature: inspect.Signature | None, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> inspect.BoundArguments | None:
    """The call's arguments when it asks for a progress bar this shim can draw instead;
    None when the original must run as called (no instrumentation, no progress bar, or a
    `run_jobs` of another shape)."""
    if signature is None or _routing.active() is None:
        return None
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    arguments = bound.arguments
    if not arguments.get("show_progress") or not isinstance(arguments.get("jobs"), list):
        return None
    return bound


def in_job_order(original: RunJobs) -> RunJobs:
    """`original`, but its workers start in job order while a run is recorded or tracked."""
    try:
        signature: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None
    if signature is not None and not {"jobs", "show_progress"} <= set(signature.parameters):
        signature = None  # another shape than the one this shim knows: leave it alone

    async def run_jobs(*args: Any, **kwargs: Any) -> Any:
        bound = _ordered_arguments(signature, args, kwargs)
        if bound is None:
            return await original(*args, **kwargs)
        jobs: list[Coroutine[Any, Any, Any]] = bound.arguments["jobs"]
        progress = _Progress(len(jobs), bound.arguments.get("desc"))
        bound.arguments["jobs"] = [_counted(job, progress) for job in jobs]
        bound.arguments["show_progress"] = False
        try:
            return await original(*bound.args, **bound.kwargs)
        finally:
            progress.close()

    run_jobs.__wrapped__ = original  # type: ignore[attr-defined]
    run_jobs.agentreplay_job_order = True  # type: ignore[attr-defined]
    run_jobs.__doc__ = original.__doc__
    return run_jobs


def install() -> None:
    """Put the job-ordering `run_jobs` in `async_utils`, where modules imported later take it
    from, and in every LlamaIndex module already loaded that took the original by name. Never
    fails the import: a LlamaIndex without `run_jobs` is left as it is."""
    try:
        from llama_index.core import async_utils

        original: RunJobs | None = getattr(async_utils, "run_jobs", None)
        # the original has a `__wrapped__` of its own (its span decorator): look for ours
        if original is None or getattr(original, "agentreplay_job_order", False):
            return
        replace_in_llama_index("run_jobs", original, in_job_order(original))
    except Exception:  # a replay-fidelity repair must not break the host's import
        log.exception("agentreplay: could not make LlamaIndex's run_jobs start jobs in order")
