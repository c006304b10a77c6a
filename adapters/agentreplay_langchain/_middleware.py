"""ReplayMiddleware: switch a whole `create_agent` agent (langchain 1.x) to replay at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel

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

    In a replay opened with `on_divergence="live"`, the model the call was made with (the
    agent's, or the one a fallback middleware put in) and the original tools answer from the
    first divergence on, recorded into the forked run.

    Example:
        >>> agent = create_agent(  # doctest: +SKIP
        ...     model, tools, middleware=[ReplayMiddleware(player)])
    """

    def __init__(self, player: Player) -> None:
        super().__init__()
        self.player = player
        self.model = ReplayChatModel(player=player)
        #: id of an agent's model -> (the model, its stand-in)
        self._stand_ins: dict[int, tuple[Any, ReplayChatModel]] = {}
        self._tool_call = replay_tool_call(player)
        self._atool_call = areplay_tool_call(player)

    def _model_for(self, request: Any) -> ReplayChatModel:
        model = getattr(request, "model", None)
        if not isinstance(model, BaseChatModel) or isinstance(model, ReplayChatModel):
            return self.model
        known = self._stand_ins.get(id(model))
        if known is None or known[0] is not model:
            known = self._stand_ins[id(model)] = (model, self._stand_in(model))
        return known[1]

    def _stand_in(self, model: BaseChatModel) -> ReplayChatModel:
        """The replay model for calls made with `model`, which goes live as `model` where the
        replay may (a stand-in with a live model runs async calls in a thread)."""
        return ReplayChatModel.standing_in_for(model, self.player,
                                               live=self.player.can_go_live)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(_with_model(request, self._model_for(request)))

    async def awrap_model_call(self, request: Any,
                               handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(_with_model(request, self._model_for(request)))

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return self._tool_call(request, handler)

    async def awrap_tool_call(self, request: Any,
                              handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await self._atool_call(request, handler)
