"""Replays made the documented ways, with and without `instrument(player)`: what they hand
back, and what their divergences say about why they diverged."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.language_models import BaseChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, StateGraph, add_messages
from pydantic import BaseModel

from agentreplay_core import ReplayDivergence, Store, open_store
from agentreplay_langchain import (
    RecordingCallbackHandler,
    ReplayChatModel,
    _tree,
    instrument,
)


def _has_create_agent() -> bool:
    try:
        from langchain.agents import create_agent  # noqa: F401
    except ImportError:
        return False
    return True


#: `create_agent`, and so `ReplayMiddleware`, are langchain 1.x
needs_create_agent = pytest.mark.skipif(not _has_create_agent(),
                                        reason="create_agent is langchain 1.x")


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory:") as opened:
        yield opened


class Ticket(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    ticket: str


def ticket_graph(model: BaseChatModel) -> Any:
    """Node `a` draws an id itself; add_messages gives `b`'s message an id outside any node."""
    def a(state: Ticket) -> dict[str, Any]:
        return {"ticket": uuid.uuid4().hex[:8]}

    def b(state: Ticket) -> dict[str, Any]:
        return {"messages": [HumanMessage(f"open ticket {state['ticket']}")]}

    def c(state: Ticket) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    return (StateGraph(Ticket).add_node("a", a).add_node("b", b).add_node("c", c)
            .add_edge(START, "a").add_edge("a", "b").add_edge("b", "c").add_edge("c", END)
            .compile())


def ticket_run(model: BaseChatModel, config: Any = None) -> tuple[Any, ...]:
    result = ticket_graph(model).invoke({"messages": [HumanMessage("hi", id="h0")]}, config)
    messages = tuple((m.content, m.id) for m in result["messages"])
    return result["ticket"], messages, time.time()


def test_a_graph_recorded_with_entropy_replays_its_draws_without_instrument(
        store: Store) -> None:
    live_model = GenericFakeChatModel(messages=iter([AIMessage("ok", id="ai-1")]))
    with store.record(entropy=True) as rec:
        live = ticket_run(live_model, {"callbacks": [RecordingCallbackHandler(rec)]})
    with store.replay(rec.run_id) as player:  # the documented way, nothing tracked
        replayed = ticket_run(ReplayChatModel(player=player))
    assert replayed == live


def test_the_same_graph_replays_under_instrument_too(store: Store) -> None:
    live_model = GenericFakeChatModel(messages=iter([AIMessage("ok", id="ai-1")]))
    with store.record(entropy=True) as rec, instrument(rec):
        live = ticket_run(live_model)
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = ticket_run(ReplayChatModel(player=player))
    assert replayed == live


class Answer(BaseModel):
    answer: str


class Searcher(BaseChatModel):
    """Searches three times (one call a turn), then gives the structured answer."""

    @property
    def _llm_type(self) -> str:
        return "searcher"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Runnable[Any, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        done = sum(isinstance(m, ToolMessage) for m in messages)
        name, args = ("search", {"q": f"q{done}"}) if done < 3 else ("Answer", {"answer": "a"})
        call = {"name": name, "args": args, "id": f"call_{done}"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])


@tool
def search(q: str) -> str:
    """Search."""
    return f"result for {q}"


@needs_create_agent
def test_a_create_agent_run_replays_its_message_ids_through_replay_middleware_alone(
        store: Store) -> None:
    from langchain.agents import create_agent
    from langchain.agents.middleware import ToolCallLimitMiddleware
    from langchain.agents.structured_output import ToolStrategy

    from agentreplay_langchain import ReplayMiddleware

    def run(extra: list[Any], config: Any = None) -> list[tuple[str, Any, Any]]:
        agent = create_agent(Searcher(), [search], response_format=ToolStrategy(Answer),
                             middleware=[ToolCallLimitMiddleware(run_limit=2,
                                                                 exit_behavior="continue"),
                                         *extra])
        result = agent.invoke({"messages": [("user", "go")]}, config)
        return [(type(m).__name__, m.content, m.id) for m in result["messages"]]

    with store.record(entropy=True) as rec:
        live = run([], {"callbacks": [RecordingCallbackHandler(rec)]})
    with store.replay(rec.run_id) as player:
        replayed = run([ReplayMiddleware(player)])
    assert replayed == live


def greet(model: BaseChatModel, system: str) -> str:
    try:
        return str(model.invoke([("system", system), ("human", "hi")]).content)
    except ReplayDivergence:  # the agent logs model errors and carries on
        return "model error"


