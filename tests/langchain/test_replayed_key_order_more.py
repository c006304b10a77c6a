"""What a tool or a model reported beside its answer replays in the order it had live: the
values a tool wrote to LangGraph's store, a tool's artifact (Documents too), a model's
`llm_output` and `generation_info`, and the `Send`s of a tool's `Command`.

The run log keeps JSON objects with their keys sorted (PostgreSQL's JSONB puts shorter keys
first): a node that renders such a value into its next prompt sent the live order, and got
another one in replay, a divergence that never happened."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langgraph.config import get_store
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedStore, ToolNode, tools_condition
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, Send

from agentreplay_core import Store, decode, encode
from agentreplay_langchain import ReplayChatModel, instrument, replay_tools
from agentreplay_langchain._convert import dump, revive, tool_output, tool_result
from tests.langchain.fakes import ScriptedChatModel, nonce


def _graph(model: Any, node: ToolNode, tools: list[BaseTool], context: Any,
           store: InMemoryStore | None = None) -> Any:
    """An agent whose prompt starts with what `context(state)` renders of earlier results."""
    bound = model.bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        prompt = [SystemMessage(f"context: {context(state)}"), *state["messages"]]
        return {"messages": [bound.invoke(prompt)]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(store=store)


def _messages(done: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(m.type, m.content, getattr(m, "artifact", None)) for m in done["messages"]]


# -- what a tool writes to the graph's store -------------------------------------------------

@tool
def remember(fact: str, memory: Annotated[Any, InjectedStore()]) -> str:
    """Save a fact about the user to long-term memory."""
    # keys in an order sorting changes, at two levels; the second write's are sorted
    memory.put(("memories",), "m1", {"text": fact, "source": "chat", "confidence": 0.9,
                                     "tags": {"topic": "drinks", "kind": "preference"}},
               index=False)
    memory.put(("memories",), "m2", {"a": 1, "b": {"c": 2}})
    return "saved"


def _remembered(model: Any, node: ToolNode) -> dict[str, Any]:
    memory = InMemoryStore()

    def listed(state: MessagesState) -> str:
        return "; ".join(str(item.value) for item in get_store().search(("memories",)))

    app = _graph(model, node, [remember], listed, store=memory)
    done = app.invoke({"messages": [HumanMessage("I like tea", id="h1")]})
    return {"messages": _messages(done),
            "memory": [(i.key, json.dumps(i.value)) for i in memory.search(("memories",))]}


def test_what_a_tool_wrote_to_the_store_replays_in_its_key_order(store: Store) -> None:
    plan = [[("remember", {"fact": "likes tea"})]]
    with store.record(name="store-writes-order", entropy=True) as rec, instrument(rec):
        live = _remembered(ScriptedChatModel(plan=plan), ToolNode([remember]))
    assert '"text": "likes tea", "source": "chat", "confidence": 0.9, "tags": {"topic"' in \
        live["memory"][0][1]
    with store.replay(rec.run_id) as player, instrument(player):
        again = _remembered(ReplayChatModel(player=player),
                            ToolNode(replay_tools(player, [remember])))
    assert again == live
    # a write whose value was sorted is stored as before; the index a write named is kept
    [step] = [s for s in store.load_steps(rec.run_id) if s.kind == "tool"]
    first, second = step.output["store_writes"]
    assert first[3] is False and first[4]["keys"] == ["text", "source", "confidence", "tags"]
    assert second == [["memories"], "m2", {"a": 1, "b": {"c": 2}}]


# -- a tool's artifact -----------------------------------------------------------------------

@tool(response_format="content_and_artifact")
def sources(query: str) -> tuple[str, dict[str, Any]]:
    """Search the web."""
    return f"3 hits for {query}", {"url": "https://example.org/a", "title": "A",
                                   "retrieved": nonce(), "extra": {"z": 1, "b": 2}}


@tool(response_format="content_and_artifact")
def documents(query: str) -> tuple[str, list[Document]]:
    """Search the library."""
    return f"1 hit for {query}", [Document(page_content="p", metadata={
        "source": "s.pdf", "page": 3, "retrieved": nonce(), "box": {"y": 1, "x": 0}})]


def _cited(state: MessagesState) -> str:
    found = [m.artifact for m in state["messages"] if isinstance(m, ToolMessage)]
    return str([[d.metadata for d in a] if isinstance(a, list) else a for a in found])


@pytest.mark.parametrize("searcher", [sources, documents], ids=["dict", "documents"])
def test_a_tools_artifact_replays_in_its_key_order(store: Store, searcher: BaseTool) -> None:
    plan = [[(searcher.name, {"query": "news"})]]
    with store.record(name="artifact-order", entropy=True) as rec, instrument(rec):
        live = _messages(_graph(ScriptedChatModel(plan=plan), ToolNode([searcher]),
                                [searcher], _cited).invoke(
            {"messages": [HumanMessage("news?", id="h1")]}))
    with store.replay(rec.run_id) as player, instrument(player):
        again = _messages(_graph(ReplayChatModel(player=player),
                                 ToolNode(replay_tools(player, [searcher])),
                                 [searcher], _cited).invoke(
            {"messages": [HumanMessage("news?", id="h1")]}))
    assert again == live
    assert repr(again[2][2]) == repr(live[2][2])  # the order of every dict, nested ones too


def test_an_artifact_without_a_recorded_order_comes_back_sorted() -> None:
    # a recording made before the order was kept (or of sorted dicts) gives its dicts in the
    # store's order (JSONB: shorter keys first): the replay sorts them, as live they were
    as_stored = ToolMessage("x", tool_call_id="c1", artifact=[Document(
        page_content="p", metadata={"c": 1, "bb": 2, "aaa": {"zz": 1, "y": 2}})])
    stored = dump(as_stored)
    stored.pop("artifact_order", None)
    back = revive(stored)
    assert list(back.artifact[0].metadata) == ["aaa", "bb", "c"]
    assert list(back.artifact[0].metadata["aaa"]) == ["y", "zz"]


# -- a model's llm_output and generation_info ------------------------------------------------

class OpenAILike(BaseChatModel):
    """Reports `llm_output` and `generation_info` as ChatOpenAI does (not in sorted order);
    LangChain merges them into the message's `response_metadata`."""

    @property
    def _llm_type(self) -> str:
        return "openai-like"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        message = AIMessage(f"hello {nonce()}", id=f"chatcmpl-{nonce()}",
                            response_metadata={"model_name": "gpt-x", "finish_reason": "stop"})
        info = {"finish_reason": "stop", "logprobs": None}
        return ChatResult(generations=[ChatGeneration(message=message, generation_info=info)],
                          llm_output={"token_usage": {"prompt_tokens": 3, "completion_tokens": 2},
                                      "model_name": "gpt-x", "system_fingerprint": "fp_1",
                                      "id": f"chatcmpl-{nonce()}", "service_tier": "default"})


