"""A LangChain tool-calling agent (`create_agent`, langchain 1.x), recorded and replayed.

The agent converts money with two tools whose answers change on every call (a live exchange
rate, a random fee). The run is recorded into the run store; the replay runs the same agent
with one middleware added, `ReplayMiddleware`, which serves the recorded model answers and
tool results: same messages, same ids, and no tool or model runs.

    python examples/langchain_tool_agent.py

Needs `pip install "agentreplay[embedded,langchain]" "langchain>=1"`; uses AGENTREPLAY_DSN if
set, else the embedded PostgreSQL.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from agentreplay_core import open_store
from agentreplay_langchain import ReplayMiddleware, instrument

TOOL_RUNS: list[str] = []  # how often the tools really ran


@tool
def exchange_rate(currency: str) -> float:
    """Today's rate from EUR to `currency` (a live market API in real life)."""
    TOOL_RUNS.append("exchange_rate")
    return round(random.uniform(0.9, 1.2), 4)


@tool
def transfer_fee(amount: float) -> float:
    """The bank's fee for transferring `amount` EUR (it varies, like a real quote)."""
    TOOL_RUNS.append("transfer_fee")
    return round(amount * random.uniform(0.005, 0.02), 2)


class ScriptedModel(GenericFakeChatModel):
    """LangChain's scripted chat model (it answers with the given messages in turn), plus the
    `bind_tools` that `create_agent` calls on a tool-calling model."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


def scripted_model() -> ScriptedModel:
    # a real model would decide this; here it asks for both tools at once, then answers
    return ScriptedModel(messages=iter([
        AIMessage("", tool_calls=[
            {"name": "exchange_rate", "args": {"currency": "USD"}, "id": "call_rate"},
            {"name": "transfer_fee", "args": {"amount": 250.0}, "id": "call_fee"}]),
        AIMessage("Done: the rate and the fee are above."),
    ]))


def run_agent(middleware: Sequence[Any] = ()) -> list[BaseMessage]:
    """The agent under test. Only the middleware differs between recording and replay."""
    agent = create_agent(scripted_model(), [exchange_rate, transfer_fee],
                         system_prompt="You help with money transfers.",
                         middleware=list(middleware))
    state = agent.invoke({"messages": [HumanMessage("I send 250 EUR to the US. Rate and fee?")]})
    return list(state["messages"])


def show(messages: list[BaseMessage]) -> list[tuple[str, str, str | None]]:
    """What we compare: each message's type, text (or tool calls) and id."""
    shown = []
    for m in messages:
        calls = getattr(m, "tool_calls", None)
        text = ", ".join(f"{c['name']}({c['args']})" for c in calls) if calls else m.content
        shown.append((m.type, str(text), m.id))
    return shown


with open_store() as store:
    # Record. entropy=True also records the ids LangGraph draws for messages (uuid4).
    with store.record(name="tool-agent", entropy=True) as rec, instrument(rec):
        live = run_agent()
    steps = store.load_steps(rec.run_id)
    print(f"recorded run {rec.run_id}: {', '.join(f'{s.kind} {s.name}' for s in steps)}")
    for kind, text, _ in show(live):
        print(f"  {kind:>5}: {text}")

    # Replay: the same agent, with ReplayMiddleware. instrument(player) tells the replay which
    # branch each parallel tool call is, so each gets its own recorded result.
    runs_before = len(TOOL_RUNS)
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = run_agent(middleware=[ReplayMiddleware(player)])

    assert show(replayed) == show(live), "the replay must give the recorded messages"
    assert len(TOOL_RUNS) == runs_before, "no tool may run during replay"
    print("replayed: same messages, same ids; the tools did not run")
