"""A secret a model streams in its reasoning or in a tool call's arguments, as LlamaIndex's
OpenAI integration streams them (each chunk with the reasoning and arguments so far, in
blocks and in `additional_kwargs`, and the piece it adds), is stored as its placeholder: no
chunk holds any part of it, and the replay streams the redacted call, or the live one when
given the secrets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator, Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms import types
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools import BaseTool, FunctionTool

from agentreplay_core import Store
from agentreplay_core._codec import canonical_bytes
from agentreplay_llamaindex import ReplayLLM, instrument, replay_tools
from tests.llamaindex.models import aiterate
from tests.support.secret_leaks import fake_secrets, leaks, partial_leaks

FAKES = fake_secrets()
SAID = "Sending what the config holds: " + " and ".join(f.in_text for f in FAKES)
ARGS = json.dumps({"to": "ops", "body": SAID})
HELLO = [ChatMessage(role=MessageRole.USER, content="send the config to ops")]
#: reasoning and tool-call blocks came with llama-index-core 0.14: before, the integrations
#: streamed tool calls in `additional_kwargs` only, and reasoning as `thinking_delta`
BLOCKS = hasattr(types, "ThinkingBlock") and hasattr(types, "ToolCallBlock")


@pytest.fixture(autouse=True)
def _redaction_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "llamaindex-tool-secrets-key")


def partial_json(text: str) -> dict[str, Any]:
    """Arguments streamed so far, read as far as they go (as integrations read them)."""
    for ending in ("", '"}', "}"):
        try:
            parsed = json.loads(text + ending)
        except ValueError:
            continue
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _blocks(reasoning: str, arguments: str | None = None, tool: str = "send") -> list[Any]:
    if not BLOCKS:
        return [TextBlock(text="")]
    blocks = [types.ThinkingBlock(content=reasoning), TextBlock(text="")]
    if arguments is not None:
        blocks.append(types.ToolCallBlock(tool_call_id="call_1", tool_name=tool,
                                          tool_kwargs=arguments))
    return blocks


class ConfidingCaller(FunctionCallingLLM):
    """Thinks aloud about the credentials it read (`said`), then passes them to a tool, 4
    characters a chunk, each chunk as LlamaIndex's OpenAI integration makes it."""

    said: str = SAID
    #: the tool it calls, and the arguments (default: `said`, sent to ops)
    tool: str = "send"
    arguments: str | None = None

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="confiding-caller", is_chat_model=True,
                           is_function_calling_model=True)

    def _chunks(self) -> Generator[ChatResponse, None, None]:
        reasoning = arguments = ""
        for piece in [self.said[i:i + 4] for i in range(0, len(self.said), 4)]:
            reasoning += piece
            yield ChatResponse(
                message=ChatMessage(role=MessageRole.ASSISTANT, blocks=_blocks(reasoning)),
                delta="", raw={"reasoning": piece}, additional_kwargs={"thinking_delta": piece})
        arguments_text = self.arguments or json.dumps({"to": "ops", "body": self.said})
        for piece in [arguments_text[i:i + 4] for i in range(0, len(arguments_text), 4)]:
            arguments += piece
            call = {"id": "call_1", "type": "function",
                    "function": {"name": self.tool, "arguments": arguments}}
            yield ChatResponse(
                message=ChatMessage(role=MessageRole.ASSISTANT,
                                    blocks=_blocks(reasoning, arguments, self.tool),
                                    additional_kwargs={"tool_calls": [call]}),
                delta="", raw={"arguments": piece})

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        *_, last = self._chunks()
        return last

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        *_, last = self._chunks()
        return last

    def _answer(self, messages: Sequence[ChatMessage]) -> Generator[ChatResponse, None, None]:
        """The chunks, or, once the tool answered, a last word quoting what it said."""
        if messages and messages[-1].role == MessageRole.TOOL:
            text = f"done: {messages[-1].content}"
            yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text),
                               delta=text)
            return
        yield from self._chunks()

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        return self._answer(messages)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        return aiterate(list(self._answer(messages)))

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def astream_complete(self, prompt: str, formatted: bool = False,
                               **kwargs: Any) -> Any:
        raise NotImplementedError

    def _prepare_chat_with_tools(
        self, tools: Sequence[BaseTool], user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None, verbose: bool = False,
        allow_parallel_tool_calls: bool = False, tool_required: bool = False, **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(user_msg if isinstance(user_msg, ChatMessage)
                            else ChatMessage(role=MessageRole.USER, content=user_msg))
        return {"messages": messages, "tools": [t.metadata.to_openai_tool() for t in tools]}

    def get_tool_calls_from_response(self, response: ChatResponse,
                                     error_on_no_tool_call: bool = True, **kwargs: Any
                                     ) -> list[ToolSelection]:
        calls = response.message.additional_kwargs.get("tool_calls") or []
        return [ToolSelection(tool_id=c["id"], tool_name=c["function"]["name"],
                              tool_kwargs=partial_json(c["function"]["arguments"]))
                for c in calls]


def view(chunk: ChatResponse, llm: Any) -> dict[str, Any]:
    blocks = [b.model_dump() for b in chunk.message.blocks]
    calls = chunk.message.additional_kwargs.get("tool_calls")
    return {"blocks": blocks, "kwargs": chunk.message.additional_kwargs,
            "reasoning": next((b["content"] for b in blocks if "content" in b), None),
            "arguments": next((b["tool_kwargs"] for b in blocks if "tool_kwargs" in b), None),
            "kwargs_arguments": calls[0]["function"]["arguments"] if calls else None,
            "thinking_delta": chunk.additional_kwargs.get("thinking_delta"),
            "tool_calls": [c.model_dump() for c in
                           llm.get_tool_calls_from_response(chunk, error_on_no_tool_call=False)]}


def streamed(llm: Any, asynchronous: bool) -> list[dict[str, Any]]:
    async def astream() -> list[ChatResponse]:
        return [c async for c in await llm.astream_chat(HELLO)]

    chunks = asyncio.run(astream()) if asynchronous else list(llm.stream_chat(HELLO))
    return [view(chunk, llm) for chunk in chunks]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_secrets_streamed_in_reasoning_and_tool_arguments_are_never_stored(
        li_store: Store, asynchronous: bool) -> None:
    llm = ConfidingCaller()
    with li_store.record(name="tool-secrets") as rec, instrument(rec):
        live = streamed(llm, asynchronous)
    assert live[-1]["tool_calls"][0]["tool_kwargs"]["body"] == SAID
    [step] = li_store.load_steps(rec.run_id)
    stored = canonical_bytes(step.output)
    # no part of a secret: each chunk holds the reasoning and arguments so far, whose first
    # part of a secret that ends in a later chunk is too short for its rule to recognise
    assert leaks(stored, FAKES) == [] and partial_leaks(stored, FAKES) == []

    with li_store.replay(rec.run_id) as player:
        redacted = streamed(ReplayLLM(player), asynchronous)
    assert len(redacted) == len(live)
    assert partial_leaks(json.dumps(redacted).encode(), FAKES) == []
    last = redacted[-1]
    assert "<secret:" in last["tool_calls"][0]["tool_kwargs"]["body"]
    # the arguments' text redacted in pieces as the JSON it makes, their parsed form as a
    # dict: the same placeholders, also of a secret JSON escapes (the PEM key's line breaks)
    assert json.loads(last["kwargs_arguments"]) == last["tool_calls"][0]["tool_kwargs"]
    thought = "".join(chunk["thinking_delta"] or "" for chunk in redacted)
    assert "<secret:" in thought
    if BLOCKS:
        assert last["arguments"] == last["kwargs_arguments"] and last["reasoning"] == thought

    with li_store.replay(rec.run_id, secrets=[f.value for f in FAKES]) as player:
        again = streamed(ReplayLLM(player), asynchronous)
    assert again[-1] == live[-1]
    # each chunk holds what the live one held, less a secret not ended yet
    for chunk, live_chunk in zip(again, live, strict=True):
        for field in ("reasoning", "arguments", "kwargs_arguments"):
            text, live_text = chunk[field] or "", live_chunk[field] or ""
            unended = live_text[len(text):]
            assert live_text.startswith(text)
            assert not unended or any(unended in value for f in FAKES
                                      for value in (f.value, json.dumps(f.value)[1:-1]))


def run_agent(llm: Any, tools: list[Any]) -> str:
    """A streaming FunctionAgent's answer, asked to do what the model does anyway."""
    async def run() -> str:
        output: Any = await FunctionAgent(tools=tools, llm=llm, streaming=True).run(
            user_msg="go ahead")
        return str(output.response.content)

    return asyncio.run(run())


def test_an_agent_that_streams_a_secret_into_a_tool_call_replays_without_it(
        li_store: Store) -> None:
    """A FunctionAgent reads the tool call from each streamed chunk, then runs the tool with
    the arguments of the last: the replay serves the redacted call, and the tool's recorded
    result, to the same end."""
    sent: list[str] = []

    def send(to: str, body: str) -> str:
        """Send a message."""
        sent.append(body)
        return f"sent {len(body)} characters to {to}"

    tools = [FunctionTool.from_defaults(fn=send)]
    with li_store.record(name="agent-tool-secrets") as rec, instrument(rec):
        live = run_agent(ConfidingCaller(), tools)
    assert sent == [SAID] and live == f"done: sent {len(SAID)} characters to ops"
    steps = li_store.load_steps(rec.run_id)
    assert [s.kind for s in steps] == ["llm", "tool", "llm"]
    stored = b"".join(canonical_bytes([s.input, s.output]) for s in steps)
    assert leaks(stored, FAKES) == [] and partial_leaks(stored, FAKES) == []
    with li_store.replay(rec.run_id) as player:
        assert run_agent(ReplayLLM(player), replay_tools(player, tools)) == live
    assert sent == [SAID]  # the tool did not run again


#: arguments whose secrets a dict's redaction and a text scan tell apart: a value under a
#: secret field (a number too), and a `password=` value before a line break
LOGIN = {"user": "ops", "password": "correct horse battery staple", "pin": 4821,
         "script": "export DB_PASSWORD=s3cr3t-value\nls -la"}


def test_an_agent_streaming_secret_arguments_replays_to_the_tool_step(li_store: Store) -> None:
    """The arguments the agent reads from each chunk are redacted as the tool's step is: the
    replay's call matches the step, and the text around the secrets is kept."""
    ran: list[dict[str, Any]] = []

    def login(user: str, password: str, pin: int, script: str) -> str:
        """Log in and run a script."""
        ran.append({"user": user, "password": password, "pin": pin, "script": script})
        return f"{user} ran {len(script.splitlines())} lines"

    tools = [FunctionTool.from_defaults(fn=login)]
    caller = ConfidingCaller(said="logging in", tool="login", arguments=json.dumps(LOGIN))
    with li_store.record(name="agent-secret-arguments") as rec, instrument(rec):
        live = run_agent(caller, tools)
    assert ran == [LOGIN] and live == "done: ops ran 2 lines"
    steps = li_store.load_steps(rec.run_id)
    assert [s.kind for s in steps] == ["llm", "tool", "llm"]
    stored = b"".join(canonical_bytes([s.input, s.output]) for s in steps)
    assert not any(secret in stored for secret in (b"correct", b"horse", b"staple", b"s3cr3t"))
    with li_store.replay(rec.run_id) as player:
        assert run_agent(ReplayLLM(player), replay_tools(player, tools)) == live
    assert len(ran) == 1  # the tool did not run again
