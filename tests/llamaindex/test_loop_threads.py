"""Coroutines LlamaIndex runs on a thread of its own (a sync call made while an event loop
runs) are recorded in the run of the code that made the call, on every supported line."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import sys
import types
from typing import Any

import pytest
from llama_index.core import async_utils
from llama_index.core.tools import FunctionTool

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, _loop_threads, instrument
from tests.llamaindex.models import SampledLLM


def test_a_sync_call_inside_a_running_loop_is_recorded_in_the_callers_run(
        li_store: Store) -> None:
    llm = SampledLLM()

    async def summarize(topic: str) -> str:
        """Summarize a topic with the model."""
        return str((await llm.acomplete(f"Summarize {topic}")).text)

    def run(tool: FunctionTool) -> str:
        async def agent() -> str:
            # the sync API of a tool built on an async function, called from async code:
            # LlamaIndex runs the coroutine on a new loop in a new thread
            return str(tool.call(topic="replay"))
        return asyncio.run(agent())

    with li_store.record(name="loop-thread") as rec, instrument(rec):
        live = run(FunctionTool.from_defaults(async_fn=summarize))
    steps = li_store.load_steps(rec.run_id)
    assert [(s.kind, s.name) for s in steps] == [("llm", "sampled-llm"), ("tool", "summarize")]
    assert steps[0].path.startswith(steps[1].path + "/")  # recorded inside the tool's call

    # the real tool runs again, its model served by the replay
    with li_store.replay(rec.run_id) as player, instrument(player):
        replay_llm = ReplayLLM(player)

        async def replayed(topic: str) -> str:
            """Summarize a topic with the model."""
            return str((await replay_llm.acomplete(f"Summarize {topic}")).text)

        assert run(FunctionTool.from_defaults(async_fn=replayed, name="summarize")) == live


def test_asyncio_run_keeps_the_callers_context_with_or_without_a_running_loop() -> None:
    seen = contextvars.ContextVar("seen", default="unset")
    seen.set("caller")

    async def read() -> tuple[str, bool]:
        return seen.get(), asyncio.get_running_loop().is_running()

    assert async_utils.asyncio_run(read()) == ("caller", True)

    async def nested() -> tuple[str, bool]:
        return async_utils.asyncio_run(read())  # type: ignore[no-any-return]

    assert asyncio.run(nested()) == ("caller", True)


def test_install_repairs_an_asyncio_run_that_loses_the_context(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def losing(coro: Any) -> Any:  # the 0.12/0.13 shape: a new loop in a bare thread
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, coro).result()

    holder = types.ModuleType("llama_index.agentreplay_test_holder")
    holder.asyncio_run = losing  # type: ignore[attr-defined]  # imported by name
    monkeypatch.setitem(sys.modules, holder.__name__, holder)
    monkeypatch.setattr(async_utils, "asyncio_run", losing)
    seen = contextvars.ContextVar("seen", default="unset")

    async def read() -> str:
        return seen.get()

    async def nested(run: Any) -> str:
        seen.set("caller")
        return str(run(read()))

    assert asyncio.run(nested(losing)) == "unset"
    _loop_threads.install()
    repairs: list[Any] = [async_utils.asyncio_run, holder.asyncio_run]
    for repaired in repairs:
        assert repaired is not losing and repaired.__wrapped__ is losing
        assert asyncio.run(nested(repaired)) == "caller"
    _loop_threads.install()  # once only
    assert getattr(async_utils.asyncio_run, "__wrapped__", None) is losing

    monkeypatch.delattr(async_utils, "asyncio_run")
    _loop_threads.install()  # a LlamaIndex without it is left alone, and the import works
