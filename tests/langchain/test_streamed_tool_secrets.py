"""A secret a model streams in a tool call's arguments (or its reasoning, or a protocol
event's deltas) is stored as its placeholder: no chunk, and no chunks joined, hold it, in any
of the shapes providers stream tool calls in; the replay streams the redacted call, or the
live one when given the secrets."""

from __future__ import annotations

import functools
import json
import operator
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from agentreplay_core import Store
from agentreplay_core._codec import canonical_bytes
from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel, instrument
from agentreplay_langchain._convert import revive
from tests.langchain.test_streamed_secrets import FAKES, pieces
from tests.support.secret_leaks import leaks

SAID = "Sending what the config holds: " + " and ".join(f.in_text for f in FAKES)
ARGS = json.dumps({"to": "ops", "body": SAID})
SHAPES = ["tool_call_chunks", "openai_kwargs", "anthropic_blocks", "v1_blocks", "reasoning"]


@pytest.fixture(autouse=True)
def _redaction_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "streamed-tool-secrets-key")


def joined_by_place(items: list[Any]) -> bytes:
    """The strings at each place (the same keys and positions) in `items`, joined in order: a
    secret cut across the items shows whole in these."""
    places: dict[tuple[Any, ...], list[str]] = {}

    def walk(value: Any, place: tuple[Any, ...]) -> None:
        if isinstance(value, str):
            places.setdefault(place, []).append(value)
        elif isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, (*place, key))
        elif isinstance(value, list):
            for position, inner in enumerate(value):
                walk(inner, (*place, position))

    for item in items:
        walk(item, ())
    return "\n".join("".join(texts) for texts in places.values()).encode()


def chunk_of(shape: str, piece: str, first: bool, name: str = "send") -> AIMessageChunk:
    """A chunk that adds `piece` to the call's arguments (to its reasoning, for "reasoning"),
    as providers' integrations make them."""
    call = tool_call_chunk(name=name if first else None, args=piece,
                           id="call_1" if first else None, index=1)
    if shape == "reasoning":
        return AIMessageChunk(content=[{"type": "thinking", "thinking": piece, "index": 0}])
    if shape == "openai_kwargs":  # langchain-openai 0.x: the raw call beside the parsed one
        raw = {"index": 1, "id": call["id"], "type": "function",
               "function": {"name": call["name"], "arguments": piece}}
        return AIMessageChunk(content="", additional_kwargs={"tool_calls": [raw]},
                              tool_call_chunks=[call])
    if shape == "anthropic_blocks":
        block = {"type": "input_json_delta", "partial_json": piece, "index": 1}
        return AIMessageChunk(content=[block], tool_call_chunks=[call])
    if shape == "v1_blocks":
        return AIMessageChunk(content=[dict(call)], tool_call_chunks=[call])
    return AIMessageChunk(content="", tool_call_chunks=[call])


class CallingTool(BaseChatModel):
    """Passes the credentials it was shown on to a tool, its arguments streamed 3 characters
    a chunk."""

    shape: str
    args: str = ARGS
    tool: str = "send"

    @property
    def _llm_type(self) -> str:
        return "calling-tool"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        raise NotImplementedError("streams only")

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        text = SAID if self.shape == "reasoning" else self.args
        for number, piece in enumerate(pieces(text)):
            chunk = ChatGenerationChunk(message=chunk_of(self.shape, piece, number == 0, self.tool))
            if run_manager:
                run_manager.on_llm_new_token("", chunk=chunk)
            yield chunk


def streamed(model: Any, **config: Any) -> AIMessageChunk:
    merged: Any = None
    for chunk in model.stream("send the config to ops", config=config):
        merged = chunk if merged is None else merged + chunk
    assert isinstance(merged, AIMessageChunk)
    return merged


