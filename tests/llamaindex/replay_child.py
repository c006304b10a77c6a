"""Replays recorded runs in a fresh process: `python -m tests.llamaindex.replay_child DSN
SCHEMA` reads jobs (JSON list of {"scenario", "run_id", "mode"}) on stdin and prints results.

Nothing from the recording process survives here but the database: the tools given to the
agents raise if executed, and the store's network guard is on.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from typing import Any

from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool

from agentreplay_core import NetworkAccessDuringReplay, Player, open_store
from agentreplay_llamaindex import (
    ReplayEmbedding,
    ReplayLLM,
    ReplayRetriever,
    replay_tools,
)
from tests.llamaindex import scenarios


def _never(a: int, b: int) -> int:
    raise AssertionError("a replayed tool was executed")


def _originals() -> list[BaseTool]:
    """Tools with the recorded names and schemas whose functions must never run."""
    return [FunctionTool.from_defaults(fn=_never, name=t.metadata.name,
                                       description=t.metadata.description)
            for t in scenarios.agent_tools()]


def _guard_is_on() -> bool:
    try:
        socket.create_connection(("192.0.2.1", 9), timeout=0.5).close()
    except NetworkAccessDuringReplay:
        return True
    except OSError:
        return False
    return False


def _replay(player: Player, job: dict[str, Any]) -> dict[str, Any]:
    scenario = job["scenario"]
    if scenario == "rag":
        scenarios.build_index(ReplayEmbedding(player))  # the index embeddings, replayed
        return asyncio.run(scenarios.rag(ReplayLLM(player), ReplayRetriever(player),
                                         job["mode"]))
    if scenario in ("agent", "workflow"):
        return asyncio.run(scenarios.agent(ReplayLLM(player),
                                           replay_tools(player, _originals()),
                                           workflow=scenario == "workflow"))
    return scenarios.structured(ReplayLLM(player))


def main() -> None:
    dsn, schema = sys.argv[1], sys.argv[2]
    results = []
    with open_store(dsn, schema=schema) as store:
        for job in json.loads(sys.stdin.read()):
            with store.replay(job["run_id"]) as player:
                result = _replay(player, job)
                result["guard"] = _guard_is_on()
            results.append(result)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
