"""Secrets a model streams, which arrive in pieces no redaction of one stored string can see.

A LlamaIndex stream's chunks each hold the message so far: its text (stored compacted, as
what each chunk adds: `_chunk_texts`), its reasoning (`ThinkingBlock`), each tool call's
arguments so far (`ToolCallBlock`, OpenAI-style `additional_kwargs`, and the tool calls the
adapter reads from the chunk), and the piece the chunk adds (`delta`, `thinking_delta`). A
secret the model says, or passes to a tool, is cut into what several chunks add: no stored
delta holds it whole, and a chunk's text or arguments so far hold its first part, too short
to be recognised there. So when the stream ends the chunks are redacted as the texts they
make (`Redactor.redact_pieces`): the parts of a secret are taken out of every chunk and its
placeholder put in the chunk where it ends. A changed chunk loses its `raw` payload: the
provider's chunk holds the same piece.

A text that grows from chunk to chunk is found by where it is (the same keys and positions in
consecutive chunks, the later string starting with the earlier); one that does not grow
(an id, a name) is left to the recorder's redaction of each string.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import accumulate, pairwise
from typing import Any

from pydantic import BaseModel

from agentreplay_llamaindex._chunk_texts import CONTINUED

Place = tuple[str | int, ...]
Member = tuple[int, Place]  # a chunk's number, and where in it a piece of a text is
#: where in a stored chunk texts grow from chunk to chunk (the text blocks, compacted, apart)
_GROWING: tuple[Place, ...] = (("response", "message", "blocks"),
                               ("response", "message", "additional_kwargs"), ("tool_calls",))
#: pieces a chunk adds, each a text with the same pieces of the other chunks
_DELTAS: tuple[Place, ...] = (("response", "delta"),
                              ("response", "additional_kwargs", "thinking_delta"))


def _text_places(response: Any) -> list[tuple[int, Place, bool]]:
    """Where a stored chunk's response holds text: (its position, keys from the response
    down, whether it is whole: else it continues the previous chunk's text there)."""
    if not isinstance(response, dict):
        return []
    if response.get("type") == "completion":
        for key in ("text", CONTINUED):
            if isinstance(response.get(key), str):
                return [(0, (key,), key == "text")]
        return []
    message = response.get("message") if response.get("type") == "chat" else None
    blocks = message.get("blocks") if isinstance(message, dict) else None
    if not isinstance(blocks, list):
        return []
    return [(at, ("message", "blocks", at, key), key == "text")
            for at, block in enumerate(blocks) if isinstance(block, dict)
            for key in ("text", CONTINUED) if isinstance(block.get(key), str)]


def _at(value: Any, place: Place) -> Any:
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


def _replaced(value: Any, place: Place, new: str) -> Any:
    """A copy of `value` with `new` at `place` (only the containers on the way are copied)."""
    if not place:
        return new
    key, rest = place[0], place[1:]
    if isinstance(value, BaseModel):  # a block or a provider's tool call, kept as an object
        assert isinstance(key, str)
        return value.model_copy(update={key: _replaced(getattr(value, key), rest, new)})
    copy: Any = list(value) if isinstance(value, list) else dict(value)
    copy[key] = _replaced(value[key], rest, new)
    return copy


def _strings(value: Any, place: Place) -> Iterator[tuple[Place, str]]:
    if isinstance(value, str):
        yield place, value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from _strings(inner, (*place, key))
    elif isinstance(value, list):
        for position, inner in enumerate(value):
            yield from _strings(inner, (*place, position))
    elif isinstance(value, BaseModel):
        for key in type(value).model_fields:
            yield from _strings(getattr(value, key, None), (*place, key))


def _compacted_texts(chunks: list[dict[str, Any]]) -> list[list[Member]]:
    """The pieces of each compacted text: a chunk's whole text, then what each chunk after
    it adds."""
    texts: list[list[Member]] = []
    going: dict[int, list[Member]] = {}
    for number, chunk in enumerate(chunks):
        for at, place, whole in _text_places(chunk.get("response")):
            members = going.get(at)
            if whole or members is None or members[-1][0] != number - 1:
                members = going[at] = []
                texts.append(members)
            members.append((number, ("response", *place)))
    return texts


def _growing_texts(chunks: list[dict[str, Any]]) -> list[list[Member]]:
    """Texts held whole so far by each chunk, that grow from one chunk to the next."""
    texts: list[list[Member]] = []
    before: dict[Place, tuple[str, list[Member]]] = {}
    for number, chunk in enumerate(chunks):
        now: dict[Place, tuple[str, list[Member]]] = {}
        for root in _GROWING:
            for place, text in _strings(_at(chunk, root), root):
                if len(place) == 5 and place[-1] in ("text", CONTINUED) \
                        and place[:3] == _GROWING[0]:
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


def _redact_growing(chunks: list[dict[str, Any]], members: list[Member],
                    redact_pieces: Callable[[list[str]], list[str]]) -> Iterator[tuple[Member,
                                                                                        str]]:
    """The members of a growing text whose text changes: the redacted text so far."""
    texts = [_at(chunks[number], place) for number, place in members]
    pieces = [texts[0]] + [text[len(before):] for before, text in pairwise(texts)]
    if not any(pieces[1:]):
        return  # the same string in each chunk: the recorder redacts it as it is
    for member, text, new in zip(members, texts, accumulate(redact_pieces(pieces)),
                                 strict=True):
        if new != text:
            yield member, new


def redacted_stream(chunks: list[dict[str, Any]],
                    redact_pieces: Callable[[list[str]], list[str]]) -> list[dict[str, Any]]:
    """A stream's stored (compacted) chunks with a secret the chunks make together redacted."""
    edits: dict[int, list[tuple[Place, str]]] = {}
    deltas = [[(number, place) for number, chunk in enumerate(chunks)
               if isinstance(_at(chunk, place), str)] for place in _DELTAS]
    for members in [*_compacted_texts(chunks), *deltas]:
        pieces = [_at(chunks[number], place) for number, place in members]
        for (number, place), before, after in zip(members, pieces, redact_pieces(pieces),
                                                  strict=True):
            if after != before:
                edits.setdefault(number, []).append((place, after))
    for members in _growing_texts(chunks):
        for (number, place), new in _redact_growing(chunks, members, redact_pieces):
            edits.setdefault(number, []).append((place, new))
    if not edits:
        return chunks
    out = list(chunks)
    for number, changes in edits.items():
        changed: Any = chunks[number]
        for place, new in changes:
            changed = _replaced(changed, place, new)
        out[number] = {**changed, "response": {**changed["response"], "raw": None}}
    return out
