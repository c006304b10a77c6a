"""Scripted, nondeterministic parts for the LangChain tests.

The chat model draws ids, wording and usage from os.urandom, so two live runs of the same agent
differ: a replay that silently went live would not reproduce the recorded transcript. The tools
count their executions, so a test can prove that replay never ran them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import LLM, BaseChatModel, LanguageModelInput
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.outputs import (
    ChatGeneration,
    ChatGenerationChunk,
    ChatResult,
    GenerationChunk,
)
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from pydantic import BaseModel, Field

from agentreplay_langchain._structured import parsed_output

#: per model turn, the (tool name, args) calls the scripted model makes
Plan = list[list[tuple[str, dict[str, Any]]]]


def nonce() -> str:
    return os.urandom(6).hex()


class ScriptedChatModel(BaseChatModel):
    """Calls tools by a plan, then answers from what the tools returned, with random wording.

    `plan[i]` lists the (tool name, args) calls of the i-th model turn of a conversation (turns
    are counted by the AI messages already in it); once the plan is used up, or when no tools
    are bound, the model answers in text that quotes the last human message and every tool
    result since.
    """

    plan: Plan = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted-random"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        # like ChatOpenAI: tools as OpenAI dicts, tool_choice rewritten the provider's way
        if tool_choice == "any":
            tool_choice = "required"
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _reply(self, messages: list[BaseMessage], tools: Any) -> AIMessage:
        self.calls += 1
        turn = sum(isinstance(m, AIMessage) for m in messages)
        usage = {"input_tokens": int.from_bytes(os.urandom(2), "big"),
                 "output_tokens": int.from_bytes(os.urandom(1), "big")}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        if tools and turn < len(self.plan):
            calls = [{"name": name, "args": args, "id": f"call_{nonce()}"}
                     for name, args in self.plan[turn]]
            return AIMessage(content=f"using tools ({nonce()})", tool_calls=calls,
                             usage_metadata=usage,
                             response_metadata={"model_name": "scripted", "seed": nonce()})
        human = next((m.content for m in reversed(messages) if isinstance(m, HumanMessage)), "")
        results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        text = f"answer {nonce()} to {human!s}" + "".join(f" | {r}" for r in results)
        return AIMessage(content=text, usage_metadata=usage,
                         response_metadata={"model_name": "scripted", "seed": nonce()})

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        message = self._reply(messages, kwargs.get("tools"))
        return ChatResult(generations=[ChatGeneration(message=message)],
                          llm_output={"system_fingerprint": nonce()})

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        yield from _chunks(self._reply(messages, kwargs.get("tools")))

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in _chunks(self._reply(messages, kwargs.get("tools"))):
            yield chunk


def _chunks(message: AIMessage) -> Iterator[ChatGenerationChunk]:
    """The message in several chunks: words of the content, then tool calls, then usage."""
    words = str(message.content).split(" ")
    for i, word in enumerate(words):
        yield ChatGenerationChunk(message=AIMessageChunk(content=word if i == 0 else " " + word))
    for index, call in enumerate(message.tool_calls):
        yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=[
            tool_call_chunk(name=call["name"], args=json.dumps(call["args"]), id=call["id"],
                            index=index)]))
    yield ChatGenerationChunk(message=AIMessageChunk(
        content="", usage_metadata=message.usage_metadata,
        response_metadata=message.response_metadata))


class Counter:
    """How often each tool really ran (thread-safe: ToolNode runs tools in parallel)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def hit(self, name: str) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def make_tools(counter: Counter) -> list[BaseTool]:
    """Tools whose results are random, so only the recording can reproduce them."""

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        counter.hit("weather")
        return f"{city}: {int.from_bytes(os.urandom(1), 'big') % 40} C ({nonce()})"

    @tool
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        counter.hit("add")
        return a + b + int.from_bytes(os.urandom(1), "big") / 1000

    @tool(response_format="content_and_artifact")
    def search(query: str) -> tuple[str, dict[str, Any]]:
        """Search the web."""
        counter.hit("search")
        token = nonce()
        return f"found {token} for {query}", {"hits": [token], "score": 0.5}

    return [weather, add, search]


