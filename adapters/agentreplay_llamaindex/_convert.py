"""Pure conversions between LlamaIndex objects and what a step stores.

Recording and replay build requests with the same functions, so a call made by the same code
gets the same match key whichever backend (live LLM or `ReplayLLM`) is behind it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.schema import NodeWithScore
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from llama_index.core.tools import ToolOutput, ToolSelection

from agentreplay_core import Redactor, SerializationError, encode, match_key, strip_volatile
from agentreplay_core._key_order import in_key_order, keep_key_order
from agentreplay_core._keys import DEFAULT_VOLATILE_KEYS, match_key_of_encoded
from agentreplay_core._stable_repr import stable_repr
from agentreplay_llamaindex._compat import is_workflow_context

#: the LLM metadata a replay needs: it decides chat vs completion, how many calls a RAG
#: query makes (context window) and whether an agent asks for tool calls
METADATA_FIELDS = ("context_window", "num_output", "is_chat_model", "is_function_calling_model",
                   "model_name", "system_role")
#: request keys that make up an LLM call's identity; everything else is kept for reading only
_LLM_KEY_FIELDS = ("mode", "messages", "prompt", "tools")
#: a volatile key in JSON text (a string value may show one too: then the value is walked)
_VOLATILE_JSON = re.compile(
    b'"(?:' + b"|".join(re.escape(k.encode()) for k in sorted(DEFAULT_VOLATILE_KEYS)) + b')":')
#: a plain text message is built by hand (pydantic's model_dump costs ~1 us per message) only
#: while the classes have the fields this adapter knows; `message_json` checks it gives
#: model_dump's output exactly (tests/llamaindex/test_request_view.py)
_TEXT_FAST = (tuple(ChatMessage.model_fields) == ("role", "additional_kwargs", "blocks")
              and tuple(TextBlock.model_fields) == ("block_type", "text"))


def encodable(value: Any) -> Any:
    """`value` if the codec can store it, else its repr (provider payloads, generators)."""
    try:
        encode(value, path="value")
    except SerializationError:
        return {"unencodable_repr": stable_repr(value)[:2000]}
    return value


_PLAIN = frozenset({str, int, float, bool, type(None)})


def llm_metadata(llm: Any) -> dict[str, Any]:
    """The replay-relevant part of `llm.metadata`, never `to_dict()` (it may hold API keys)."""
    meta = llm.metadata
    out: dict[str, Any] = {}
    for field in METADATA_FIELDS:
        value = getattr(meta, field, None)
        if type(value) not in _PLAIN:
            value = getattr(value, "value", value)  # MessageRole -> its string
        out[field] = value
    return out


def _text_message(message: Any) -> dict[str, Any] | None:
    """`model_dump(mode="json")` of a message of text blocks only and no additional kwargs,
    built by hand; None for any other message."""
    if not _TEXT_FAST or type(message) is not ChatMessage or message.additional_kwargs \
            or type(message.role) is not MessageRole:
        return None
    blocks = []
    for block in message.blocks:
        if type(block) is not TextBlock or type(block.text) is not str \
                or type(block.block_type) is not str:
            return None
        blocks.append({"block_type": block.block_type, "text": block.text})
    # `_value_`: the member's value without the enum descriptor (it is a MessageRole)
    return {"role": message.role._value_, "additional_kwargs": {}, "blocks": blocks}


def message_json(message: Any) -> Any:
    """A chat message as plain JSON (what a request is matched on): `model_dump(mode="json")`."""
    text = _text_message(message)
    if text is not None:
        return text
    if isinstance(message, ChatMessage):
        try:
            return message.model_dump(mode="json")
        except Exception:  # a provider object in additional_kwargs that pydantic cannot dump
            return {"role": str(message.role.value), "content": message.content}
    return encodable(message)


def _tool_call_id(message: Any) -> str:
    kwargs = message.get("additional_kwargs") if isinstance(message, dict) else None
    value = kwargs.get("tool_call_id") if isinstance(kwargs, dict) else None
    return str(value or "")


def normalise_tool_results(messages: list[Any]) -> list[Any]:
    """Sort each contiguous run of tool-result messages by tool_call_id.

    Parallel tools finish in any order and the agent appends their results in completion
    order; the LLM call that follows is the same call whatever that order was.
    """
    out: list[Any] = []
    run: list[Any] = []
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "tool":
            run.append(message)
            continue
        out.extend(sorted(run, key=_tool_call_id))
        run = []
        out.append(message)
    out.extend(sorted(run, key=_tool_call_id))
    return out


def tool_name_of(spec: Any) -> str:
    """The name of a tool as an LLM integration passes it (a tool, metadata or JSON spec)."""
    metadata = getattr(spec, "metadata", spec)
    name = getattr(metadata, "name", None)
    if isinstance(name, str):
        return name
    if isinstance(spec, Mapping):
        function = spec.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            return str(function["name"])
        if isinstance(spec.get("name"), str):
            return str(spec["name"])
    return stable_repr(spec)[:200]


def llm_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's other kwargs (the integration's tool schemas, tool_choice, ...).

    Stored with the step's output, not its request: a `ReplayLLM` cannot rebuild another
    integration's kwargs, so keeping them out of the request keeps divergence diffs to what
    the agent really changed.
    """
    if not kwargs:
        return {}
    return {k: encodable(v) for k, v in kwargs.items() if k != "messages"}