class StreamingOpenAILike(OpenAILike):
    """Streams, with the generation info in the last chunk."""

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        yield ChatGenerationChunk(message=AIMessageChunk(content=f"hi {nonce()}"))
        yield ChatGenerationChunk(message=AIMessageChunk(content=""), generation_info={
            "system_fingerprint": "fp_2", "finish_reason": "stop", "model_name": "gpt-x"})


def _metadata(model: BaseChatModel) -> dict[str, str]:
    seen = {"invoke": json.dumps(model.invoke("hi").response_metadata)}
    streamed: Any = None
    for chunk in model.stream("hi"):
        streamed = chunk if streamed is None else streamed + chunk
    seen["stream"] = json.dumps(streamed.response_metadata)
    result = model.generate([[HumanMessage("hi")]])
    seen["llm_output"] = json.dumps(result.llm_output)
    seen["generation_info"] = json.dumps(result.generations[0][0].generation_info)
    return seen


@pytest.mark.parametrize("model_class", [OpenAILike, StreamingOpenAILike],
                         ids=["whole", "streamed"])
def test_llm_output_and_generation_info_replay_in_their_key_order(
        store: Store, model_class: type[OpenAILike]) -> None:
    with store.record(name="llm-output-order") as rec, instrument(rec):
        live = _metadata(model_class())
    assert live["invoke"].startswith('{"token_usage": {"prompt_tokens": 3')
    with store.replay(rec.run_id) as player, instrument(player):
        again = _metadata(ReplayChatModel(player=player))
    assert again == live


# -- a tool's Command that fans out with Send ------------------------------------------------

class FanState(MessagesState):
    brief: dict[str, Any]


