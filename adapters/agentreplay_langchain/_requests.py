"""What of a LangChain call is stored as its request and matched on replay.

Requests are plain views without volatile fields (ids, response metadata), so that the match
key of a call is the same whenever the agent makes the same call.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

from agentreplay_core._stable_repr import stable_repr
from agentreplay_langchain._store_writes import STORE_TYPE


def _same(value: Any) -> Any:
    return value


def message_view(message: BaseMessage, *, snapshot: bool = True) -> dict[str, Any]:
    """What of a message the model sees, without ids and response metadata (volatile).

    `snapshot=False` shares the message's values instead of copying them, for a caller that
    has encoded the view before the agent can change the message.
    """
    copied = copy.deepcopy if snapshot else _same
    content = message.content
    view: dict[str, Any] = {"type": message.type,
                            "content": content if type(content) is str else copied(content)}
    if message.name:
        view["name"] = message.name
    if message.additional_kwargs:
        view["additional_kwargs"] = copied(message.additional_kwargs)
    if isinstance(message, AIMessage):
        if message.tool_calls:
            view["tool_calls"] = [
                {"name": c["name"], "args": copied(c["args"]), "id": c.get("id")}
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
        return copy.deepcopy(tool) if isinstance(tool, dict) else stable_repr(tool)
    return {"name": function.get("name"), "description": function.get("description", ""),
            "parameters": copy.deepcopy(function.get("parameters", {}))}


def chat_request(messages: Sequence[BaseMessage], tools: Any, stop: Any, *,
                 snapshot: bool = True) -> dict[str, Any]:
    """The request of a chat-model call as stored and matched.

    Only what the agent's own code decides goes in: the messages, the bound tools and stop
    sequences. Provider-specific parameters (model name, temperature, tool_choice as the
    provider rewrote it) are stored with the result, so that a replay model that does not know
    them still matches. `snapshot=False`: see `message_view`.
    """
    request: dict[str, Any] = {"messages": [message_view(m, snapshot=snapshot)
                                            for m in messages]}
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


def _injected(value: Any) -> bool:
    """LangGraph's store (`InjectedStore`) or a `ToolRuntime`, handed to a tool by the graph."""
    kind = type(value)
    return (STORE_TYPE is not None and isinstance(value, STORE_TYPE)) or (
        kind.__name__ == "ToolRuntime" and kind.__module__.startswith("langgraph."))


def tool_request(inputs: Any, resume: list[Any] | None = None) -> dict[str, Any]:
    """The request of a tool call: its arguments as `on_tool_start` saw them, and the answers
    of a resumed LangGraph task it runs in (`_interrupts.resume_answers`).

    What LangGraph injects into a tool, its store and its `ToolRuntime`, is left out:
    langchain-core before 1.0 shows injected arguments to `on_tool_start`, and up to 1.2 a
    runtime outside the tool's `args_schema` (`ShellToolMiddleware`'s shell), while they are
    no arguments the model chose (nor values a run log can hold: a runtime holds the graph's
    state, locks and all)."""
    if type(inputs) is dict and any(_injected(v) for v in inputs.values()):
        inputs = {k: v for k, v in inputs.items() if not _injected(v)}
    request = {"input": copy.deepcopy(inputs)}
    if resume is not None:
        request["resume"] = resume
    return request


def retriever_request(query: str) -> dict[str, Any]:
    return {"query": query}


def embedding_request(mode: str, texts: Sequence[str]) -> dict[str, Any]:
    """`mode` is "query" (embed_query) or "documents" (embed_documents)."""
    return {"mode": mode, "texts": list(texts)}
