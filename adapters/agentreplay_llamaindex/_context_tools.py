"""Stand-ins and wrappers of tools that take the workflow `Context`.

An agent passes its `Context` to a tool only if the tool is a `FunctionTool` whose function has
a `Context` parameter (`requires_context`, `ctx_param_name`). A stand-in or wrapper of such a
tool must look like one, or the tool is called without it (and a `FunctionTool` inside then
fails with "Context is required for this tool").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool

T = TypeVar("T")


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


def made_for(tool: BaseTool, plain: Callable[..., T], taking: Callable[..., T], *args: Any) -> T:
    """`plain(*args)`, or `taking(*args)` (a `TakesContext` class) set to take the Context
    where `tool` takes one: a wrapper or stand-in of `tool` that agents treat as they treat it."""
    param = context_param(tool)
    made = (plain if param is None else taking)(*args)
    if param is not None and isinstance(made, TakesContext):
        made.takes_context(param)
    return made
