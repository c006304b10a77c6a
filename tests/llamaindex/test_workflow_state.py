"""Agent tools that write the workflow's state (`ctx.store`): what they wrote is part of their
recorded result, so a replay that serves the tool (never running it) leaves the state as the
recording did, and the agent's next turn, which renders that state into its prompt, replays."""

from __future__ import annotations

import asyncio
import json
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.llm import LLM
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool
from llama_index.core.workflow import Context, StartEvent, StopEvent, Workflow, step

from agentreplay_core import Session, Store
from agentreplay_core._codec import canonical_bytes, encode
from agentreplay_llamaindex import (
    ReplayLLM,
    instrument,
    recording_tools,
    replay_tools,
    replayable_llm,
    replayable_tools,
)
from agentreplay_llamaindex._workflow_state import apply, changed_since, snapshot
from tests.llamaindex.models import ToolCallingLLM, sample

calls: list[str] = []


async def remember(ctx: Context, topic: str) -> str:
    """Keep a note on the topic in the agent's state."""
    calls.append(topic)
    note = f"{topic}:{sample()}"  # what the tool wrote is its own, unrepeatable result
    async with ctx.store.edit_state() as state:
        state["state"]["notes"].append(note)
        state["state"]["last"] = {"topic": topic, "n": len(state["state"]["notes"])}
        state["scratch_" + topic] = note  # a key of its own beside the agent's `state`
    return f"noted {topic}"


def forget_last(ctx: Context) -> str:
    """Drop the newest note (a sync tool: run by the agent in a worker thread)."""
    calls.append("forget")
    return "forgot"


async def remember_then_fail(ctx: Context, topic: str) -> str:
    """Keep a note, then fail to file it (the note stays: the agent sees the error)."""
    await remember(ctx, topic)
    raise ConnectionError(f"filing {topic} failed")


# FunctionTool finds the Context parameter by its annotation, which must be the real class
remember.__annotations__ = {"ctx": Context, "topic": str, "return": str}
forget_last.__annotations__ = {"ctx": Context, "return": str}
remember_then_fail.__annotations__ = {"ctx": Context, "topic": str, "return": str}


def note_tools() -> list[BaseTool]:
    return [FunctionTool.from_defaults(fn=remember)]


async def conversation(llm: LLM, tools: Sequence[BaseTool], turns: int = 3,
                       asks: Sequence[str] = ()) -> dict[str, Any]:
    """`turns` runs of one agent on one Context: each turn's prompt renders the state the
    previous turns' tools left (the agent formats `state` into the user message). The user
    says `asks[i]` on turn i, or "turn i"."""
    agent = FunctionAgent(name="notes", description="Keeps notes.", tools=list(tools), llm=llm,
                          system_prompt="Take notes.")
    workflow = AgentWorkflow(agents=[agent], initial_state={"notes": []})
    ctx = Context(workflow)
    answers = []
    for turn in range(turns):
        ask = asks[turn] if turn < len(asks) else f"turn {turn}"
        output: Any = await workflow.run(user_msg=ask, ctx=ctx)
        answers.append(str(output.response.content))
    state = await ctx.store.get_state()
    kept = {k: v for k, v in state.items() if k == "state" or k.startswith("scratch_")}
    return {"answers": answers, "state": kept}


def test_state_a_tool_wrote_is_replayed_without_running_the_tool(li_store: Store) -> None:
    with li_store.record(name="state") as rec, instrument(rec):
        live = asyncio.run(conversation(ToolCallingLLM(), note_tools()))
    assert len(live["state"]["state"]["notes"]) == 3  # one note per turn, each sampled
    calls.clear()
    with li_store.replay(rec.run_id) as player:
        again = asyncio.run(conversation(ReplayLLM(player), replay_tools(player, note_tools())))
    assert calls == []
    assert again == live


def test_state_a_tool_wrote_before_raising_is_replayed_with_its_error(li_store: Store) -> None:
    tools = [FunctionTool.from_defaults(fn=remember_then_fail)]
    with li_store.record(name="state-error") as rec, instrument(rec):
        live = asyncio.run(conversation(ToolCallingLLM(), tools, turns=2))
    steps = [s for s in li_store.load_steps(rec.run_id) if s.kind == "tool"]
    assert len(steps) == 2 and all(s.is_error and "workflow_state" in s.output for s in steps)
    assert len(live["state"]["state"]["notes"]) == 2  # the agent went on after each error
    calls.clear()
    with li_store.replay(rec.run_id) as player:  # turn 1's prompt renders turn 0's note
        again = asyncio.run(conversation(ReplayLLM(player), replay_tools(player, tools),
                                         turns=2))
    assert calls == [] and again == live


