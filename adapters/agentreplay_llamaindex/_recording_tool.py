"""`RecordingTool`: keeps a sync tool's nested calls attributed to it when run in a thread.

Before llama-index-core 0.14.22 `FunctionTool.acall` runs a sync function in a thread pool
without copying the context. The context carries the run `instrument()` records into and the
active span, so the calls the tool makes there (a query engine's LLM calls) are recorded
nowhere: replaying the tool does not need them, but replaying with the tool run live does.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Sequence
from typing import Any

from llama_index.core.tools.types import AsyncBaseTool, BaseTool, ToolMetadata, ToolOutput

from agentreplay_llamaindex._context_tools import TakesContext, made_for


class RecordingTool(AsyncBaseTool):
    """Wraps a tool; `acall` runs a sync tool in a thread with the caller's context copied
    (its instrumentation and active span), so the calls it makes are recorded below it.

    Recording needs no wrapper otherwise: tools are recorded through their spans.
    """

    def __init__(self, tool: BaseTool) -> None:
        self.tool = tool

    @property
    def metadata(self) -> ToolMetadata:
        return self.tool.metadata

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return self.tool(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        # FunctionTool keeps the function it was given; a sync one is what loses its context
        real = getattr(self.tool, "_real_fn", None)
        is_sync = real is not None and not inspect.iscoroutinefunction(real)
        if isinstance(self.tool, AsyncBaseTool) and not is_sync:
            return await self.tool.acall(*args, **kwargs)
        context = contextvars.copy_context()
        call = functools.partial(self.tool.call if isinstance(self.tool, AsyncBaseTool)
                                 else self.tool.__call__, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, context.run, call)


class RecordingContextTool(RecordingTool, TakesContext):
    """A `RecordingTool` around a tool that takes the workflow Context, which agents pass
    it (and it passes on)."""


def recording_tools(tools: Sequence[BaseTool]) -> list[RecordingTool]:
    """`RecordingTool` around each of `tools` (taking the Context where the tool does)."""
    return [made_for(tool, RecordingTool, RecordingContextTool, tool) for tool in tools]
