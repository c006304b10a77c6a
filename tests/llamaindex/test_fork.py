"""Fork and continue: `on_divergence="live"` replays the recorded prefix, then the live
objects answer, and the forked run they are recorded into replays like any recording."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool
from pydantic import Field

from agentreplay_core import ReplayDivergence, Step, Store
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from tests.llamaindex import scenarios
from tests.llamaindex.models import ToolCallingLLM

CHANGED = "Now do it once more, with other numbers."


class CountingLLM(ToolCallingLLM):
    """The scripted model, noting the last message of every request it answers."""

    asked: list[str] = Field(default_factory=list)

    def _reply(self, messages: Sequence[ChatMessage], tools: list[Any]) -> ChatMessage:
        self.asked.append(str(messages[-1].content))
        return super()._reply(messages, tools)


def counted_tools(ran: list[str]) -> list[BaseTool]:
    """add and multiply, noting every time they really run."""

    def add(a: int, b: int) -> int:
        """Add two integers."""
        ran.append("add")
        return a + b

    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        ran.append("multiply")
        return a * b

    return [FunctionTool.from_defaults(fn=add), FunctionTool.from_defaults(fn=multiply)]


async def two_turns(llm: Any, tools: Sequence[BaseTool], second: str, *, workflow: bool
                    ) -> list[str]:
    """Two user turns of one agent; the second sees the first in its chat history."""
    first = await scenarios.agent(llm, tools, workflow=workflow)
    history = [ChatMessage(role=MessageRole.USER, content=scenarios.AGENT_QUESTION),
               ChatMessage(role=MessageRole.ASSISTANT, content=first["text"])]
    then = await scenarios.agent(llm, tools, workflow=workflow, user_msg=second,
                                 chat_history=history)
    return [first["text"], then["text"]]


def shape(step: Step) -> tuple[Any, ...]:
    """What a step's format is made of, without its sampled values."""
    out = step.output if isinstance(step.output, dict) else {}
    kwargs = out.get("request_kwargs")
    return (step.kind, step.name, step.path, sorted(step.input), step.input.get("tools"),
            out.get("metadata"), sorted(out),
            sorted(kwargs) if isinstance(kwargs, dict) else None, out.get("stream"))


def unordered(items: Iterable[Any]) -> list[str]:
    return sorted(repr(i) for i in items)


@pytest.mark.parametrize("workflow", [False, True], ids=["streaming-agent", "workflow"])
def test_agent_continues_live_after_a_changed_prompt(li_store: Store, workflow: bool) -> None:
    ran: list[str] = []
    tools = counted_tools(ran)
    with li_store.record(name="agent") as rec, instrument(rec):
        recorded = asyncio.run(two_turns(ToolCallingLLM(), tools, scenarios.AGENT_QUESTION,
                                         workflow=workflow))
    steps = li_store.load_steps(rec.run_id)
    assert [s.kind for s in steps] == ["llm", "tool", "tool", "llm"] * 2
    ran.clear()

    live = CountingLLM()
    # tracked, so that the live calls are recorded at the paths a recording gives them
    with li_store.replay(rec.run_id, on_divergence="live") as player, instrument(player):
        continued = asyncio.run(two_turns(ReplayLLM(player, live=live),
                                          replay_tools(player, tools), CHANGED,
                                          workflow=workflow))
        fork = player.fork
    assert fork is not None
    # the first turn came from the recording: same answer, no model or tool ran for it
    assert continued[0] == recorded[0]
    # the live model answered from the divergence on: the changed turn and its tool results,
    # with the recorded first turn in its history; the tools ran for that turn only
    assert len(live.asked) == 2 and live.asked[0] == CHANGED
    assert sorted(ran) == ["add", "multiply"]
    assert continued[1] != recorded[1] and continued[1].startswith("done ")

    run = li_store.get_run(fork.run_id)
    assert run.parent_run_id == rec.run_id and run.fork_step == 5
    forked = li_store.load_steps(fork.run_id)
    assert [s.kind for s in forked] == ["llm", "tool", "tool", "llm"] * 2
    # (parallel tools finish in any order, so steps are compared as sets)
    assert unordered((s.input, s.output, s.path) for s in forked[:4]) \
        == unordered((s.input, s.output, s.path) for s in steps[:4])
    # recorded as the handlers record: the same request and output fields, at the same paths
    assert unordered(shape(s) for s in forked[4:]) == unordered(shape(s) for s in steps[4:])

    ran.clear()
    with li_store.replay(fork.run_id) as player:  # network guard on, every step consumed
        again = asyncio.run(two_turns(ReplayLLM(player), replay_tools(player, tools), CHANGED,
                                      workflow=workflow))
    assert again == continued and ran == []