def test_only_what_the_tool_changed_is_stored(li_store: Store) -> None:
    with li_store.record(name="stored") as rec, instrument(rec):
        live = asyncio.run(conversation(ToolCallingLLM(), note_tools(), turns=1))
    [tool] = [s for s in li_store.load_steps(rec.run_id) if s.kind == "tool"]
    changes = tool.output["workflow_state"]
    [note] = live["state"]["state"]["notes"]
    topic = note.split(":")[0]
    # the changed parts at their paths, in the order the tool wrote them, with the key order
    # of a dict not in sorted order; not the agent's memory nor its counters
    assert changes == {"set": [[["state", "notes"], [note]],
                               [["state", "last"], {"n": 1, "topic": topic},
                                {"keys": ["topic", "n"]}],
                               [["scratch_" + topic], note]],
                       "unset": []}


def test_a_replay_gone_live_records_the_state_its_tools_write(li_store: Store) -> None:
    with li_store.record(name="fork") as rec, instrument(rec):
        recorded = asyncio.run(conversation(ToolCallingLLM(), note_tools()))
    calls.clear()
    changed = ["turn 0", "turn 1, differently"]
    with li_store.replay(rec.run_id, on_divergence="live") as player, instrument(player):
        continued = asyncio.run(conversation(ReplayLLM(player, live=ToolCallingLLM()),
                                             replay_tools(player, note_tools()), asks=changed))
        fork = player.fork
    assert fork is not None
    assert continued["answers"][0] == recorded["answers"][0]
    assert len(calls) == 2  # turns 1 and 2 ran live; turn 0's tool was served
    notes = continued["state"]["state"]["notes"]
    assert notes[0] == recorded["state"]["state"]["notes"][0] and len(notes) == 3
    assert notes[1:] != recorded["state"]["state"]["notes"][1:]
    calls.clear()
    with li_store.replay(fork.run_id) as player:
        again = asyncio.run(conversation(ReplayLLM(player), replay_tools(player, note_tools()),
                                         asks=changed))
    assert calls == [] and again == continued


def test_a_tool_that_changes_nothing_stores_no_state(li_store: Store) -> None:
    tools = [FunctionTool.from_defaults(fn=forget_last)]
    with li_store.record(name="none") as rec, instrument(rec):
        live = asyncio.run(conversation(ToolCallingLLM(), tools, turns=2))
    steps = [s for s in li_store.load_steps(rec.run_id) if s.kind == "tool"]
    assert len(steps) == 2 and all("workflow_state" not in s.output for s in steps)
    calls.clear()
    with li_store.replay(rec.run_id) as player:  # the sync tool gets the Context too
        again = asyncio.run(conversation(ReplayLLM(player), replay_tools(player, tools),
                                         turns=2))
    assert calls == [] and again == live


