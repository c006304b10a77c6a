"""Pure conversions between LangChain objects and what agentreplay stores.

Results are stored with `langchain_core.load.dumpd` inside a versioned envelope (the format is
the same on langchain-core 0.3 and 1.x and keeps tool calls, usage and ids) and revived with an
explicit allow-list. Requests are stored as plain views without volatile fields, so that the
match key of a call is the same whenever the agent makes the same call.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.load import dumpd
from langchain_core.load.serializable import Serializable
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    ChatMessageChunk,
    FunctionMessage,
    FunctionMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, Generation, GenerationChunk
from langchain_core.utils.function_calling import convert_to_openai_tool

from agentreplay_langchain._compat import make_loader

#: marks a LangChain object stored with dumpd; the number is the envelope's format version
ENVELOPE = "agentreplay.langchain"
ENVELOPE_VERSION = 1

#: the only classes a recording may revive: results, never models, prompts or anything that
#: carries configuration (a tampered recording must not be able to build a client)
ALLOWED_CLASSES: tuple[type[Serializable], ...] = (
    AIMessage, AIMessageChunk, HumanMessage, HumanMessageChunk, SystemMessage,
    SystemMessageChunk, ToolMessage, ToolMessageChunk, ChatMessage, ChatMessageChunk,
    FunctionMessage, FunctionMessageChunk, ChatGeneration, ChatGenerationChunk, Generation,
    GenerationChunk, Document,
)
#: revives dumpd payloads of the allowed classes only
_load = make_loader(ALLOWED_CLASSES)


def dump(value: Any) -> Any:
    """A LangChain result as stored: allow-listed objects in an envelope, anything else (a
    LangGraph Command, a plain tool result) as is, for the core codec."""
    if isinstance(value, ToolMessage) and value.artifact is not None:
        # dumpd cannot keep arbitrary artifacts; the core codec keeps far more of them
        bare = value.model_copy(update={"artifact": None})
        return {ENVELOPE: ENVELOPE_VERSION, "dumpd": dumpd(bare), "artifact": value.artifact}
    if isinstance(value, ALLOWED_CLASSES):
        return {ENVELOPE: ENVELOPE_VERSION, "dumpd": dumpd(value)}
    if isinstance(value, list) and value and all(isinstance(v, ALLOWED_CLASSES) for v in value):
        return [dump(v) for v in value]
    try:
        return copy.deepcopy(value)
    except Exception:  # a live resource (a lock, a connection): stored as unencodable, counted
        return value


def revive(stored: Any) -> Any:
    """The inverse of `dump`, over any list or dict holding envelopes: fresh objects each call.

    Every envelope in `stored` is revived in one pass.
    """
    payloads: list[Any] = []
    template = _collect(stored, payloads)
    if not payloads:
        return template
    return _fill(template, _load(payloads))


class _Slot:
    """Where the n-th revived envelope goes back into the value."""

    __slots__ = ("artifact", "index")

    def __init__(self, index: int, artifact: Any) -> None:
        self.index = index
        self.artifact = artifact


_NO_ARTIFACT = object()


def _collect(stored: Any, payloads: list[Any]) -> Any:
    if isinstance(stored, dict):
        if ENVELOPE not in stored:
            return {k: _collect(v, payloads) for k, v in stored.items()}
        version = stored[ENVELOPE]
        if version != ENVELOPE_VERSION:
            raise ValueError(
                f"recorded LangChain object has envelope version {version!r}; this agentreplay "
                f"reads version {ENVELOPE_VERSION}: upgrade agentreplay to replay it")
        payloads.append(stored["dumpd"])
        return _Slot(len(payloads) - 1, stored.get("artifact", _NO_ARTIFACT))
    if isinstance(stored, list):
        return [_collect(v, payloads) for v in stored]
    return stored


def _fill(template: Any, revived: list[Any]) -> Any:
    if isinstance(template, _Slot):
        value = revived[template.index]
        if template.artifact is not _NO_ARTIFACT and isinstance(value, ToolMessage):
            value.artifact = template.artifact
        return value
    if isinstance(template, dict):
        return {k: _fill(v, revived) for k, v in template.items()}
    if isinstance(template, list):
        return [_fill(v, revived) for v in template]
    return template


# -- requests -------------------------------------------------------------------------------

def message_view(message: BaseMessage) -> dict[str, Any]:
    """What of a message the model sees, without ids and response metadata (volatile)."""
    view: dict[str, Any] = {"type": message.type, "content": copy.deepcopy(message.content)}
    if message.name:
        view["name"] = message.name
    if message.additional_kwargs:
        view["additional_kwargs"] = copy.deepcopy(message.additional_kwargs)
    if isinstance(message, AIMessage):
        if message.tool_calls:
            view["tool_calls"] = [
                {"name": c["name"], "args": copy.deepcopy(c["args"]), "id": c.get("id")}
                for c in message.tool_calls]
        if message.invalid_tool_calls:
            view["invalid_tool_calls"] = [
                {k: c.get(k) for k in ("name", "args", "id", "error")}
                for c in message.invalid_tool_calls]
    if isinstance(message, ToolMessage):
        view["tool_call_id"] = message.tool_call_id
        view["status"] = message.status
    if isinstance(message, ChatMessage):
        view["role"] = message.role
    return view


def tool_view(tool: Any) -> Any:
    """A bound tool as {name, description, parameters}, whatever format the model bound it in
    (OpenAI, Anthropic, a BaseTool, a pydantic class, a function)."""
    try:
        function = convert_to_openai_tool(tool).get("function", {})
    except Exception:
        return copy.deepcopy(tool) if isinstance(tool, dict) else repr(tool)
    return {"name": function.get("name"), "description": function.get("description", ""),
            "parameters": copy.deepcopy(function.get("parameters", {}))}


def chat_request(messages: Sequence[BaseMessage], tools: Any, stop: Any) -> dict[str, Any]:
    """The request of a chat-model call as stored and matched.

    Only what the agent's own code decides goes in: the messages, the bound tools and stop
    sequences. Provider-specific parameters (model name, temperature, tool_choice as the
    provider rewrote it) are stored with the result, so that a replay model that does not know
    them still matches.
    """
    request: dict[str, Any] = {"messages": [message_view(m) for m in messages]}
    if tools:
        request["tools"] = [tool_view(t) for t in tools]
    if stop:
        request["stop"] = list(stop)
    return request


def llm_request(prompt: str, stop: Any) -> dict[str, Any]:
    """The request of a text-completion call."""
    request: dict[str, Any] = {"prompt": prompt}
    if stop:
        request["stop"] = list(stop)
    return request


def tool_request(inputs: Any) -> dict[str, Any]:
    """The request of a tool call: its arguments as `on_tool_start` saw them."""
    return {"input": copy.deepcopy(inputs)}


def retriever_request(query: str) -> dict[str, Any]:
    return {"query": query}


def embedding_request(mode: str, texts: Sequence[str]) -> dict[str, Any]:
    """`mode` is "query" (embed_query) or "documents" (embed_documents)."""
    return {"mode": mode, "texts": list(texts)}
