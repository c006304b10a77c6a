"""Secrets a model streams, which arrive in pieces no redaction of a single chunk can see.

A streamed answer is stored chunk by chunk, each chunk with the text it adds. A secret the
model says (a key it read in a tool result) is cut across several chunks, and the recorder,
which redacts each stored string, finds it in none of them: it would be stored in clear, a
piece per chunk. So before a streamed call is recorded, its chunks' texts are redacted as the
text they make (`Redactor.redact_pieces`): the parts of a secret are taken out of the chunks,
and its placeholder is put in the chunk where it ends. Joined, the chunks give the redacted
answer, as the call's whole message does.

The text a chunk adds is its message's string content, the text of its one text block, or a
text LLM's token; other content (several text blocks in one chunk, tool call arguments) is
kept as it came.
"""

from __future__ import annotations

from typing import Any

from agentreplay_core._redact import Redactor

Place = tuple[Any, ...]


def _text_place(chunk: Any) -> Place | None:
    """Where the text a stored chunk adds is, as keys from the chunk down."""
    if not isinstance(chunk, dict):
        return None
    if isinstance(chunk.get("token"), str) and len(chunk) == 1:
        return ("token",)
    if chunk.get("class") == "GenerationChunk" and isinstance(chunk.get("text"), str):
        return ("text",)
    message = chunk.get("message")
    fields = message.get("fields") if isinstance(message, dict) else None
    content = fields.get("content") if isinstance(fields, dict) else None
    if isinstance(content, str):
        return ("message", "fields", "content")
    if isinstance(content, list):
        texts = [i for i, block in enumerate(content) if isinstance(block, dict)
                 and block.get("type") == "text" and isinstance(block.get("text"), str)]
        if len(texts) == 1:
            return ("message", "fields", "content", texts[0], "text")
    return None


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


def redacted_chunks(chunks: list[Any], redactor: Redactor) -> list[Any]:
    """`chunks` (stored chunks, in order) with a secret their texts make together redacted."""
    places = [_text_place(chunk) for chunk in chunks]
    pieces = [_at(chunk, place) if place is not None else ""
              for chunk, place in zip(chunks, places, strict=True)]
    redacted = redactor.redact_pieces(pieces)
    if redacted == pieces:
        return chunks
    return [chunk if place is None or after == before else _replaced(chunk, place, after)
            for chunk, place, before, after in zip(chunks, places, pieces, redacted,
                                                   strict=True)]