@pytest.mark.parametrize("workflow", [False, True], ids=["streaming-agent", "workflow"])
def test_a_fork_recorded_with_entropy_replays(li_store: Store, workflow: bool) -> None:
    """What the live model draws in a fork (its sampled wording) is recorded inside its steps,
    streamed or not, so the fork replays with nothing left over; before, it was recorded
    beside them and the fork's replay ended in `missing_call`."""
    tools = counted_tools([])
    with li_store.record(name="entropy", entropy=True) as rec, instrument(rec):
        asyncio.run(two_turns(ToolCallingLLM(), tools, scenarios.AGENT_QUESTION,
                              workflow=workflow))
    with li_store.replay(rec.run_id, on_divergence="live") as player, instrument(player):
        continued = asyncio.run(two_turns(ReplayLLM(player, live=CountingLLM()),
                                          replay_tools(player, tools), CHANGED,
                                          workflow=workflow))
        fork = player.fork
    assert fork is not None
    drawn = [s for s in li_store.load_steps(fork.run_id) if s.kind == "random"
             and s.name != "random.seed"]
    assert drawn  # the live model's samples
    with li_store.replay(fork.run_id) as player, instrument(player):
        again = asyncio.run(two_turns(ReplayLLM(player), replay_tools(player, tools), CHANGED,
                                      workflow=workflow))
    assert again == continued


def _text(result: Any) -> str:
    """The text of a response, or of a stream's last chunk."""
    last = list(result)[-1] if hasattr(result, "__next__") else result
    message = getattr(last, "message", None)
    return str(message.content) if message is not None else str(last.text)


async def _atext(result: Any) -> str:
    result = await result
    if hasattr(result, "__anext__"):
        chunks = [c async for c in result]
        return _text(chunks[-1])
    return _text(result)


METHODS = ["chat", "stream_chat", "complete", "stream_complete",
           "achat", "astream_chat", "acomplete", "astream_complete"]


def _ask(llm: Any, method: str, prompts: list[str]) -> list[str]:
    out = []
    for prompt in prompts:
        payload: Any = [ChatMessage(role=MessageRole.USER, content=prompt)] \
            if "chat" in method else prompt
        call = getattr(llm, method)(payload)
        out.append(asyncio.run(_atext(call)) if method.startswith("a") else _text(call))
    return out


@pytest.mark.parametrize("method", METHODS)
def test_every_llm_method_goes_live_from_the_divergence_on(li_store: Store,
                                                           method: str) -> None:
    with li_store.record(name=method) as rec, instrument(rec):
        recorded = _ask(ToolCallingLLM(), method, ["one", "two", "three"])
    live = CountingLLM()
    with li_store.replay(rec.run_id, on_divergence="live") as player:
        continued = _ask(ReplayLLM(player, live=live), method, ["one", "TWO", "three"])
        fork = player.fork
    assert fork is not None and continued[0] == recorded[0]  # served from the recording
    # sampled answers: the diverging call and the one after it (which the recording holds)
    # were answered by the live model
    assert continued[1] != recorded[1] and continued[2] != recorded[2]
    if "chat" in method:
        assert live.asked == ["TWO", "three"]
    assert len(li_store.load_steps(fork.run_id)) == 3
    with li_store.replay(fork.run_id) as player:
        assert _ask(ReplayLLM(player), method, ["one", "TWO", "three"]) == continued


def test_without_live_mode_or_live_object_a_divergence_still_raises(li_store: Store) -> None:
    with li_store.record(name="one") as rec, instrument(rec):
        ToolCallingLLM().complete("one")
    live = CountingLLM()
    with pytest.raises(ReplayDivergence), li_store.replay(rec.run_id, allow_unused=True) as p:
        ReplayLLM(p, live=live).complete("changed")
    with pytest.raises(ReplayDivergence), \
            li_store.replay(rec.run_id, on_divergence="live") as p:
        ReplayLLM(p).complete("changed")
    assert live.asked == [] and len(li_store.list_runs()) == 1


def test_a_live_stream_the_host_abandons_is_recorded_as_abandoned(li_store: Store) -> None:
    def first_chunk(llm: Any, prompt: str) -> str:
        stream = llm.stream_chat([ChatMessage(role=MessageRole.USER, content=prompt)])
        text = str(next(stream).message.content)
        stream.close()  # the host stops reading
        return text

    with li_store.record(name="abandon") as rec, instrument(rec):
        first_chunk(ToolCallingLLM(), "one")
    with li_store.replay(rec.run_id, on_divergence="live") as player:
        live_text = first_chunk(ReplayLLM(player, live=CountingLLM()), "TWO")
        fork = player.fork
    assert fork is not None
    [step] = li_store.load_steps(fork.run_id)
    assert step.output["abandoned"] is True and len(step.output["chunks"]) == 1
    with li_store.replay(fork.run_id) as player:
        assert first_chunk(ReplayLLM(player), "TWO") == live_text == "done "