class HashEmbeddings(Embeddings):
    """Deterministic float64 embeddings from SHA-256 (full 53-bit mantissas), counting calls."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.calls = 0

    def _vector(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest() * 2
        values = struct.unpack(f"<{self.size}Q", digest[: 8 * self.size])
        return [(v >> 11) / float(1 << 53) - 0.5 for v in values]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls += 1
        return self._vector(text)


def transcript(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """What a user compares between a live run and its replay: everything but object identity."""
    out = []
    for m in messages:
        item: dict[str, Any] = {"type": m.type, "content": m.content, "id": m.id}
        if isinstance(m, AIMessage):
            item["tool_calls"] = m.tool_calls
            item["usage"] = m.usage_metadata
            item["response_metadata"] = m.response_metadata
        if isinstance(m, ToolMessage):
            item.update(tool_call_id=m.tool_call_id, status=m.status, artifact=m.artifact)
        out.append(item)
    return out



# -- seeing network use without mocking anything --------------------------------------------

_socket_watchers: list[list[tuple[str, str]]] = []
_socket_lock = threading.Lock()
# not socket creation: asyncio makes a local socketpair for every event loop
_NETWORK_EVENTS = frozenset({"socket.connect", "socket.getaddrinfo", "socket.sendto",
                             "socket.sendmsg", "socket.gethostbyname", "socket.gethostbyaddr"})


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in _NETWORK_EVENTS and _socket_watchers:
        with _socket_lock:
            for events in _socket_watchers:
                events.append((event, repr(args[1:])[:200]))


_audit_installed = False


@contextlib.contextmanager
def network_attempts() -> Iterator[list[tuple[str, str]]]:
    """Every connect, name lookup or datagram send that Python code makes while the block runs,
    in any thread, seen through an audit hook (PEP 578). (What the network guard refuses raises
    before it gets this far; libpq's own connections are C and not seen.)"""
    global _audit_installed
    with _socket_lock:
        if not _audit_installed:  # audit hooks cannot be removed: install one, once
            sys.addaudithook(_audit)
            _audit_installed = True
        events: list[tuple[str, str]] = []
        _socket_watchers.append(events)
    try:
        yield events
    finally:
        with _socket_lock:
            _socket_watchers.remove(events)


def random_value(spec: dict[str, Any]) -> Any:
    """A random value of a JSON-schema property (the types the structured-output tests use)."""
    kind = spec.get("type")
    if kind == "integer":
        return int.from_bytes(os.urandom(2), "big")
    if kind == "number":
        return int.from_bytes(os.urandom(3), "big") / 1024
    if kind == "boolean":
        return bool(os.urandom(1)[0] & 1)
    if kind == "array":
        return [random_value(spec.get("items", {"type": "string"})) for _ in range(2)]
    return nonce()


def random_object(schema: dict[str, Any]) -> dict[str, Any]:
    return {name: random_value(spec) for name, spec in schema.get("properties", {}).items()}


class StructuredChatModel(ScriptedChatModel):
    """A scripted model whose `with_structured_output` works the way providers' do.

    function_calling binds the schema as a tool with a forced `tool_choice` (the model answers
    with a tool call); json_schema binds `response_format` with the schema and json_mode a bare
    JSON `response_format` (the model answers with JSON content). Both pass
    `ls_structured_output_format`, as providers do, and every value is random.
    """

    #: what a json_mode prompt would tell the model; providers do not send it separately
    json_mode_schema: dict[str, Any] | None = None
    #: answer text that is not JSON (to record a parsing error)
    broken_json: bool = False

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None,
                   strict: bool | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        # like ChatOpenAI: `strict` shapes the tool schemas
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=[convert_to_openai_tool(t, strict=strict) for t in tools],
                         **kwargs)

    def with_structured_output(
        self, schema: dict[str, Any] | type, *, include_raw: bool = False,
        method: str = "function_calling", strict: bool | None = None, **kwargs: Any,
    ) -> Runnable[LanguageModelInput, Any]:
        is_model = isinstance(schema, type) and issubclass(schema, BaseModel)
        fmt = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
        json_schema = convert_to_json_schema(schema)
        parser: Runnable[Any, Any]
        if method == "function_calling":
            name = convert_to_openai_tool(schema)["function"]["name"]
            llm = self.bind_tools([schema], tool_choice=name, strict=strict,
                                  ls_structured_output_format=fmt)
            parser = (PydanticToolsParser(tools=[schema], first_tool_only=True)  # type: ignore[list-item]
                      if is_model else JsonOutputKeyToolsParser(key_name=name,
                                                                first_tool_only=True))
        else:
            if method == "json_schema":
                model: StructuredChatModel = self
                response_format: dict[str, Any] = {
                    "type": "json_schema",
                    "json_schema": {"name": json_schema["title"], "schema": json_schema}}
            else:
                model = self.model_copy(update={"json_mode_schema": json_schema})
                response_format = {"type": "json_object"}
            llm = model.bind(response_format=response_format, ls_structured_output_format=fmt)
            parser = (PydanticOutputParser(pydantic_object=schema)  # type: ignore[arg-type]
                      if is_model else JsonOutputParser())
        # the include_raw wrapping every LangChain model shares
        return parsed_output(llm, parser, include_raw=include_raw)

    def _structured_reply(self, messages: list[BaseMessage], kwargs: dict[str, Any]
                          ) -> AIMessage | None:
        usage = {"input_tokens": int.from_bytes(os.urandom(2), "big"), "output_tokens": 7,
                 "total_tokens": 0}
        usage["total_tokens"] = usage["input_tokens"] + 7
        metadata = {"model_name": "structured", "seed": nonce()}
        tools, choice = kwargs.get("tools"), kwargs.get("tool_choice")
        if tools and isinstance(choice, str) and choice not in ("auto", "none", "required"):
            function = next(t["function"] for t in tools if t["function"]["name"] == choice)
            call = {"name": choice, "args": random_object(function["parameters"]),
                    "id": f"call_{nonce()}"}
            return AIMessage(content="", tool_calls=[call], usage_metadata=usage,
                             response_metadata=metadata)
        response_format = kwargs.get("response_format")
        if response_format is None:
            return None
        if response_format["type"] == "json_schema":
            schema = response_format["json_schema"]["schema"]
        else:
            schema = self.json_mode_schema or {}
        content = json.dumps(random_object(schema))
        if self.broken_json:
            content = f"Sorry, I cannot answer that ({nonce()})."
        return AIMessage(content=content, usage_metadata=usage,
                         response_metadata=metadata)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        message = self._structured_reply(messages, kwargs)
        if message is None:
            return super()._generate(messages, stop, run_manager, **kwargs)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        message = self._structured_reply(messages, kwargs)
        if message is None:
            yield from super()._stream(messages, stop, run_manager, **kwargs)
        else:
            yield from _chunks(message)