def view(message: AIMessageChunk) -> dict[str, Any]:
    return {"content": message.content, "tool_calls": message.tool_calls,
            "invalid_tool_calls": message.invalid_tool_calls,
            "additional_kwargs": message.additional_kwargs}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_secret_streamed_in_tool_call_arguments_is_stored_as_its_placeholder(
        store: Store, shape: str) -> None:
    with store.record(name=f"tool-secrets-{shape}") as rec:
        live = streamed(CallingTool(shape=shape), callbacks=[RecordingCallbackHandler(rec)])
    assert rec.stats.internal_errors == 0
    if shape != "reasoning":
        assert live.tool_calls[0]["args"]["body"] == SAID
    [step] = store.load_steps(rec.run_id)
    assert leaks(canonical_bytes(step.output), FAKES) == []
    assert leaks(joined_by_place(step.output["chunks"]), FAKES) == []

    with store.replay(rec.run_id) as player:
        redacted = streamed(ReplayChatModel(player=player))
    # the chunks join to the call the step stores whole, redacted on its own: the arguments'
    # text as the JSON it is, so a secret JSON escapes (the PEM key) has one placeholder
    [stored] = step.output["generations"]
    assert view(redacted) == view(revive(stored).message)
    assert leaks(json.dumps(view(redacted)).encode(), FAKES) == []
    assert "<secret:" in json.dumps(view(redacted))
    with store.replay(rec.run_id, secrets=[f.value for f in FAKES]) as player:
        again = streamed(ReplayChatModel(player=player))
    # the same call, the secrets back in the arguments' text as JSON writes them
    assert view(again) == view(live)


def joined_args(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"].get("args", "") for e in events
                   if e["event"] == "content-block-delta")


@pytest.mark.skipif(not hasattr(BaseChatModel, "_iter_v2_events"),
                    reason="protocol events came with langchain-core 1.8")
