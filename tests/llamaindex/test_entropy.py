"""`entropy=True` with LlamaIndex agents: the agent's own clock and ids replay, while what
LlamaIndex, its workflows and its instrumentation draw for their bookkeeping (span and event
ids, timestamps, run ids) and what a model draws inside its call are not asked for again."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from agentreplay_core import Store
from agentreplay_core._keys import is_inside
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from tests.llamaindex import scenarios
from tests.llamaindex.models import ToolCallingLLM


async def _ticketed_agent(llm: Any, tools: Any, workflow: bool) -> dict[str, Any]:
    """The agent between two ids of the host's own, made through the uuid module."""
    before = str(uuid.uuid4())
    out = await scenarios.agent(llm, tools, workflow=workflow)
    return {**out, "ids": [before, str(uuid.uuid4())]}


@pytest.mark.parametrize("workflow", [False, True], ids=["agent", "workflow"])
def test_an_agent_recorded_with_entropy_replays_twice_in_one_process(
        li_store: Store, workflow: bool) -> None:
    tools = scenarios.agent_tools()
    with li_store.record(name="li-entropy", entropy=True) as rec, instrument(rec):
        live = asyncio.run(_ticketed_agent(ToolCallingLLM(), tools, workflow))
    steps = li_store.load_steps(rec.run_id)
    llm_paths = [s.path for s in steps if s.kind == "llm"]
    drawn = [s for s in steps if s.kind in ("random", "uuid", "time")
             and s.name != "random.seed"]
    # the host's two ids, and the model's own draws (its sampled ids) inside its calls
    assert [s.name for s in drawn if not any(is_inside(s.path, p) for p in llm_paths)] \
        == ["uuid.uuid4", "uuid.uuid4"]
    assert len(drawn) > 2
    for _ in range(2):  # a second replay must not collide with the first one's workflow ids
        with li_store.replay(rec.run_id) as player:
            again = asyncio.run(_ticketed_agent(ReplayLLM(player),
                                                replay_tools(player, tools), workflow))
        assert again == live