def llm_request(mode: str, payload: Any, kwargs: Mapping[str, Any],
                metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The request as runs recorded before `llm_view` stored it (with the LLM's metadata);
    replay rebuilds it, with `llm_match_key`, to match those runs."""
    offered = kwargs.get("tools") or []
    request: dict[str, Any] = {"mode": mode}
    if mode == "chat":
        request["messages"] = [message_json(m) for m in payload]
    else:
        request["prompt"] = str(payload)
    request["tools"] = sorted(tool_name_of(t) for t in offered)
    request["metadata"] = dict(metadata)
    return request


def llm_view(mode: str, payload: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The stored request of an LLM call: exactly what it is matched on; `payload` is the
    messages or the prompt.

    Mode, messages (or prompt) and tool names; the messages with contiguous tool results in
    tool_call_id order and without volatile fields. The recorder and the player derive the
    match key from it (redacted), the key `llm_match_key` gives the same call, so runs
    recorded before this view keep matching. The LLM's metadata goes with the output.

    Tools are identified by name only: the live integration turned them into its own JSON
    specs (OpenAI, Anthropic, Gemini formats, strict-mode edits), which a replay cannot
    rebuild, and `chat_with_tools`, which still holds the tool objects, opens no span.
    """
    view: dict[str, Any] = {"mode": mode}
    if mode == "chat":
        # a text message's keys are known, none of them volatile: only others are checked
        messages = [_text_message(m) or without_volatile(message_json(m)) for m in payload]
        view["messages"] = normalise_tool_results(messages) \
            if sum(m.get("role") == "tool" for m in messages if type(m) is dict) > 1 \
            else messages  # fewer than two tool results: no order to normalise
    else:
        view["prompt"] = str(payload)
    offered = kwargs.get("tools")
    view["tools"] = sorted(tool_name_of(t) for t in offered) if offered else []
    return view


def without_volatile(value: Any) -> Any:
    """`strip_volatile(value)`, walking the value only if its JSON text may hold such a key."""
    try:
        text = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):  # not plain JSON: the walk decides
        return strip_volatile(value)
    return strip_volatile(value) if _VOLATILE_JSON.search(text) else value


def is_legacy_request(request: Any) -> bool:
    """A request recorded before `llm_view`: it holds the LLM's metadata, and its match key
    was computed by the adapter (`llm_match_key`, keyed again when it held secrets)."""
    return isinstance(request, dict) and "metadata" in request


def llm_match_key(name: str, request: Mapping[str, Any],
                  redactor: Redactor | None = None) -> str:
    """The key an LLM call is matched on: mode, messages or prompt, and tool names.

    With the store's `redactor` (recorder's or player's), secrets are replaced before hashing,
    as in what is stored: a call holding a secret, and the same call made in replay with the
    placeholders replay handed back for it, get the same key.
    """
    subset = {k: request[k] for k in _LLM_KEY_FIELDS if k in request}
    if isinstance(subset.get("messages"), list):
        subset["messages"] = normalise_tool_results(subset["messages"])
    if redactor is None:
        return match_key("llm", name, strip_volatile(subset))
    redacted, _ = redactor.redact_encoded(encode(strip_volatile(subset), path="request"))
    return match_key_of_encoded("llm", name, redacted)


def tool_selections_json(selections: Sequence[ToolSelection]) -> list[dict[str, Any]]:
    out = []
    for s in selections:
        item = {"tool_id": s.tool_id, "tool_name": s.tool_name,
                "tool_kwargs": encodable(s.tool_kwargs)}
        keep_key_order(item, "kwargs_order", s.tool_kwargs)  # the model's (the store sorts)
        out.append(item)
    return out


def tool_selections_from_json(items: Sequence[Mapping[str, Any]]) -> list[ToolSelection]:
    return [ToolSelection(tool_id=i["tool_id"], tool_name=i["tool_name"],
                          tool_kwargs=in_key_order(i["tool_kwargs"], i.get("kwargs_order")))
            for i in items]


#: the key of a response's recorded `tool_calls` when reading them raised: `{"error": ...}`
TOOL_CALLS_ERROR = "error"


def recorded_tool_calls(stored: Any) -> list[ToolSelection]:
    """The tool calls the live LLM read from a response (None: none), or the exception
    reading them raised, raised again."""
    from agentreplay_core._recorded_errors import error_from_record

    if isinstance(stored, dict):
        raise error_from_record(stored.get(TOOL_CALLS_ERROR))
    return tool_selections_from_json(stored or [])


def nodes_json(nodes: Sequence[NodeWithScore]) -> list[dict[str, Any]]:
    """Retrieved nodes with scores; `doc_to_json` because `NodeWithScore.from_dict` fails.

    A node's metadata is rendered into the LLM's prompt in its key order ("file_name: ...",
    then "file_path: ..."), which the store does not keep: the order of a node's dicts is
    stored beside it (`order`, only where it is not the sorted one) and put back in replay.
    """
    out = []
    for n in nodes:
        node = doc_to_json(n.node)
        item: dict[str, Any] = {"node": node, "score": n.score}
        keep_key_order(item, "order", node)
        out.append(item)
    return out


def nodes_from_json(items: Sequence[Mapping[str, Any]]) -> list[NodeWithScore]:
    return [NodeWithScore(node=json_to_doc(in_key_order(dict(i["node"]), i.get("order"))),
                          score=i["score"]) for i in items]


def query_text(query: Any) -> str:
    """The query string of a `str` or `QueryBundle`."""
    return query if isinstance(query, str) else str(getattr(query, "query_str", query))


def tool_request(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call's request, without the workflow Context an agent passes to some tools."""
    return {"args": [encodable(a) for a in args if not is_workflow_context(a)],
            "kwargs": {k: encodable(v) for k, v in kwargs.items()
                       if not is_workflow_context(v)}}


#: beside a stored ToolOutput: the key order of its raw_output
RAW_OUTPUT_ORDER = "raw_output_order"


def tool_output_for_storage(output: Any) -> dict[str, Any]:
    """A ToolOutput as stored: the object (raw_output only if storable), its exception, and
    the key order of a dict or list it returned (`raw_output_order`, where not sorted).

    A custom `BaseTool.__call__` may return something else; that is stored as it is.
    """
    from agentreplay_core._recorded_errors import error_to_record

    if not isinstance(output, ToolOutput):
        return {"output": encodable(output), "exception": None}
    raw = output.raw_output
    safe = output.model_copy(update={"raw_output": encodable(raw),
                                     "raw_input": encodable(output.raw_input)})
    exception = getattr(output, "exception", None)
    stored = {"output": safe,
              "exception": error_to_record(exception) if exception is not None else None}
    keep_key_order(stored, RAW_OUTPUT_ORDER, raw)  # a program may print it (the store sorts)
    return stored


def tool_output_from_storage(stored: Mapping[str, Any]) -> ToolOutput:
    from agentreplay_core._recorded_errors import error_from_record

    output: ToolOutput = stored["output"]
    if isinstance(output, ToolOutput) and type(output.raw_output) in (dict, list):
        output.raw_output = in_key_order(output.raw_output, stored.get(RAW_OUTPUT_ORDER))
    exception = stored.get("exception")
    if exception is not None and isinstance(output, ToolOutput):
        rebuilt = error_from_record(exception)
        if isinstance(rebuilt, Exception):  # so `.exception` is an exception, as recorded
            output._exception = rebuilt
    return output
