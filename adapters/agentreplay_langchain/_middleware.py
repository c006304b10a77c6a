"""ReplayMiddleware: switch a whole `create_agent` agent (langchain 1.x) to replay at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware

from agentreplay_core import Player
from agentreplay_langchain._chat_model import ReplayChatModel
from agentreplay_langchain._tools import areplay_tool_call, replay_tool_call


def _with_model(request: Any, model: ReplayChatModel) -> Any:
    if hasattr(request, "override"):
        return request.override(model=model)
    request.model = model  # langchain 1.0 had no override()
    return request


class ReplayMiddleware(AgentMiddleware):
    """Agent middleware that answers model calls from the recording (`ReplayChatModel`) and
    tool calls from the recording (`ReplayTool`), without running the originals.

    Example:
        >>> agent = create_agent(  # doctest: +SKIP
        ...     model, tools, middleware=[ReplayMiddleware(player)])
    """

    def __init__(self, player: Player) -> None:
        super().__init__()
        self.player = player
        self.model = ReplayChatModel(player=player)
        self._tool_call = replay_tool_call(player)
        self._atool_call = areplay_tool_call(player)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(_with_model(request, self.model))

    async def awrap_model_call(self, request: Any,
                               handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(_with_model(request, self.model))

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return self._tool_call(request, handler)

    async def awrap_tool_call(self, request: Any,
                              handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await self._atool_call(request, handler)
