"""`replay_tools`: tools with the originals' metadata that serve recorded results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.tools.types import AsyncBaseTool, BaseTool, ToolMetadata, ToolOutput

from agentreplay_core import Player
from agentreplay_core._player import checked_player
from agentreplay_llamaindex._convert import (
    tool_output_for_storage,
    tool_output_from_storage,
    tool_request,
)
from agentreplay_llamaindex._live import aserve, serve
from agentreplay_llamaindex._tracking import replay_path


class ReplayTool(AsyncBaseTool):
    """A tool that returns the recorded `ToolOutput` (or raises the recorded error) without
    running anything. What the original tool called inside (a query engine's LLM calls)
    counts as replayed with it.

    With `live` (the original tool) and `store.replay(..., on_divergence="live")`, calls from
    the first divergence on run the original and are recorded into the forked run.
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
        output: ToolOutput = serve(
            self._player, "tool", self._metadata.get_name(), tool_request(args, kwargs),
            live=None if tool is None else lambda: tool(*args, **kwargs),
            to_step=tool_output_for_storage, from_step=tool_output_from_storage,
            path=replay_path())
        return output

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        tool = self._live

        async def run() -> ToolOutput:
            assert tool is not None
            if isinstance(tool, AsyncBaseTool):
                return await tool.acall(*args, **kwargs)
            return tool(*args, **kwargs)

        return await aserve(self._player, "tool", self._metadata.get_name(),
                            tool_request(args, kwargs), live=None if tool is None else run,
                            to_step=tool_output_for_storage,
                            from_step=tool_output_from_storage, path=replay_path())


def replay_tools(player: Player, tools: Sequence[BaseTool], *, live: bool = True
                 ) -> list[ReplayTool]:
    """Replay stand-ins for `tools`: same name, description and schema, recorded results.

    The originals run only in a replay opened with `on_divergence="live"`, from the first
    divergence on (`live=False`: never).
    """
    return [ReplayTool(player, tool.metadata, tool if live else None) for tool in tools]
