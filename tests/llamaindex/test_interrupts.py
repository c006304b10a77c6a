"""A Ctrl-C or `sys.exit()` inside a tool or a model stops the replay where it stopped the
recording, past the agent's own `except Exception:`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.tools import FunctionTool

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from tests.llamaindex.models import ToolCallingLLM

HELLO = [ChatMessage(role=MessageRole.USER, content="hello there")]


def fetch(url: str) -> str:
    """Fetch a page; the user presses Ctrl-C while a slow one loads."""
    if url == "slow":
        raise KeyboardInterrupt
    return f"page at {url}"


async def shutdown(reason: str) -> str:
    """Shut the service down."""
    raise SystemExit(3)


def carrying_on(call: Callable[[], Any]) -> str:
    """Agent code that handles a failing tool and goes on: an interrupt must pass it."""
    try:
        return str(call())
    except Exception as exc:
        return f"tool failed, continuing: {type(exc).__name__}"


def test_a_tool_interrupted_by_ctrl_c_stops_the_replay_too(li_store: Store) -> None:
    tools = [FunctionTool.from_defaults(fn=fetch)]
    with li_store.record(name="ctrl-c") as rec, instrument(rec), \
            pytest.raises(KeyboardInterrupt):
        carrying_on(lambda: tools[0].call(url="slow"))
    [step] = li_store.load_steps(rec.run_id)
    assert step.is_error and step.output["type"] == "KeyboardInterrupt"
    with li_store.replay(rec.run_id) as player, instrument(player), \
            pytest.raises(KeyboardInterrupt):
        carrying_on(lambda: replay_tools(player, tools)[0].call(url="slow"))


def test_an_async_tool_that_exits_replays_its_exit_code(li_store: Store) -> None:
    tools = [FunctionTool.from_defaults(async_fn=shutdown)]
    with li_store.record(name="exit") as rec, instrument(rec), \
            pytest.raises(SystemExit) as live:
        asyncio.run(tools[0].acall(reason="maintenance"))
    with li_store.replay(rec.run_id) as player, instrument(player), \
            pytest.raises(SystemExit) as again:
        asyncio.run(replay_tools(player, tools)[0].acall(reason="maintenance"))
    assert again.value.code == live.value.code == 3


class InterruptedLLM(ToolCallingLLM):
    """Ctrl-C while the request is on the wire."""

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        raise KeyboardInterrupt


def test_a_model_call_interrupted_by_ctrl_c_replays_as_the_interrupt(li_store: Store) -> None:
    with li_store.record(name="llm-ctrl-c") as rec, instrument(rec), \
            pytest.raises(KeyboardInterrupt):
        carrying_on(lambda: InterruptedLLM().chat(HELLO))
    [step] = li_store.load_steps(rec.run_id)
    assert step.is_error and step.output["type"] == "KeyboardInterrupt"
    with li_store.replay(rec.run_id) as player, pytest.raises(KeyboardInterrupt):
        carrying_on(lambda: ReplayLLM(player).chat(HELLO))


def test_a_live_tool_interrupted_after_a_divergence_is_in_the_forked_run(
        li_store: Store) -> None:
    tools = [FunctionTool.from_defaults(fn=fetch)]
    with li_store.record(name="fast") as rec, instrument(rec):
        tools[0].call(url="fast")
    with li_store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player, \
            instrument(player), pytest.raises(KeyboardInterrupt):
        carrying_on(lambda: replay_tools(player, tools)[0].call(url="slow"))  # goes live
    assert player.fork is not None
    [step] = li_store.load_steps(player.fork.run_id)
    assert step.is_error and step.output["type"] == "KeyboardInterrupt"
    with li_store.replay(player.fork.run_id) as again, pytest.raises(KeyboardInterrupt):
        carrying_on(lambda: replay_tools(again, tools)[0].call(url="slow"))
