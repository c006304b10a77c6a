"""Fork and continue: replay the recorded prefix, go live from the first divergent call on."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import ToolNode

from agentreplay_core import ReplayDivergence, Store
from agentreplay_langchain import (
    RecordingCallbackHandler,
    ReplayChatModel,
    ReplayEmbeddings,
    ReplayRetriever,
    instrument,
    replay_tools,
)
from tests.langchain.fakes import (
    Counter,
    HashEmbeddings,
    Plan,
    ScriptedChatModel,
    make_tools,
    nonce,
    transcript,
)
from tests.langchain.test_rag import rag_chain, vector_store
from tests.langchain.test_rag import record as record_rag

PLAN: Plan = [[("weather", {"city": "Lyon"})], [("add", {"a": 1.5, "b": 2.0})]]


def loop(model: Any, tools: Sequence[BaseTool], nudge: str | None = None,
         config: Any = None) -> list[BaseMessage]:
    """A tool loop whose prompt can be fixed after the first turn (the `nudge`)."""
    by_name = {t.name: t for t in tools}
    bound = model.bind_tools(tools)
    messages: list[BaseMessage] = [HumanMessage("plan a day in Lyon")]
    for turn in range(4):
        if turn == 1 and nudge:
            messages.append(HumanMessage(nudge))
        reply = bound.invoke(messages, config=config)
        messages.append(reply)
        if not reply.tool_calls:
            break
        messages.extend(by_name[c["name"]].invoke(c, config=config) for c in reply.tool_calls)
    return messages


def test_a_prompt_fix_replays_the_prefix_and_continues_live(store: Store) -> None:
    with store.record(name="before the fix") as rec:
        live = loop(ScriptedChatModel(plan=PLAN), make_tools(Counter()),
                    config={"callbacks": [RecordingCallbackHandler(rec)]})

    model = ScriptedChatModel(plan=PLAN)
    counter = Counter()
    with store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player:
        fixed = loop(ReplayChatModel(player=player, live=model),
                     replay_tools(player, make_tools(counter)), nudge="keep it short")
        assert player.fork is not None
        fork_id = player.fork.run_id
    # the first turn (model call and weather tool) came from the recording...
    assert transcript(fixed[:3]) == transcript(live[:3])
    # ...and from the changed prompt on, the live model and tools ran
    assert model.calls == 2 and counter.counts == {"add": 1}
    forked = store.get_run(fork_id)
    assert forked.parent_run_id == rec.run_id and forked.fork_step is not None

    # the forked run is a recording of its own: it replays with nothing live
    with store.replay(fork_id) as player:
        again = loop(ReplayChatModel(player=player), replay_tools(player, make_tools(Counter())),
                     nudge="keep it short")
    assert transcript(again) == transcript(fixed)


def test_an_async_only_tool_goes_live_through_its_async_api(store: Store) -> None:
    """A coroutine-only tool (`@tool async def`) has no sync API: a fork running it through
    `run` failed with NotImplementedError."""
    ran: list[str] = []

    @tool
    async def lookup(code: str) -> str:
        """Look up an order."""
        ran.append(code)
        await asyncio.sleep(0)
        return f"order {code}: {nonce()}"

    plan: Plan = [[("lookup", {"code": "A1"})], [("lookup", {"code": "B2"})]]

    async def orders(model: Any, tools: Sequence[BaseTool], nudge: str | None = None,
                     config: Any = None) -> list[BaseMessage]:
        bound = model.bind_tools(tools)
        messages: list[BaseMessage] = [HumanMessage("where are my orders")]
        for turn in range(3):
            if turn == 1 and nudge:
                messages.append(HumanMessage(nudge))
            reply = await bound.ainvoke(messages, config=config)
            messages.append(reply)
            messages.extend([await tools[0].ainvoke(call, config=config)
                             for call in reply.tool_calls])
        return messages

    with store.record(name="async tools") as rec:
        live = asyncio.run(orders(ScriptedChatModel(plan=plan), [lookup],
                                  config={"callbacks": [RecordingCallbackHandler(rec)]}))
    ran.clear()
    with store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player:
        fixed = asyncio.run(orders(ReplayChatModel(player=player,
                                                   live=ScriptedChatModel(plan=plan)),
                                   replay_tools(player, [lookup]), nudge="be brief"))
        fork = player.fork
    assert fork is not None and ran == ["B2"]  # A1 was served, B2 ran live
    assert transcript(fixed[:3]) == transcript(live[:3])
    with store.replay(fork.run_id) as player:
        again = asyncio.run(orders(ReplayChatModel(player=player),
                                   replay_tools(player, [lookup]), nudge="be brief"))
    assert transcript(again) == transcript(fixed) and ran == ["B2"]


def test_a_fork_recorded_with_entropy_replays_under_instrument(store: Store) -> None:
    """What the live model and tools draw in a fork (their random answers) is recorded inside
    their steps of the forked run, so the fork replays with nothing left over; before, the
    replay's tracker put the live runs beside the replayed calls (`...#1`)."""
    with store.record(name="entropy", entropy=True) as rec:
        loop(ScriptedChatModel(plan=PLAN), make_tools(Counter()),
             config={"callbacks": [RecordingCallbackHandler(rec)]})
    with store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player, \
            instrument(player):
        fixed = loop(ReplayChatModel(player=player, live=ScriptedChatModel(plan=PLAN)),
                     replay_tools(player, make_tools(Counter())), nudge="keep it short")
        fork = player.fork
    assert fork is not None
    with store.replay(fork.run_id) as player, instrument(player):
        again = loop(ReplayChatModel(player=player), replay_tools(player, make_tools(Counter())),
                     nudge="keep it short")
    assert transcript(again) == transcript(fixed)