class NamedStructuredModel(StructuredChatModel):
    """A model without profile data that `create_agent` knows by its name."""

    model_name: str = "gpt-4o-mini"


class StreamingChatModel(ScriptedChatModel):
    """A scripted model that streams inside invoke when built with `streaming=True`, as
    providers do (langchain-core 1.x does it for them; on 0.3 their `_generate` does)."""

    streaming: bool = False

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        if not self.streaming:
            return super()._generate(messages, stop, run_manager, **kwargs)
        chunks = list(self._stream(messages, stop, run_manager, **kwargs))
        for chunk in chunks:
            if run_manager:
                run_manager.on_llm_new_token(str(chunk.message.content), chunk=chunk)
        return generate_from_stream(iter(chunks))


class ScriptedLLM(LLM):
    """A text-completion LLM with random answers that streams word by word, firing the token
    callbacks itself as text LLMs do. `fail_after` makes a stream fail after that many words."""

    fail_after: int | None = None
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted-random-llm"

    def _text(self, prompt: str) -> str:
        self.calls += 1
        return f"completion {nonce()} of {prompt} ({int.from_bytes(os.urandom(2), 'big')})"

    def _call(self, prompt: str, stop: list[str] | None = None,
              run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> str:
        return self._text(prompt)

    def _stream(self, prompt: str, stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None,
                **kwargs: Any) -> Iterator[GenerationChunk]:
        for index, word in enumerate(self._text(prompt).split(" ")):
            if self.fail_after is not None and index == self.fail_after:
                raise TimeoutError(f"completion timed out after {index} words")
            chunk = GenerationChunk(text=word if index == 0 else " " + word,
                                    generation_info={"index": index, "seed": nonce()})
            if run_manager:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


def assert_offline() -> None:
    """Inside a replay: an outbound connection must be refused by the network guard."""
    import socket

    from agentreplay_core import NetworkAccessDuringReplay

    try:
        socket.create_connection(("203.0.113.7", 443), timeout=0.5).close()
    except NetworkAccessDuringReplay:
        return
    except OSError as exc:
        raise AssertionError(f"the network guard is off: the connection got as far as {exc!r}"
                             ) from exc
    raise AssertionError("the network guard is off: a connection was opened")
