"""Replays a recorded LangGraph run in a fresh process: `python -m tests.langchain.replay_child
DSN SCHEMA RUN_ID` prints the replayed transcript as JSON.

Nothing from the recording process survives here but the database: the tools raise if they
run, the live model is never built, and the store's network guard is on.
"""

from __future__ import annotations

import json
import sys

from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import ToolNode

from agentreplay_core import open_store
from agentreplay_langchain import ReplayChatModel, instrument, replay_tools
from tests.langchain.test_langgraph import build_graph


def tools_that_must_not_run() -> list[BaseTool]:
    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        raise AssertionError("a replayed tool ran")

    @tool
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        raise AssertionError("a replayed tool ran")

    @tool(response_format="content_and_artifact")
    def search(query: str) -> tuple[str, dict[str, object]]:
        """Search the web."""
        raise AssertionError("a replayed tool ran")

    return [weather, add, search]


def main(dsn: str, schema: str, run_id: str) -> None:
    store = open_store(dsn, schema=schema)
    try:
        with store.replay(run_id) as player, instrument(player):
            tools = replay_tools(player, tools_that_must_not_run())
            app = build_graph(ReplayChatModel(player=player), ToolNode(tools), tools)
            messages = app.invoke({"messages": [HumanMessage("a day in Europe")]})["messages"]
    finally:
        store.close()
    print(json.dumps([m.model_dump(mode="json") for m in messages]))


if __name__ == "__main__":
    main(*sys.argv[1:4])
