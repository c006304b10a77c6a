"""Secrets a model streams, which arrive in pieces no redaction of a single chunk can see.

A streamed answer is stored chunk by chunk, each chunk with the text it adds. A secret the
model says (a key it read in a tool result, or passes to a tool in a call's arguments) is cut
across several chunks, and the recorder, which redacts each stored string, finds it in none
of them: it would be stored in clear, a piece per chunk. So before a streamed call is
recorded, the pieces of each text its chunks stream are redacted as the text they make
(`Redactor.redact_pieces`): the parts of a secret are taken out of the chunks, and its
placeholder is put in the chunk where it ends. Joined, the chunks give the redacted answer, as
the call's whole message does.

A chunk may add to several texts at once, each told apart as LangChain merges chunks (by the
`index` of a block or tool call): its answer text (string content, text blocks, a text LLM's
token), reasoning blocks, each tool call's arguments (`tool_call_chunks`, OpenAI-style
`additional_kwargs`, Anthropic-style `input_json_delta` blocks, v1 `tool_call_chunk` blocks),
and the deltas of langchain-core 1.8's protocol events. A chunk whose tool-call pieces changed
gets its parsed `tool_calls` / `invalid_tool_calls` made again from them, as LangChain makes
them, so that these hold no piece of the secret either. A secret that JSON escapes (a PEM key)
gets, in the arguments' text, the placeholder of the secret itself: a replay that merges the
chunks then calls the tool as the recorded call did.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from langchain_core.messages import AIMessageChunk

from agentreplay_core._redact import Redactor
from agentreplay_langchain._convert import dump, revive

Place = tuple[Any, ...]
FIELDS: Place = ("message", "fields")
TOOL_CALL_CHUNKS: Place = (*FIELDS, "tool_call_chunks")
#: a content block's type, and its field that streams text
_BLOCK_TEXTS = {"text": "text", "thinking": "thinking", "reasoning": "reasoning",
                "tool_call_chunk": "args", "input_json_delta": "partial_json"}
#: texts that join across blocks of these types (both stream a tool call's JSON arguments)
_BLOCK_STREAM = {"input_json_delta": "tool_call_chunk"}
#: the fields of a protocol event's block or delta that stream text
_EVENT_TEXTS = ("text", "reasoning", "args")
#: the texts that are JSON: tool calls' arguments (see `Redactor.redact_pieces(json_text=)`)
_JSON_TEXTS = frozenset({"tool_call_chunks", "kwargs_tool_calls", "function_call",
                         "tool_call_chunk"})


def _index(item: dict[str, Any], position: Any) -> Any:
    """Which of its kind a block or tool call is, as LangChain merges chunks: its `index`."""
    index = item.get("index")
    return index if isinstance(index, (int, str)) else position


def _block_places(content: list[Any]) -> Iterator[tuple[Hashable, Place]]:
    for position, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if not isinstance(kind, str):
            continue
        field = _BLOCK_TEXTS.get(kind)
        if field is None or not isinstance(block.get(field), str):
            continue
        if kind == "text" and "index" not in block:
            key: Hashable = ("text", None)  # joins the string content's text
        else:
            key = (_BLOCK_STREAM.get(kind, kind), _index(block, position))
        yield key, (*FIELDS, "content", position, field)


def _tool_call_places(fields: dict[str, Any], chunk_no: int) -> Iterator[tuple[Hashable, Place]]:
    for position, call in enumerate(fields.get("tool_call_chunks") or ()):
        if isinstance(call, dict) and isinstance(call.get("args"), str):
            # a call with no index is not merged with another chunk's: a text of its own
            yield (("tool_call_chunks", _index(call, (chunk_no, position))),
                   (*TOOL_CALL_CHUNKS, position, "args"))
    kwargs = fields.get("additional_kwargs")
    if not isinstance(kwargs, dict):
        return
    for position, call in enumerate(kwargs.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            yield (("kwargs_tool_calls", _index(call, position)),
                   (*FIELDS, "additional_kwargs", "tool_calls", position, "function",
                    "arguments"))
    function = kwargs.get("function_call")
    if isinstance(function, dict) and isinstance(function.get("arguments"), str):
        yield "function_call", (*FIELDS, "additional_kwargs", "function_call", "arguments")


def _places(item: Any, number: int) -> Iterator[tuple[Hashable, Place]]:
    """Where a stored chunk (or protocol event) adds to a streamed text, each place with the
    text's key: the same key in several chunks is one text."""
    if not isinstance(item, dict):
        return
    if item.get("event") in ("content-block-start", "content-block-delta"):
        part = "content" if item["event"] == "content-block-start" else "delta"
        body = item.get(part)
        if isinstance(body, dict):
            for field in _EVENT_TEXTS:
                if isinstance(body.get(field), str):
                    yield ("event", _index(item, None), field), (part, field)
        return
    if isinstance(item.get("token"), str) and len(item) == 1:
        yield ("text", None), ("token",)
        return
    if item.get("class") == "GenerationChunk" and isinstance(item.get("text"), str):
        yield ("text", None), ("text",)
        return
    message = item.get("message")
    fields = message.get("fields") if isinstance(message, dict) else None
    if not isinstance(fields, dict):
        return
    content = fields.get("content")
    if isinstance(content, str):
        yield ("text", None), (*FIELDS, "content")
    elif isinstance(content, list):
        yield from _block_places(content)
    yield from _tool_call_places(fields, number)