@tool
def fan(jobs: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
    """Fan the work out to workers."""
    done = ToolMessage(f"fanned out {nonce()}", tool_call_id=tool_call_id)
    return Command(update={"messages": [done]}, goto=[
        Send("worker", {"brief": {"topic": f"part {i}", "depth": i, "audience": "team"},
                        "messages": [HumanMessage(f"job {i}", id=f"job-{i}")]})
        for i in range(jobs)])


def _fanned_out(model: Any, node: ToolNode) -> list[tuple[str, str, Any]]:
    bound = model.bind_tools([fan])

    def worker(state: FanState) -> dict[str, Any]:
        # its prompt renders the brief the Send carried
        return {"messages": [model.invoke(f"brief: {state['brief']}")]}

    graph = StateGraph(FanState)
    graph.add_node("agent", lambda state: {"messages": [bound.invoke(state["messages"])]})
    graph.add_node("tools", node)
    graph.add_node("worker", worker)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "tools")
    graph.add_edge("worker", END)
    done = graph.compile().invoke({"messages": [HumanMessage("go", id="h1")], "brief": {}})
    return sorted((m.type, str(m.content), m.id) for m in done["messages"])


def test_a_tools_command_that_sends_replays(store: Store) -> None:
    plan = [[("fan", {"jobs": 2})]]
    with store.record(name="command-send", entropy=True) as rec, instrument(rec):
        live = _fanned_out(ScriptedChatModel(plan=plan), ToolNode([fan]))
    assert rec.stats.unencodable == 0
    assert sum(kind == "ai" for kind, _, _ in live) == 3  # the agent and two workers
    with store.replay(rec.run_id) as player, instrument(player):
        again = _fanned_out(ReplayChatModel(player=player),
                            ToolNode(replay_tools(player, [fan])))
    assert again == live


def test_sends_in_a_tool_result_keep_node_arg_and_key_order() -> None:
    arg = {"zeta": {"b": 1, "a": (1, 2)}, "alpha": [HumanMessage("x", id="m1")]}
    result: Command[str] = Command(goto=(Send("worker", arg), "other"), update={"z": 1, "a": 2})
    back = tool_result(decode(encode(tool_output(result, "call-1"))))
    assert isinstance(back, Command) and back == result
    goto: Any = back.goto
    [send, other] = goto
    assert isinstance(send, Send) and other == "other"
    assert repr(send.arg) == repr(arg) and repr(back.update) == "{'z': 1, 'a': 2}"
    # a Send outside a Command too (a stream write, an interrupt's value)
    assert revive(decode(encode(dump([{"to": Send("w", {"b": 1, "a": 2})}])))) == \
        [{"to": Send("w", {"b": 1, "a": 2})}]



@tool
def delegate(jobs: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
    """Hand the jobs to the parent graph's workers."""
    done = ToolMessage(f"delegated {nonce()}", tool_call_id=tool_call_id)
    return Command(graph=Command.PARENT, update={"messages": [done]}, goto=[
        Send("worker", {"messages": [HumanMessage(f"job {i}", id=f"job-{i}")]})
        for i in range(jobs)])


def test_a_sub_agents_command_that_sends_to_its_parent_replays(store: Store) -> None:
    # ToolNode gathers the Sends of commands for the parent graph, which it tells by identity
    # (`graph is Command.PARENT`): a replayed command must be one of them as well
    agents = pytest.importorskip("langchain.agents", reason="create_agent is langchain 1.x")
    from agentreplay_langchain import ReplayMiddleware

    def run(model: Any, worker_model: Any, middleware: list[Any]) -> list[tuple[str, str, Any]]:
        lead = agents.create_agent(model, [delegate], middleware=middleware, name="lead")
        worker = agents.create_agent(worker_model, [], middleware=middleware, name="worker")
        graph = StateGraph(MessagesState)
        graph.add_node("lead", lead, destinations=("worker",))
        graph.add_node("worker", worker)
        graph.add_edge(START, "lead")
        graph.add_edge("worker", END)
        done = graph.compile().invoke({"messages": [HumanMessage("go", id="h1")]})
        return sorted((m.type, str(m.content), m.id) for m in done["messages"])

    with store.record(name="parent-send", entropy=True) as rec, instrument(rec):
        live = run(ScriptedChatModel(plan=[[("delegate", {"jobs": 2})]]), ScriptedChatModel(),
                   [])
    assert not any(kind == "tool" for kind, _, _ in live)  # LangGraph drops the update
    with store.replay(rec.run_id) as player, instrument(player):
        again = run(ScriptedChatModel(), ScriptedChatModel(), [ReplayMiddleware(player)])
    assert again == live
