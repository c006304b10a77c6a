"""Coroutines LlamaIndex runs on a thread of their own keep the caller's context.

A sync method called while an event loop runs (`SubQuestionQueryEngine(use_async=True)
.query()` in an async app, `FunctionTool.call` of an async function) runs its coroutine
through `llama_index.core.async_utils.asyncio_run`, which then starts a new loop on a new
thread. Before 0.14 that thread did not get the caller's context, which carries the run being
recorded and the active span: every call made there was recorded nowhere, silently, and a
replay then met calls its recording lacked. 0.14 copies the context itself; on older lines this
puts in an `asyncio_run` that does the same, wherever LlamaIndex's modules look it up. Where
no loop is running, the original runs unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("agentreplay.llamaindex")

AsyncioRun = Callable[[Coroutine[Any, Any, Any]], Any]


def copies_context(run: AsyncioRun) -> bool:
    """Whether this `asyncio_run` already runs its thread in the caller's context."""
    code = getattr(run, "__code__", None)
    return code is None or "copy_context" in code.co_names


def in_context(original: AsyncioRun) -> AsyncioRun:
    """`original`, but a coroutine it would run on a new thread runs in the caller's context."""
    def asyncio_run(coro: Coroutine[Any, Any, Any]) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return original(coro)
        context = contextvars.copy_context()

        def run_in_thread() -> Any:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                return context.run(loop.run_until_complete, coro)
            finally:
                loop.close()

        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
            return executor.submit(run_in_thread).result()

    asyncio_run.__wrapped__ = original  # type: ignore[attr-defined]
    asyncio_run.__doc__ = original.__doc__
    return asyncio_run


def install() -> None:
    """Put the context-keeping `asyncio_run` in `async_utils`, where modules imported later
    take it from, and in every LlamaIndex module already loaded that took the original by
    name; only when the original does not keep the context. Never fails the import: a
    LlamaIndex without this function (or one laid out otherwise) is left as it is."""
    try:
        from llama_index.core import async_utils

        original: AsyncioRun | None = getattr(async_utils, "asyncio_run", None)
        if original is None or hasattr(original, "__wrapped__") or copies_context(original):
            return
        replace_in_llama_index("asyncio_run", original, in_context(original))
    except Exception:  # a compatibility repair must not break the host's import
        log.exception("agentreplay: could not make LlamaIndex's asyncio_run keep the context")


def replace_in_llama_index(attribute: str, original: object, patched: object) -> None:
    """Put `patched` wherever a loaded LlamaIndex module holds `original` under `attribute`
    (`async_utils` itself, and the modules that imported it by name)."""
    for name, module in list(sys.modules.items()):
        held = getattr(module, "__dict__", {}).get(attribute)
        if name.startswith("llama_index.") and held is original:
            setattr(module, attribute, patched)
