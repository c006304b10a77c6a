"""Places in a LlamaIndex stream's stored chunks, and the texts that grow from chunk to chunk.

A chunk holds the message so far, some of it as objects (blocks, a provider's tool calls) and
some as JSON; a place is the keys and positions (and field names, in an object) from the
chunk down to a string. A text that grows is found by where it is: the same place in
consecutive chunks, the later string starting with the earlier.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from agentreplay_core._redact_json_text import JSON_TEXT_KEYS
from agentreplay_llamaindex._chunk_texts import CONTINUED

Place = tuple[str | int, ...]
Member = tuple[int, Place]  # a chunk's number, and where in it a piece of a text is
#: where in a stored chunk texts grow from chunk to chunk (the text blocks, compacted as
#: `"continued"`, apart)
GROWING: tuple[Place, ...] = (("response", "message", "blocks"),
                              ("response", "message", "additional_kwargs"), ("tool_calls",))


def holds_json(place: Place) -> bool:
    """Whether the string at `place` is JSON text (a tool call's arguments), redacted and
    handed back as JSON (`JSON_TEXT_KEYS`)."""
    return bool(place) and place[-1] in JSON_TEXT_KEYS


def at(value: Any, place: Place) -> Any:
    for key in place:
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and isinstance(key, int) and key < len(value):
            value = value[key]
        elif isinstance(value, BaseModel) and isinstance(key, str):
            value = getattr(value, key, None)
        else:
            return None
    return value


def replaced(value: Any, place: Place, new: str) -> Any:
    """A copy of `value` with `new` at `place` (only the containers on the way are copied)."""
    if not place:
        return new
    key, rest = place[0], place[1:]
    if isinstance(value, BaseModel):  # a block or a provider's tool call, kept as an object
        assert isinstance(key, str)
        return value.model_copy(update={key: replaced(getattr(value, key), rest, new)})
    copy: Any = list(value) if isinstance(value, list) else dict(value)
    copy[key] = replaced(value[key], rest, new)
    return copy


def with_edits(chunks: list[dict[str, Any]], edits: dict[int, list[tuple[Place, str]]]
               ) -> list[dict[str, Any]]:
    """`chunks` with, in chunk n, each string of `edits[n]` at its place (`chunks` itself when
    there are none; an edited chunk is a copy)."""
    if not edits:
        return chunks
    out = list(chunks)
    for number, changes in edits.items():
        for place, new in changes:
            out[number] = replaced(out[number], place, new)
    return out


def strings(value: Any, place: Place) -> Iterator[tuple[Place, str]]:
    if isinstance(value, str):
        yield place, value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from strings(inner, (*place, key))
    elif isinstance(value, list):
        for position, inner in enumerate(value):
            yield from strings(inner, (*place, position))
    elif isinstance(value, BaseModel):
        for key in type(value).model_fields:
            yield from strings(getattr(value, key, None), (*place, key))


def growing_texts(chunks: list[dict[str, Any]]) -> list[list[Member]]:
    """Texts held whole so far by each chunk, that grow from one chunk to the next."""
    texts: list[list[Member]] = []
    before: dict[Place, tuple[str, list[Member]]] = {}
    for number, chunk in enumerate(chunks):
        now: dict[Place, tuple[str, list[Member]]] = {}
        for root in GROWING:
            for place, text in strings(at(chunk, root), root):
                if len(place) == 5 and place[-1] in ("text", CONTINUED) \
                        and place[:3] == GROWING[0]:
                    continue  # a text block: compacted, see `_compacted_texts`
                previous = before.get(place)
                if previous is not None and text.startswith(previous[0]):
                    members = previous[1]
                else:
                    members = []
                    texts.append(members)
                members.append((number, place))
                now[place] = (text, members)
        before = now
    return texts