def test_a_secret_in_protocol_event_deltas_is_stored_as_its_placeholder(store: Store) -> None:
    def events(model: Any, **config: Any) -> list[dict[str, Any]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the v3 stream is beta
            stream = model.stream_events("send the config to ops", config, version="v3")
            return [dict(event) for event in stream]

    with store.record(name="event-secrets") as rec:
        live = events(CallingTool(shape="tool_call_chunks"),
                      callbacks=[RecordingCallbackHandler(rec)])
    assert len(live) > 100 and joined_args(live) == ARGS
    [step] = store.load_steps(rec.run_id)
    assert leaks(canonical_bytes(step.output), FAKES) == []
    assert leaks(joined_by_place(step.output["events"]), FAKES) == []
    assert leaks(joined_by_place(step.output["chunks"]), FAKES) == []
    with store.replay(rec.run_id) as player:
        replayed = events(ReplayChatModel(player=player))
    assert leaks(json.dumps(replayed).encode(), FAKES) == []
    with store.replay(rec.run_id, secrets=[f.value for f in FAKES]) as player:
        again = events(ReplayChatModel(player=player))
    # each secret whole in the delta where it ended: the events join to the live ones
    assert [e["event"] for e in again] == [e["event"] for e in live]
    assert json.loads(joined_args(again), strict=False) == json.loads(joined_args(live)) == \
        json.loads(ARGS)
    assert [e for e in again if e["event"] != "content-block-delta"] == [
        e for e in live if e["event"] != "content-block-delta"]


class Agentic(CallingTool):
    """`CallingTool` as an agent's model: it takes tools, and once the tool answered it says
    what the tool said."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, Any]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        if not isinstance(messages[-1], ToolMessage):
            yield from super()._stream(messages, stop, run_manager, **kwargs)
            return
        chunk = ChatGenerationChunk(message=AIMessageChunk(content=f"done: {messages[-1].text}"))
        if run_manager:
            run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        yield chunk


def test_an_agent_streamed_with_a_secret_in_a_tool_call_replays(store: Store) -> None:
    """`create_agent` streamed by messages: LangChain merges the model's chunks into the call
    that reaches the tool, in replay too. A secret that JSON escapes (the PEM key) must get
    the same placeholder in the merged arguments as in the tool's recorded step, or the
    replay diverges at the tool (found while testing: it did)."""
    agents = pytest.importorskip("langchain.agents", reason="create_agent is langchain 1.x")
    from agentreplay_langchain import ReplayMiddleware

    sent: list[str] = []

    @tool
    def send(to: str, body: str) -> str:
        """Send a message."""
        sent.append(body)
        return f"sent {len(body)} characters to {to}"

    def run(middleware: list[Any], **config: Any) -> list[BaseMessage]:
        agent = agents.create_agent(Agentic(shape="tool_call_chunks"), [send],
                                    middleware=middleware)
        streamed = agent.stream({"messages": [HumanMessage("send the config to ops")]},
                                config, stream_mode=["messages", "values"])
        messages: list[BaseMessage] = [
            state for mode, state in streamed if mode == "values"][-1]["messages"]
        return messages

    with store.record(name="agent-tool-secrets") as rec:
        live = run([], callbacks=[RecordingCallbackHandler(rec)])
    assert sent == [SAID] and live[-1].text == f"done: sent {len(SAID)} characters to ops"
    steps = store.load_steps(rec.run_id)
    assert [s.kind for s in steps] == ["llm", "tool", "llm"]
    assert leaks(joined_by_place(steps[0].output["chunks"]), FAKES) == []
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = run([ReplayMiddleware(player)])
    assert replayed[-1].text == live[-1].text and sent == [SAID]  # the tool did not run again


#: arguments whose secrets a dict's redaction and a JSON text's scan told apart: a value under
#: a secret field (a password argument, a number too), and a `password=` value followed by a
#: line break, which the JSON text writes `\n` (a scan of the text ran on over it)
LOGIN = {"user": "ops", "password": "correct horse battery staple", "pin": 4821,
         "script": "export DB_PASSWORD=s3cr3t-value\nls -la",
         "headers": {"Authorization": "Bearer abcdefghijklmnopqrstuvwxyz0123\nX-Trace: 1"}}


@pytest.mark.parametrize("shape", [s for s in SHAPES if s != "reasoning"])
def test_an_agent_streaming_secret_arguments_replays_to_the_tool_step(
        store: Store, shape: str) -> None:
    """The arguments streamed as JSON text get the placeholders that the same arguments get
    as a dict (in the tool's step and the parsed call): the replay's merged call matches the
    tool's recorded step, and the text around the secrets is kept."""
    agents = pytest.importorskip("langchain.agents", reason="create_agent is langchain 1.x")
    from agentreplay_langchain import ReplayMiddleware

    ran: list[dict[str, Any]] = []

    @tool
    def login(user: str, password: str, pin: int, script: str,
              headers: dict[str, str]) -> str:
        """Log in and run a script."""
        ran.append({"user": user, "password": password, "pin": pin, "script": script,
                    "headers": headers})
        return f"{user} ran {len(script.splitlines())} lines"

    def run(middleware: list[Any], **config: Any) -> list[BaseMessage]:
        model = Agentic(shape=shape, args=json.dumps(LOGIN), tool="login")
        agent = agents.create_agent(model, [login], middleware=middleware)
        streamed = agent.stream({"messages": [HumanMessage("log in")]}, config,
                                stream_mode=["messages", "values"])
        messages: list[BaseMessage] = [
            state for mode, state in streamed if mode == "values"][-1]["messages"]
        return messages

    with store.record(name="agent-secret-arguments") as rec:
        live = run([], callbacks=[RecordingCallbackHandler(rec)])
    assert ran == [LOGIN] and live[-1].text == "done: ops ran 2 lines"
    chat, called, _ = store.load_steps(rec.run_id)
    stored = json.dumps(chat.output)
    assert not any(word in stored for word in ("correct", "horse", "staple", "s3cr3t",
                                               "abcdefgh"))
    merged = functools.reduce(operator.add, [revive(c).message for c in chat.output["chunks"]])
    assert merged.tool_calls[0]["args"] == called.input["input"]  # what replay sends the tool
    assert merged.tool_calls[0]["args"]["script"].endswith("\nls -la")
    assert merged.tool_calls[0]["args"]["pin"] == 4821
    with store.replay(rec.run_id) as player, instrument(player):
        replayed = run([ReplayMiddleware(player)])
    assert replayed[-1].text == live[-1].text and len(ran) == 1  # the tool did not run again
