"""Concurrent requests: each instrumented in its own thread or asyncio task records into its own
run, holding the same steps as when recorded alone, and replays to its own live output."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from uuid import UUID

import pytest
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool
from llama_index_instrumentation import get_dispatcher

from agentreplay_core import Player, Step, Store, decode, open_store
from agentreplay_llamaindex import (
    ReplayEmbedding,
    ReplayLLM,
    ReplayRetriever,
    instrument,
    replay_tools,
)
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding, SampledLLM, ToolCallingLLM

T = TypeVar("T")
#: (scenario, mode): a query engine in one request, an agent in the other
Job = tuple[str, str]
THREAD_JOBS: list[Job] = [("rag", "sync"), ("agent", "function")]
TASK_JOBS: list[Job] = [("rag", "async_stream"), ("agent", "workflow")]


async def _live(job: Job) -> dict[str, Any]:
    scenario, mode = job
    if scenario == "rag":
        index = scenarios.build_index(HashEmbedding())
        return await scenarios.rag(SampledLLM(), index.as_retriever(similarity_top_k=2), mode)
    return await scenarios.agent(ToolCallingLLM(), scenarios.agent_tools(),
                                 workflow=mode == "workflow")


def _refuse(a: int, b: int) -> int:
    raise AssertionError("a replayed tool was executed")


def _refusing_tools() -> list[BaseTool]:
    """The agent's tools by name and schema, with functions that must never run."""
    return [FunctionTool.from_defaults(fn=_refuse, name=t.metadata.name,
                                       description=t.metadata.description)
            for t in scenarios.agent_tools()]


async def _replayed(job: Job, player: Player) -> dict[str, Any]:
    scenario, mode = job
    if scenario == "rag":
        scenarios.build_index(ReplayEmbedding(player))
        return await scenarios.rag(ReplayLLM(player), ReplayRetriever(player), mode)
    return await scenarios.agent(ReplayLLM(player), replay_tools(player, _refusing_tools()),
                                 workflow=mode == "workflow")


def _handlers() -> tuple[list[Any], list[Any]]:
    root = get_dispatcher()
    return list(root.event_handlers), list(root.span_handlers)


def _record_alone(store: Store, job: Job) -> list[Step]:
    with store.record(name=f"alone-{job[0]}") as rec, instrument(rec):
        asyncio.run(_live(job))
    return store.load_steps(rec.run_id)


def _assert_same_steps(job: Job, got: list[Step], alone: list[Step]) -> None:
    """`got` holds the steps of `job` alone: those of a recording of it made alone."""
    if job[0] == "rag":  # nothing sampled in the requests: every step compares exactly
        assert [(s.kind, s.name, s.path, s.input) for s in got] == \
            [(s.kind, s.name, s.path, s.input) for s in alone]
        return
    # the agent's tool arguments are sampled, and its tools finish in any order
    assert sorted((s.kind, s.name, s.path) for s in got) == \
        sorted((s.kind, s.name, s.path) for s in alone)
    assert (got[0].kind, got[0].input) == ("llm", alone[0].input)  # the user's turn
    # the tools that ran are the ones this run's own model asked for
    asked = decode(got[0].output)["tool_calls"]
    assert sorted(json.dumps(s.input["kwargs"], sort_keys=True) for s in got
                  if s.kind == "tool") == \
        sorted(json.dumps(c["tool_kwargs"], sort_keys=True) for c in asked)


class Meeting:
    """Holds each asyncio task at `wait()` until all have arrived (asyncio.Barrier is 3.11+)."""

    def __init__(self, parties: int) -> None:
        self._missing = parties
        self._all_here = asyncio.Event()

    async def wait(self) -> None:
        self._missing -= 1
        if self._missing == 0:
            self._all_here.set()
        await asyncio.wait_for(self._all_here.wait(), 30)


def _in_threads(work: Callable[[Job], T], jobs: list[Job]) -> list[T]:
    """`work(job)` for each job, each in a thread of its own; re-raises their errors."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return [f.result(timeout=120) for f in [pool.submit(work, job) for job in jobs]]


def _gather(make: Callable[[Job], Coroutine[Any, Any, T]], jobs: list[Job]) -> list[T]:
    """`make(job)` for each job, each in an asyncio task of its own, under one event loop."""
    async def main() -> list[T]:
        return list(await asyncio.gather(*(make(job) for job in jobs)))

    return asyncio.run(main())


def test_two_threads_record_and_replay_their_own_runs(li_store: Store) -> None:
    before = _handlers()
    alone = {job: _record_alone(li_store, job) for job in THREAD_JOBS}
    start, end = threading.Barrier(2, timeout=30), threading.Barrier(2, timeout=30)

    def record(job: Job) -> tuple[dict[str, Any], UUID]:
        with li_store.record(name=f"thread-{job[0]}") as rec, instrument(rec):
            start.wait()  # from here until `end` both runs are instrumented at once
            assert [len(h) for h in _handlers()] == [len(h) + 1 for h in before]  # one router
            live = asyncio.run(_live(job))
            end.wait()
        return live, rec.run_id

    recorded = _in_threads(record, THREAD_JOBS)
    assert _handlers() == before
    for job, (_, run_id) in zip(THREAD_JOBS, recorded, strict=True):
        _assert_same_steps(job, li_store.load_steps(run_id), alone[job])

    def replay(job: Job) -> dict[str, Any]:
        [run_id] = [r for j, (_, r) in zip(THREAD_JOBS, recorded, strict=True) if j == job]
        with li_store.replay(run_id) as player, instrument(player):
            start.wait()  # both replays tracked at once, each with its own span tree
            again = asyncio.run(_replayed(job, player))
            end.wait()
        return again

    assert _in_threads(replay, THREAD_JOBS) == [live for live, _ in recorded]
    assert _handlers() == before


def test_two_tasks_under_one_loop_record_and_replay_their_own_runs(li_store: Store) -> None:
    before = _handlers()
    alone = {job: _record_alone(li_store, job) for job in TASK_JOBS}
    other = open_store("memory:")

    async def record(job: Job, start: Meeting, end: Meeting) -> tuple[dict[str, Any], UUID]:
        with li_store.record(name=f"task-{job[0]}") as rec, instrument(rec) as handle:
            await start.wait()
            assert instrument(rec) is handle
            with other.record(name="nested") as nested:
                # in this task, and in a task it creates: a programming error, not a request
                with pytest.raises(RuntimeError, match=f"{rec.run_id}.*{nested.run_id}"):
                    instrument(nested)
                with pytest.raises(RuntimeError, match=str(rec.run_id)):
                    await asyncio.create_task(_instrument(nested))
            live = await _live(job)
            await end.wait()
        return live, rec.run_id

    start, end = Meeting(2), Meeting(2)
    recorded = _gather(lambda job: record(job, start, end), TASK_JOBS)
    assert _handlers() == before
    for job, (_, run_id) in zip(TASK_JOBS, recorded, strict=True):
        _assert_same_steps(job, li_store.load_steps(run_id), alone[job])

    async def replay(job: Job, start: Meeting) -> dict[str, Any]:
        [run_id] = [r for j, (_, r) in zip(TASK_JOBS, recorded, strict=True) if j == job]
        with li_store.replay(run_id) as player, instrument(player):
            await start.wait()
            return await _replayed(job, player)

    again = Meeting(2)
    assert _gather(lambda job: replay(job, again), TASK_JOBS) == [live for live, _ in recorded]
    assert _handlers() == before


async def _instrument(target: Any) -> None:
    instrument(target).close()  # reached only if instrument() failed to raise
