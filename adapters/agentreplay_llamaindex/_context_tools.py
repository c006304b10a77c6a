"""Stand-ins and wrappers of tools that take the workflow `Context`.

An agent passes its `Context` to a tool only if the tool is a `FunctionTool` whose function has
a `Context` parameter (`requires_context`, `ctx_param_name`). A stand-in or wrapper of such a
tool must look like one, or the tool is called without it (and a `FunctionTool` inside then
fails with "Context is required for this tool").
"""

from __future__ import annotations

from typing import Any

from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool


def context_param(tool: BaseTool) -> str | None:
    """The name of `tool`'s Context parameter, if it takes one."""
    if isinstance(tool, FunctionTool) and getattr(tool, "requires_context", False):
        return getattr(tool, "ctx_param_name", None)
    return None


class TakesContext(FunctionTool):
    """Mixed in after a tool class that implements `call`, `acall` and `metadata` itself: it
    adds only what agents read to decide to pass the Context (FunctionTool's own `__init__`,
    which needs a function, is never run)."""

    def takes_context(self, param: str) -> None:
        self.requires_context = True
        self.ctx_param_name = param
        self.partial_params: dict[str, Any] = {}  # read by FunctionTool.__call__
