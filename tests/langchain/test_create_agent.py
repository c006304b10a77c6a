"""`create_agent` (langchain 1.x): record the agent, switch it to replay with one middleware."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command
from pydantic import BaseModel

from agentreplay_core import Store, open_store
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel, instrument
from tests.langchain.fakes import (
    Counter,
    NamedStructuredModel,
    Plan,
    ScriptedChatModel,
    StructuredChatModel,
    assert_offline,
    make_tools,
    nonce,
    transcript,
)

agents = pytest.importorskip("langchain.agents", reason="create_agent is langchain 1.x")
from langchain.tools import ToolRuntime  # noqa: E402

from agentreplay_langchain import ReplayMiddleware  # noqa: E402  (needs langchain 1.x)

PLAN: Plan = [[("weather", {"city": "Oslo"}), ("add", {"a": 0.1, "b": 0.2})],
        [("search", {"query": "fjords"})]]


def question() -> dict[str, Any]:
    # a fresh message each run: LangGraph writes the id it draws into the message object
    return {"messages": [HumanMessage("a weekend in Oslo")]}


def record(store: Store) -> tuple[Any, list[Any]]:
    agent = agents.create_agent(ScriptedChatModel(plan=PLAN), make_tools(Counter()))
    with store.record(name="create-agent", entropy=True) as rec:
        state = agent.invoke(question(), config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0
    return rec.run_id, state["messages"]


def test_middleware_replays_the_whole_agent(store: Store) -> None:
    run_id, live = record(store)
    model = ScriptedChatModel(plan=PLAN)
    counter = Counter()
    # instrument(player): the tracker gives each parallel tool task its recorded path
    with store.replay(run_id) as player, instrument(player):
        assert_offline()
        agent = agents.create_agent(model, make_tools(counter),
                                    middleware=[ReplayMiddleware(player)])
        replayed = agent.invoke(question())["messages"]
    # create_agent runs each tool call as its own task (a Send): the ids LangGraph draws for
    # the tool messages in those threads replay too, whichever thread runs first
    assert transcript(replayed) == transcript(live)
    assert model.calls == 0 and counter.total == 0  # the originals never ran


def test_middleware_replays_the_agent_asynchronously(store: Store) -> None:
    run_id, live = record(store)
    with store.replay(run_id) as player, instrument(player):
        agent = agents.create_agent(ScriptedChatModel(plan=PLAN), make_tools(Counter()),
                                    middleware=[ReplayMiddleware(player)])
        replayed = asyncio.run(agent.ainvoke(question()))["messages"]
    assert transcript(replayed) == transcript(live)


class Overloaded(Exception):
    """A provider's error: its constructor wants more than the message."""

    def __init__(self, message: str, *, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class OverloadedOnce(ScriptedChatModel):
    """Fails its first call, as a model whose provider is overloaded."""

    failures: int = 1

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise Overloaded("overloaded, try again", status_code=529)
        return super()._generate(*args, **kwargs)


class TurnByCall(ScriptedChatModel):
    """Follows its plan by its own call count: a summarised conversation has fewer turns."""

    def _reply(self, messages: Any, tools: Any) -> Any:
        earlier = [AIMessage("earlier turn")] * self.calls
        return super()._reply(earlier + [m for m in messages if not isinstance(m, AIMessage)],
                              tools)


class SelectingTools(ScriptedChatModel):
    """Answers a tool selection (`LLMToolSelectorMiddleware`'s structured output) with the
    weather tool, and follows its plan otherwise."""

    def _reply(self, messages: Any, tools: Any) -> Any:
        if any(t["function"]["name"] == "ToolSelectionResponse" for t in tools or []):
            self.calls += 1
            return AIMessage("", tool_calls=[{"name": "ToolSelectionResponse", "id": nonce(),
                                              "args": {"tools": ["weather"]}}])
        return super()._reply(messages, tools)


def flaky_tool(counter: Counter) -> Any:
    @tool
    def lookup(code: str) -> str:
        """Look up an order (the first attempt fails)."""
        counter.hit("lookup")
        if counter.counts["lookup"] % 2:
            raise ConnectionError("connection reset by peer")
        return f"order {code}: {nonce()}"
    return lookup


def middleware_agent(kind: str, replay_model: Any | None) -> tuple[Any, list[Any], Counter]:
    """An agent using one of langchain's own middlewares; its models and tools count calls.
    `replay_model` is the model given to a middleware that calls one itself, in replay."""
    counter = Counter()
    m = agents.middleware
    if kind == "fallback":
        model: Any = OverloadedOnce(plan=PLAN)
        return model, [m.ModelFallbackMiddleware(ScriptedChatModel(plan=PLAN))], counter
    if kind == "model retry":
        return OverloadedOnce(plan=PLAN), [m.ModelRetryMiddleware(
            max_retries=2, initial_delay=0, jitter=False)], counter
    if kind == "tool retry":
        return ScriptedChatModel(plan=[[("lookup", {"code": "A1"})]]), [m.ToolRetryMiddleware(
            max_retries=2, initial_delay=0, jitter=False)], counter
    if kind == "todo list":  # its tool takes a ToolRuntime that is not in its args_schema
        todos = [{"content": "pack", "status": "pending"}]
        return ScriptedChatModel(plan=[[("write_todos", {"todos": todos})]]), [
            m.TodoListMiddleware()], counter
    if kind == "tool selector":  # without a model of its own it asks the agent's
        return SelectingTools(plan=PLAN), [m.LLMToolSelectorMiddleware(
            max_tools=1, model=replay_model)], counter
    assert kind == "summarization"
    return TurnByCall(plan=PLAN), [m.SummarizationMiddleware(
        model=replay_model or ScriptedChatModel(), trigger=("messages", 4),
        keep=("messages", 2))], counter


@pytest.mark.parametrize("kind", ["fallback", "model retry", "tool retry", "todo list",
                                  "tool selector", "summarization"])
def test_agents_with_langchains_middlewares_replay(store: Store, kind: str) -> None:
    """`ReplayMiddleware` goes last (innermost): a middleware that swaps the model (a
    fallback) swaps it before the replay answers; a model a middleware calls itself (the
    summarizer, the tool selector, which uses the agent's own unless given one) is given as a
    `ReplayChatModel`."""
    model, middleware, counter = middleware_agent(kind, None)
    tools = [flaky_tool(counter)] if kind == "tool retry" else make_tools(counter)
    agent = agents.create_agent(model, tools, middleware=middleware)
    with store.record(name=kind, entropy=True) as rec:
        live = agent.invoke(question(), config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert rec.stats.internal_errors == 0
    assert any(s.is_error for s in store.load_steps(rec.run_id)) == (
        kind in ("fallback", "model retry", "tool retry"))

    with store.replay(rec.run_id) as player, instrument(player):
        assert_offline()
        model, middleware, counter = middleware_agent(kind, ReplayChatModel(player=player))
        tools = [flaky_tool(counter)] if kind == "tool retry" else make_tools(counter)
        agent = agents.create_agent(model, tools,
                                    middleware=[*middleware, ReplayMiddleware(player)])
        replayed = agent.invoke(question())
    assert transcript(replayed["messages"]) == transcript(live["messages"])
    assert replayed.get("todos") == live.get("todos")
    fallbacks = [f for mw in middleware for f in getattr(mw, "models", [])]
    assert model.calls == 0 and counter.total == 0 and all(f.calls == 0 for f in fallbacks)


def test_replayed_messages_print_as_they_did_live(store: Store) -> None:
    """Code that renders messages with `str()` into a prompt (langchain 1.0's summarizer)
    sees each dict in the message in the model's key order, not the store's (JSONB puts
    shorter keys first: `seed` before `model_name`, `total_tokens` before `output_tokens`)."""
    run_id, live = record(store)
    with store.replay(run_id) as player, instrument(player):
        agent = agents.create_agent(ScriptedChatModel(plan=PLAN), make_tools(Counter()),
                                    middleware=[ReplayMiddleware(player)])
        replayed = agent.invoke(question())["messages"]
    assert [repr(m) for m in replayed] == [repr(m) for m in live]


def test_a_changed_question_forks_the_agent_and_continues_live(store: Store) -> None:
    """With `on_divergence="live"`, `ReplayMiddleware` hands the agent's own model and tools
    the calls from the first divergence on, and they are recorded into a forked run."""
    run_id, _ = record(store)
    model, counter = ScriptedChatModel(plan=PLAN), Counter()
    changed = {"messages": [HumanMessage("a weekend in Bergen")]}
    with store.replay(run_id, on_divergence="live", allow_unused=True) as player, \
            instrument(player):
        agent = agents.create_agent(model, make_tools(counter),
                                    middleware=[ReplayMiddleware(player)])
        forked = agent.invoke(changed)["messages"]
        fork = player.fork
    assert fork is not None and model.calls == 3  # every turn, from the first, ran live
    assert counter.total == 3 and "Bergen" in str(forked[-1].content)

    with store.replay(fork.run_id) as player, instrument(player):
        model, counter = ScriptedChatModel(plan=PLAN), Counter()
        agent = agents.create_agent(model, make_tools(counter),
                                    middleware=[ReplayMiddleware(player)])
        again = agent.invoke({"messages": [HumanMessage("a weekend in Bergen")]})["messages"]
    assert model.calls == 0 and counter.total == 0
    assert [m.content for m in again] == [m.content for m in forked]


def test_the_shell_tool_of_its_middleware_never_runs_in_replay(store: Store,
                                                               tmp_path: Any) -> None:
    """`ShellToolMiddleware` brings its own tool, which runs commands in a real shell: in
    replay its recorded output (and artifact: exit code, truncation) is served and no command
    runs again."""
    ran = tmp_path / "ran"
    plan: Plan = [[("shell", {"command": f"echo $RANDOM; echo once >> {ran}"})]]

    def agent(*replay: Any) -> Any:
        shell = agents.middleware.ShellToolMiddleware(workspace_root=str(tmp_path))
        return agents.create_agent(ScriptedChatModel(plan=plan), [],
                                   middleware=[shell, *replay])

    with store.record(name="shell", entropy=True) as rec, instrument(rec):
        live = agent().invoke({"messages": [HumanMessage("roll a number")]})["messages"]
    # (langchain-core up to 1.2 shows the tool's runtime, state and all, to `on_tool_start`:
    # it is no argument, and it is left out of the request)
    assert ran.read_text() == "once\n" and rec.stats.internal_errors == 0
    with store.replay(rec.run_id) as player, instrument(player):
        again = agent(ReplayMiddleware(player)).invoke(
            {"messages": [HumanMessage("roll a number")]})["messages"]
    assert ran.read_text() == "once\n"
    assert transcript(again) == transcript(live) and live[2].artifact["exit_code"] == 0


def _hitl_modes() -> list[Any]:
    per_call = "interrupt_mode" in inspect.signature(
        agents.middleware.HumanInTheLoopMiddleware).parameters
    return ["batched", pytest.param("per_call", marks=pytest.mark.skipif(
        not per_call, reason="interrupt_mode is newer than this langchain"))]


@pytest.mark.parametrize("mode", _hitl_modes())
def test_human_in_the_loop_approvals_replay(store: Store, mode: str) -> None:
    """`HumanInTheLoopMiddleware` pauses the agent for a person's decisions on its tool calls
    (one interrupt per turn, or one per gated call inside the tool-call wrapper); the program
    resumes the thread with them. Replayed with the same decisions, the agent pauses at the
    same places, the approved calls are served, the rejected one never runs."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    def run(counter: Counter, *replay: Any) -> tuple[list[Any], list[Any]]:
        hitl = agents.middleware.HumanInTheLoopMiddleware(
            {"weather": True, "add": True}, **({"interrupt_mode": mode} if mode != "batched"
                                               else {}))
        agent = agents.create_agent(ScriptedChatModel(plan=PLAN), make_tools(counter),
                                    middleware=[hitl, *replay], checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t1"}}
        state = agent.invoke(question(), config)
        asked = []
        while state.get("__interrupt__"):
            pending = state["__interrupt__"]
            # (per call: the gated calls run in parallel, their interrupts come in any order)
            asked.append(sorted((p.value for p in pending), key=repr))
            if mode == "batched":
                assert len(pending) == 1  # one interrupt for the turn's gated calls
                answer: Any = {"decisions": [{"type": "approve"},
                                             {"type": "reject", "message": "no maths"}]}
            else:  # each gated call its own interrupt, answered by id
                answer = {p.id: {"type": "approve"} if p.value["name"] ==
                          "weather" else {"type": "reject", "message": "no maths"}
                          for p in pending}
            state = agent.invoke(Command(resume=answer), config)
        return asked, state["messages"]

    with store.record(name=f"hitl-{mode}", entropy=True) as rec, instrument(rec):
        asked, live = run(ran := Counter())
    assert asked and ran.total == 2  # weather and search; add was rejected
    with store.replay(rec.run_id) as player, instrument(player):
        asked_again, again = run(ran := Counter(), ReplayMiddleware(player))
    assert asked_again == asked and ran.total == 0
    assert transcript(again) == transcript(live)


class Forecast(BaseModel):
    """The agent's final answer, as a schema."""

    city: str
    summary: str


@pytest.mark.parametrize("known_by", ["profile", "name"])
def test_a_response_format_replays_with_the_strategy_of_the_recorded_model(
        store: Store, known_by: str) -> None:
    """`create_agent(..., response_format=Schema)` picks provider-native structured output
    when the model's profile (or name) says it supports it, else a tool: it asks the model the
    call is made with, which in replay is the stand-in. The replay must take the recorded
    model's strategy, else it binds another tool list and diverges."""
    def run(*replay: Any) -> Any:
        model = StructuredChatModel(plan=PLAN, profile={"structured_output": True}) \
            if known_by == "profile" else NamedStructuredModel(plan=PLAN)
        agent = agents.create_agent(model, make_tools(Counter()), response_format=Forecast,
                                    middleware=list(replay))
        return agent.invoke(question())

    with store.record(name="structured", entropy=True) as rec, instrument(rec):
        live = run()
    assert isinstance(live["structured_response"], Forecast)
    # provider-native: answered in the content, no schema tool bound
    assert [t["name"] for t in next(s.input for s in store.load_steps(rec.run_id)
                                    if s.kind == "llm")["tools"]] == ["weather", "add", "search"]
    with store.replay(rec.run_id) as player, instrument(player):
        again = run(ReplayMiddleware(player))
    assert again["structured_response"] == live["structured_response"]
    assert transcript(again["messages"]) == transcript(live["messages"])


def test_a_response_format_as_a_tool_replays(store: Store) -> None:
    """The other strategy: a model without native structured output answers with a call of
    the schema's tool, which `create_agent` parses (no tool runs for it)."""
    plan: Plan = [*PLAN, [("Forecast", {"city": "Oslo", "summary": "clear"})]]

    def run(*replay: Any) -> Any:
        agent = agents.create_agent(ScriptedChatModel(plan=plan), make_tools(Counter()),
                                    response_format=Forecast, middleware=list(replay))
        return agent.invoke(question())

    with store.record(name="structured-tool", entropy=True) as rec, instrument(rec):
        live = run()
    assert live["structured_response"] == Forecast(city="Oslo", summary="clear")
    with store.replay(rec.run_id) as player, instrument(player):
        again = run(ReplayMiddleware(player))
    assert again["structured_response"] == live["structured_response"]
    assert transcript(again["messages"]) == transcript(live["messages"])


class NotedState(agents.AgentState):  # type: ignore[name-defined,misc]
    notes: list[str]


@tool
def take_note(text: str, runtime: ToolRuntime) -> Command[Any]:
    """Keep a note in the agent's state."""
    message = ToolMessage("noted", tool_call_id=runtime.tool_call_id)
    # the order a tool writes its update in: sorted (`messages` first), or not
    update = {"notes": [text], "messages": [message]} if text.startswith("n") else \
        {"messages": [message], "notes": [text]}
    return Command(update=update)


@pytest.mark.parametrize("text", ["notes first", "messages first"])
@pytest.mark.parametrize("where", ["postgres", "memory"])
def test_a_tools_command_replays_its_update_in_its_key_order(
        store: Store, text: str, where: str) -> None:
    # the update dict of a `Command` came back in the store's order (the codec sorts a
    # dataclass's dicts, JSONB puts shorter keys first): the agent's streamed updates
    # printed otherwise than live
    store = store if where == "postgres" else open_store("memory:")

    def updates(agent: Any, config: Any = None) -> list[str]:
        return [repr(part) for part in agent.stream(
            {"messages": [HumanMessage("note it")], "notes": []}, config=config,
            stream_mode="updates") if "tools" in part]

    plan: Plan = [[("take_note", {"text": text})]]
    with store.record(name="command", entropy=True) as rec:
        live = updates(agents.create_agent(ScriptedChatModel(plan=plan), [take_note],
                                           state_schema=NotedState),
                       {"callbacks": [RecordingCallbackHandler(rec)]})
    assert live[0].startswith("{'tools': {'" + text.split()[0])
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = updates(agents.create_agent(
            ScriptedChatModel(plan=plan), [take_note], state_schema=NotedState,
            middleware=[ReplayMiddleware(player)]))
    assert replayed == live
