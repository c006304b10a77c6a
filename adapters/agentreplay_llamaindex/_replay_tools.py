"""`replay_tools`: tools with the originals' metadata that serve recorded results."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llama_index.core.async_utils import asyncio_run
from llama_index.core.tools.types import AsyncBaseTool, BaseTool, ToolMetadata, ToolOutput

from agentreplay_core import Player
from agentreplay_core._player import checked_player
from agentreplay_llamaindex._context_tools import TakesContext, made_for
from agentreplay_llamaindex._convert import (
    tool_output_from_storage,
    tool_request,
)
from agentreplay_llamaindex._live import aserve, serve
from agentreplay_llamaindex._tracking import replay_path
from agentreplay_llamaindex._workflow_state import (
    WORKFLOW_STATE,
    apply,
    context_in,
    snapshot,
    tool_step_output,
)

log = logging.getLogger("agentreplay.llamaindex")


class ReplayTool(AsyncBaseTool):
    """A tool that returns the recorded `ToolOutput` (or raises the recorded error) without
    running anything. What the original tool called inside (a query engine's LLM calls)
    counts as replayed with it.

    With `live` (the original tool) and `store.replay(..., on_divergence="live")`, calls from
    the first divergence on run the original and are recorded into the forked run.

    What the recorded tool wrote to the workflow's state (`ctx.store`) is written again into
    the Context the call is given (`replay_tools` makes the stand-in of a tool that takes the
    Context one that agents pass it to).
    """

    def __init__(self, player: Player, metadata: ToolMetadata,
                 live: BaseTool | None = None) -> None:
        self._player = checked_player(player, "ReplayTool")
        self._metadata = metadata
        self._live = live

    @property
    def metadata(self) -> ToolMetadata:
        return self._metadata

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        tool = self._live
        served: list[Mapping[str, Any]] = []
        output: ToolOutput = serve(
            self._player, "tool", self._metadata.get_name(), tool_request(args, kwargs),
            live=None if tool is None else lambda: tool(*args, **kwargs),
            to_step=self._storing(args, kwargs), from_step=_keeping(served),
            path=replay_path())
        changes = self._state_changes(served, args, kwargs)
        if changes is not None:
            asyncio_run(apply(*changes))
        return output

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        tool = self._live

        async def run() -> ToolOutput:
            assert tool is not None
            if isinstance(tool, AsyncBaseTool):
                return await tool.acall(*args, **kwargs)
            return tool(*args, **kwargs)

        served: list[Mapping[str, Any]] = []
        output: ToolOutput = await aserve(
            self._player, "tool", self._metadata.get_name(), tool_request(args, kwargs),
            live=None if tool is None else run, to_step=self._storing(args, kwargs),
            from_step=_keeping(served), path=replay_path())
        changes = self._state_changes(served, args, kwargs)
        if changes is not None:
            await apply(*changes)
        return output

    def _storing(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                 ) -> Callable[[ToolOutput], dict[str, Any]]:
        """How a call that goes live is recorded into the forked run: as a recording records
        it, with what it wrote to the workflow's state (against the state before the call,
        taken only where the replay can go live)."""
        ctx = context_in((args, kwargs)) \
            if self._live is not None and self._player.can_go_live else None
        before = snapshot(ctx) if ctx is not None else None
        state = (ctx, before) if before is not None else None
        return lambda output: tool_step_output(output, state)

    def _state_changes(self, served: list[Mapping[str, Any]], args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
        """The Context and the state changes to write into it, if the served step has any
        (a call that went live changed the state itself)."""
        recorded = served[0].get(WORKFLOW_STATE) if served else None
        if not recorded:
            return None
        ctx = context_in((args, kwargs))
        if ctx is None:
            log.warning(
                "agentreplay: run %s: tool %r changed the workflow state when recorded, but "
                "its replay stand-in was given no workflow Context to change: the replay's "
                "state differs from here on (make the stand-in with replay_tools(), which "
                "agents pass the Context to)", self._player.run_id, self._metadata.get_name())
            return None
        return ctx, recorded


def _keeping(served: list[Mapping[str, Any]]) -> Callable[[Mapping[str, Any]], ToolOutput]:
    """`tool_output_from_storage` that also keeps the step it read."""
    def read(stored: Mapping[str, Any]) -> ToolOutput:
        served.append(stored)
        return tool_output_from_storage(stored)
    return read


class ReplayContextTool(ReplayTool, TakesContext):
    """A `ReplayTool` for a tool that takes the workflow Context: agents pass the Context
    only to a `FunctionTool` that says it takes one, and this one says so."""


def replay_tools(player: Player, tools: Sequence[BaseTool], *, live: bool = True
                 ) -> list[ReplayTool]:
    """Replay stand-ins for `tools`: same name, description and schema, recorded results.

    The originals run only in a replay opened with `on_divergence="live"`, from the first
    divergence on (`live=False`: never). The stand-in of a tool that takes the workflow
    Context takes it too, and writes what the tool wrote to the workflow's state.
    """
    return [made_for(tool, ReplayTool, ReplayContextTool, player, tool.metadata,
                     tool if live else None) for tool in tools]