def _is_json(key: Hashable) -> bool:
    """Whether the text of `key` is JSON: a tool call's arguments."""
    kind = key[0] if isinstance(key, tuple) else key
    return kind in _JSON_TEXTS or (kind == "event" and isinstance(key, tuple) and key[-1] == "args")


def _at(value: Any, place: Place) -> Any:
    for key in place:
        value = value[key]
    return value


def _replaced(value: Any, place: Place, new: str) -> Any:
    """A copy of `value` with `new` at `place` (only the containers on the way are copied)."""
    if not place:
        return new
    key, rest = place[0], place[1:]
    copy: Any = list(value) if isinstance(value, list) else dict(value)
    copy[key] = _replaced(value[key], rest, new)
    return copy


def _tool_calls_parsed_again(chunk: dict[str, Any]) -> dict[str, Any]:
    """`chunk` with its `tool_calls` and `invalid_tool_calls` made anew from its (redacted)
    `tool_call_chunks`: LangChain parses each chunk's argument pieces into them."""
    generation = revive(chunk)
    message = getattr(generation, "message", None)
    if not isinstance(message, AIMessageChunk):
        return chunk
    parsed = AIMessageChunk(content="", tool_call_chunks=message.tool_call_chunks)
    message = message.model_copy(update={"tool_calls": parsed.tool_calls,
                                         "invalid_tool_calls": parsed.invalid_tool_calls})
    stored = dump(generation.model_copy(update={"message": message}))
    return stored if isinstance(stored, dict) else chunk


def redacted_chunks(chunks: list[Any], redactor: Redactor) -> list[Any]:
    """`chunks` (stored chunks or protocol events, in order) with a secret the pieces of one
    of their texts make together redacted."""
    texts: dict[Hashable, list[tuple[int, Place]]] = {}
    for number, chunk in enumerate(chunks):
        for key, place in _places(chunk, number):
            texts.setdefault(key, []).append((number, place))
    edits: dict[int, list[tuple[Place, str]]] = {}
    for key, members in texts.items():
        pieces = [_at(chunks[number], place) for number, place in members]
        redacted = redactor.redact_pieces(pieces, json_text=_is_json(key))
        for (number, place), before, after in zip(members, pieces, redacted, strict=True):
            if after != before:
                edits.setdefault(number, []).append((place, after))
    if not edits:
        return chunks
    out = list(chunks)
    for number, changes in edits.items():
        chunk = chunks[number]
        for place, new in changes:
            chunk = _replaced(chunk, place, new)
        if any(place[:len(TOOL_CALL_CHUNKS)] == TOOL_CALL_CHUNKS for place, _ in changes):
            chunk = _tool_calls_parsed_again(chunk)
        out[number] = chunk
    return out