def test_without_live_mode_a_live_model_is_never_called(store: Store) -> None:
    with store.record(name="strict") as rec:
        loop(ScriptedChatModel(plan=PLAN), make_tools(Counter()),
             config={"callbacks": [RecordingCallbackHandler(rec)]})
    model = ScriptedChatModel(plan=PLAN)
    with pytest.raises(ReplayDivergence) as diverged, \
            store.replay(rec.run_id, allow_unused=True) as player:
        loop(ReplayChatModel(player=player, live=model),
             replay_tools(player, make_tools(Counter())), nudge="keep it short")
    assert diverged.value.classification == "prompt_changed"
    assert model.calls == 0


def test_a_changed_question_retrieves_and_embeds_live_in_the_fork(store: Store) -> None:
    run_id, _, _, _ = record_rag(store)
    embeddings = HashEmbeddings()
    vectors = vector_store(embeddings)
    calls_after_indexing = embeddings.calls
    model = ScriptedChatModel()
    with store.replay(run_id, on_divergence="live", allow_unused=True) as player:
        retriever = ReplayRetriever(player=player,
                                    live=vectors.as_retriever(search_kwargs={"k": 2}))
        answer = rag_chain(retriever, ReplayChatModel(player=player, live=model)).invoke(
            "What about Rome?")
        vector = ReplayEmbeddings(player, live=embeddings).embed_query("What about Rome?")
        assert player.fork is not None
        fork_id = player.fork.run_id
    assert "Rome" in str(answer.content) and model.calls == 1
    assert embeddings.calls > calls_after_indexing  # the live retriever embedded the query
    assert vector == embeddings._vector("What about Rome?")
    with store.replay(fork_id, allow_unused=True) as player:
        again = rag_chain(ReplayRetriever(player=player), ReplayChatModel(player=player)
                          ).invoke("What about Rome?")
        assert ReplayEmbeddings(player).embed_query("What about Rome?") == vector
    assert again.content == answer.content and again.id == answer.id


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_langgraph_fork_recorded_with_entropy_replays(store: Store, use_async: bool) -> None:
    """The same inside a LangGraph graph, whose nodes hand their callbacks and config to
    everything they call: the live tools of a `ToolNode` of stand-ins draw inside their steps
    of the fork too."""
    from tests.langchain.test_langgraph import PLAN as PARALLEL_PLAN
    from tests.langchain.test_langgraph import build_graph

    def run(model: Any, tools: Sequence[BaseTool], question: str) -> list[BaseMessage]:
        app = build_graph(model, ToolNode(tools), tools)
        state = {"messages": [HumanMessage(question)]}
        out = asyncio.run(app.ainvoke(state)) if use_async else app.invoke(state)
        return list(out["messages"])

    with store.record(name="graph entropy", entropy=True) as rec, instrument(rec):
        run(ScriptedChatModel(plan=PARALLEL_PLAN), make_tools(Counter()), "plan a day")
    counter = Counter()
    with store.replay(rec.run_id, on_divergence="live") as player, instrument(player):
        fixed = run(ReplayChatModel(player=player, live=ScriptedChatModel(plan=PARALLEL_PLAN)),
                    replay_tools(player, make_tools(counter)), "plan a day in Lyon")
        fork = player.fork
    assert fork is not None and counter.total == 4  # every tool call went live
    with store.replay(fork.run_id) as player, instrument(player):
        again = run(ReplayChatModel(player=player), replay_tools(player, make_tools(Counter())),
                    "plan a day in Lyon")
    assert transcript(again) == transcript(fixed)
