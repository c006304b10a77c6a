"""A replay stand-in built without a player says so at once, by name, instead of failing at
its first call with an AttributeError that names nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentreplay_llamaindex import (
    ReplayEmbedding,
    ReplayLLM,
    ReplayReranker,
    ReplayRetriever,
    replay_tools,
)
from tests.llamaindex import scenarios

STAND_INS: dict[str, Callable[[Any], object]] = {
    "ReplayLLM": ReplayLLM,
    "ReplayEmbedding": ReplayEmbedding,
    "ReplayRetriever": ReplayRetriever,
    "ReplayReranker": ReplayReranker,
    "ReplayTool": lambda player: replay_tools(player, scenarios.agent_tools()),
}


@pytest.mark.parametrize("name", list(STAND_INS))
@pytest.mark.parametrize("given", [None, "3f2a9c1e"], ids=["None", "a run id"])
def test_a_stand_in_without_a_player_is_a_named_type_error(name: str, given: Any) -> None:
    with pytest.raises(TypeError, match=f"^{name} needs the Player of a replay .*, not "
                                        f"{type(given).__name__}$"):
        STAND_INS[name](given)
