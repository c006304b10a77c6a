"""A LlamaIndex `FunctionAgent` with tools, recorded and replayed.

The agent's LLM asks for two tool calls at once (LlamaIndex runs them in parallel), whose
results are random, then answers with them. `instrument(recorder)` records the LLM calls and
the tool calls; the replay builds the same agent with `ReplayLLM` and `replay_tools`, which
serve the recorded answers and results without running the tools.

    python examples/llamaindex_function_agent.py

Needs `pip install "agentreplay[embedded,llamaindex]"`; uses AGENTREPLAY_DSN if set, else the
embedded PostgreSQL.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms import LLM
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import BaseTool, FunctionTool

from agentreplay_core import open_store
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools

TOOL_RUNS: list[str] = []  # how often the tools really ran


def stock_level(item: str) -> int:
    """How many of `item` the warehouse holds right now."""
    TOOL_RUNS.append(item)
    return random.randint(0, 500)


TOOLS: list[BaseTool] = [FunctionTool.from_defaults(fn=stock_level)]


def scripted_reply(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """What the LLM stand-in says: first two tool calls at once, then an answer quoting the
    tool results (a real LLM would write it; LlamaIndex's MockFunctionCallingLLM calls this)."""
    results = [str(m.content) for m in messages if m.role == MessageRole.TOOL]
    if results:
        return ChatMessage(role=MessageRole.ASSISTANT,
                           content=f"In stock: {' and '.join(results)} (chairs, desks).")
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[
        ToolCallBlock(tool_call_id="call_chairs", tool_name="stock_level",
                      tool_kwargs={"item": "chairs"}),
        ToolCallBlock(tool_call_id="call_desks", tool_name="stock_level",
                      tool_kwargs={"item": "desks"})])


async def run_agent(llm: LLM, tools: Sequence[BaseTool]) -> str:
    """The agent under test; only the LLM and the tools differ between record and replay."""
    agent = FunctionAgent(tools=list(tools), llm=llm,
                          system_prompt="You answer questions about the warehouse.")
    output: Any = await agent.run(user_msg="How many chairs and desks do we have?")
    return str(output.response.content)


async def main() -> None:
    with open_store() as store:
        with store.record(name="function-agent") as rec, instrument(rec):
            live = await run_agent(MockFunctionCallingLLM(response_generator=scripted_reply),
                                   TOOLS)
        steps = store.load_steps(rec.run_id)
        print(f"recorded run {rec.run_id}: {', '.join(f'{s.kind} {s.name}' for s in steps)}")
        print(f"  answer: {live}")

        # Replay. instrument(player) tracks the run tree, so the two parallel tool calls are
        # each served their own recorded result.
        runs_before = len(TOOL_RUNS)
        with store.replay(rec.run_id) as player, instrument(player):
            replayed = await run_agent(ReplayLLM(player), replay_tools(player, TOOLS))

        assert replayed == live
        assert len(TOOL_RUNS) == runs_before, "no tool may run during replay"
        print("replayed: same answer; the tools did not run")


asyncio.run(main())
