"""`agentreplay demo`: record a small nondeterministic agent, replay it, compare, verify.

The agent is framework-free: a scripted "model" that samples its wording from os.urandom (so
two live runs differ, like a remote LLM at temperature > 0) and a tool that reads the clock and
draws random numbers. Recording captures all of it; replay reproduces the run exactly.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from agentreplay_core._player import Player
from agentreplay_core._recorder import Recorder

OPENINGS = ("Sure!", "Happy to help.", "Let me check.", "Good question.")
VERDICTS = ("bring an umbrella", "sunglasses weather", "a light jacket will do", "stay inside")


def scripted_model(messages: list[dict[str, str]]) -> dict[str, Any]:
    """A stand-in for a remote LLM: its wording is sampled, so live runs differ."""
    pick = int.from_bytes(os.urandom(2), "big")
    last = messages[-1]["content"]
    if messages[-1]["role"] == "user":
        return {"content": OPENINGS[pick % len(OPENINGS)],
                "tool_calls": [{"name": "forecast", "args": {"city": last.split()[-1]},
                                "id": f"call_{pick:04x}"}]}
    return {"content": f"{OPENINGS[pick % len(OPENINGS)]} {last}: "
                       f"{VERDICTS[pick % len(VERDICTS)]}.", "tool_calls": []}


def forecast(city: str) -> str:
    """A tool that depends on the clock and on randomness."""
    now = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    chance = random.random()
    return (f"{city} at {now:%H:%M:%S}: {chance:.0%} chance of rain "
            f"(report {uuid.uuid4().hex[:8]})")


Model = Callable[[list[dict[str, str]]], dict[str, Any]]
Tool = Callable[[str], str]


def run_agent(question: str, model: Model, tool: Tool) -> list[str]:
    """A two-turn tool-calling loop; returns its transcript."""
    messages = [{"role": "user", "content": question}]
    transcript = [f"user: {question}"]
    while True:
        reply = model(messages)
        transcript.append(f"model: {reply['content']}")
        if not reply["tool_calls"]:
            return transcript
        for call in reply["tool_calls"]:
            result = tool(call["args"]["city"])
            transcript.append(f"tool {call['name']}({call['args']['city']}): {result}")
            messages.append({"role": "tool", "content": result})


def recording_backends(recorder: Recorder) -> tuple[Model, Tool]:
    def model(messages: list[dict[str, str]]) -> dict[str, Any]:
        return recorder.call("llm", "scripted-model", {"messages": messages},
                             scripted_model, messages)

    def tool(city: str) -> str:
        return recorder.call("tool", "forecast", {"city": city}, forecast, city)

    return model, tool


def replay_backends(player: Player) -> tuple[Model, Tool]:
    def model(messages: list[dict[str, str]]) -> dict[str, Any]:
        result: dict[str, Any] = player.next("llm", "scripted-model", {"messages": messages})
        return result

    def tool(city: str) -> str:
        return str(player.next("tool", "forecast", {"city": city}))

    return model, tool