def test_a_caught_divergence_is_not_reported_as_a_call_that_ran_for_real(
        store: Store) -> None:
    with store.record() as rec, instrument(rec):
        greet(GenericFakeChatModel(messages=iter([AIMessage("hello")])), "be nice")
    with pytest.raises(ReplayDivergence) as raised, store.replay(rec.run_id) as player, \
            instrument(player):
        assert greet(ReplayChatModel(player=player), "be RUDE") == "model error"
    message = str(raised.value)
    assert raised.value.classification == "prompt_changed"
    assert "ran for real" not in message and "give the replay the replay backend" not in message
    assert "asked for it at the recorded path and refused the request" in message


@needs_create_agent
def test_a_divergence_names_the_model_that_ran_for_real_before_it(store: Store) -> None:
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware

    from agentreplay_langchain import ReplayMiddleware

    class Agentish(Searcher):
        def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                      run_manager: Any = None, **kwargs: Any) -> ChatResult:
            if any(isinstance(m, ToolMessage) for m in messages):
                return ChatResult(generations=[ChatGeneration(message=AIMessage("done"))])
            return super()._generate(messages, stop, run_manager, **kwargs)

    def run(summary: str, extra: list[Any]) -> None:
        summariser = GenericFakeChatModel(messages=iter([AIMessage(summary)]))
        agent = create_agent(Agentish(), [search], middleware=[
            SummarizationMiddleware(model=summariser, trigger=("messages", 3),
                                    keep=("messages", 2)), *extra])
        agent.invoke({"messages": [("user", "go")]})

    with store.record() as rec, instrument(rec):
        run("summary one", [])
    with pytest.raises(ReplayDivergence) as raised, store.replay(rec.run_id) as player, \
            instrument(player):
        run("summary two", [ReplayMiddleware(player)])  # the summariser left live
    message = str(raised.value)
    assert raised.value.classification == "prompt_changed"
    summarised = next(s for s in store.load_steps(rec.run_id)
                      if "summary one" in str(s.output))
    assert f"recorded step {summarised.step} (llm 'chat_model') was never asked for" in message
    assert "likely ran for real" in message


class ChatAcme(GenericFakeChatModel):
    """Stands for a provider's chat model class."""


@needs_create_agent
def test_replay_middleware_names_the_models_events_as_the_live_run_did(store: Store) -> None:
    from langchain.agents import create_agent

    from agentreplay_langchain import ReplayMiddleware

    async def model_events(extra: list[Any]) -> list[tuple[str, str]]:
        agent = create_agent(ChatAcme(messages=iter([AIMessage("hello there")])), [],
                             middleware=extra)
        return [(e["event"], e["name"]) async for e in agent.astream_events(
            {"messages": [("user", "hi")]}, version="v2")
            if e["event"].startswith("on_chat_model")]

    with store.record() as rec, instrument(rec):
        live = asyncio.run(model_events([]))
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = asyncio.run(model_events([ReplayMiddleware(player)]))
    assert live and all(name == "ChatAcme" for _, name in live)
    assert replayed == live


def run_branches(order: list[str]) -> dict[str, str]:
    """A RunnableParallel whose branches each draw a request id, in the given order."""
    turn = {name: threading.Event() for name in order}

    def branch(name: str) -> Runnable[Any, str]:
        def make_request_id(_: Any) -> str:
            assert turn[name].wait(10)
            drawn = f"{name}:{uuid.uuid4().hex[:8]}"
            later = order[order.index(name) + 1:]
            if later:
                turn[later[0]].set()
            return drawn
        return RunnableLambda(make_request_id, name=name)

    turn[order[0]].set()
    result: dict[str, str] = RunnableParallel(
        a=branch("a"), b=branch("b"), c=branch("c")).invoke("x")
    return result


def test_runnable_parallel_branches_get_their_own_ids_whatever_the_order(
        store: Store) -> None:
    with store.record(entropy=True) as rec, instrument(rec):
        live = run_branches(["a", "b", "c"])
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = run_branches(["c", "b", "a"])
    assert replayed == live


def test_branch_draws_recorded_without_branch_paths_still_replay(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as older:  # as recorded before branches had paths
        older.setattr(_tree, "_branch", lambda positional: False, raising=False)
        with store.record(entropy=True) as rec, instrument(rec):
            live = run_branches(["a", "b", "c"])
    assert all("map:key" not in s.path for s in store.load_steps(rec.run_id))
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = run_branches(["a", "b", "c"])
    assert replayed == live