def test_a_changed_state_diverges_at_the_next_prompt(li_store: Store,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A replay whose tool did not leave the recorded state (here: served by a replay tool
    that is not given the Context) says so, and diverges where the agent renders the state."""
    with li_store.record(name="lost") as rec, instrument(rec):
        asyncio.run(conversation(ToolCallingLLM(), note_tools(), turns=2))
    with pytest.raises(Exception) as caught, li_store.replay(rec.run_id) as player:
        [stand_in] = replay_tools(player, note_tools())
        blind = FunctionTool.from_defaults(
            async_fn=lambda topic: stand_in.acall(topic=topic), tool_metadata=stand_in.metadata)
        asyncio.run(conversation(ReplayLLM(player), [blind], turns=2))
    assert "notes" in str(caught.value)
    assert "tool 'remember' changed the workflow state when recorded" in caplog.text


def test_recording_tools_keep_passing_the_context(li_store: Store) -> None:
    """`recording_tools` (for sync tools before llama-index-core 0.14.22) wraps a tool that
    takes the Context in one the agent still passes it to."""
    with li_store.record(name="wrapped") as rec, instrument(rec):
        live = asyncio.run(conversation(ToolCallingLLM(), list(recording_tools(note_tools())),
                                        turns=2))
    assert len(live["state"]["state"]["notes"]) == 2
    with li_store.replay(rec.run_id) as player:
        again = asyncio.run(conversation(ReplayLLM(player),
                                         replay_tools(player, note_tools()), turns=2))
    assert again == live


def test_replayable_tools_in_a_session_replay_the_state(li_store: Store) -> None:
    llm = ToolCallingLLM()
    with Session("record", li_store, name="session") as session:
        live = asyncio.run(conversation(replayable_llm(llm), replayable_tools(note_tools())))
        run_id = session.run_id
    calls.clear()
    with Session("replay", li_store, run_id=run_id):
        again = asyncio.run(conversation(replayable_llm(llm), replayable_tools(note_tools())))
    assert calls == [] and again == live


class Plain(Workflow):
    @step
    async def start(self, ev: StartEvent) -> StopEvent:
        return StopEvent()


async def _state_after_edit() -> tuple[Any, Any, Any]:
    """A state edited in every way a tool can, its recorded changes, and a second state that
    started equal and had those changes (through the store's JSON) written into it."""
    async def seeded() -> Context:
        ctx = Context(Plain())
        await ctx.store.set("doc", {"title": "t", "meta": {"pages": 1, "tags": ["a"]}})
        await ctx.store.set("gone", 1)
        await ctx.store.set("kept", {"b": 2, "a": 1})
        return ctx

    ctx, other = await seeded(), await seeded()
    before = snapshot(ctx)
    assert before is not None
    async with ctx.store.edit_state() as state:
        state["doc"]["meta"]["pages"] = 2  # deep in a dict
        state["doc"]["meta"]["tags"].append("b")  # a list: stored whole
        del state["doc"]["title"]
        state["doc"]["meta"]["z"], state["doc"]["meta"]["y"] = 1, 2  # new keys, unsorted
        state["message"] = ChatMessage(role="user", content="hi")  # an object
        state.to_dict().pop("gone")
    recorded = changed_since(ctx, before)
    assert recorded is not None
    await apply(other, json.loads(canonical_bytes(encode(recorded))))  # keys sorted, as stored
    return recorded, await ctx.store.get_state(), await other.store.get_state()


def test_state_changes_round_trip_through_the_store() -> None:
    recorded, state, replayed = asyncio.run(_state_after_edit())
    assert [path for path, *_ in recorded["set"]] == [
        ["doc", "meta", "pages"], ["doc", "meta", "tags"], ["doc", "meta", "z"],
        ["doc", "meta", "y"], ["message"]]
    assert sorted(recorded["unset"]) == [["doc", "title"], ["gone"]]
    assert ["kept"] not in [path for path, *_ in recorded["set"]]
    assert dict(replayed.items()) == dict(state.items())
    assert isinstance(replayed["message"], ChatMessage)
    assert list(replayed["doc"]["meta"]) == list(state["doc"]["meta"])  # the key order too
    assert list(replayed["kept"]) == ["b", "a"]


def test_nothing_changed_is_no_change() -> None:
    async def same() -> Any:
        ctx = Context(Plain())
        await ctx.store.set("a", {"b": [1, 2.5, None]})
        before = snapshot(ctx)
        assert before is not None
        await ctx.store.set("a", {"b": [1, 2.5, None]})  # written again, equal
        return changed_since(ctx, before)

    assert asyncio.run(same()) is None


def test_values_the_serializer_cannot_encode_are_left_out_quietly() -> None:
    async def edit() -> tuple[Any, Any]:
        ctx = Context(Plain())
        await ctx.store.set("handle", threading.Lock())  # no serializer encodes this
        await ctx.store.set("doc", {"pages": 1})
        before = snapshot(ctx)
        async with ctx.store.edit_state() as state:
            state["doc"]["pages"] = 2
            state["other_handle"] = threading.Lock()
        return before, changed_since(ctx, before) if before is not None else None

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before, recorded = asyncio.run(edit())
    # and no warning of the store's about what it could not encode
    assert not [w for w in caught if "serializ" in str(w.message).lower()]
    assert before == {"doc": {"pages": 1}}
    assert recorded == {"set": [[["doc", "pages"], 2]], "unset": []}
