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

A text that grows from chunk to chunk is found by where it is (`_chunk_places`); one that does
not grow (an id, a name) is left to the recorder's redaction of each string. A tool call's
arguments so far are JSON text, redacted as the arguments they parse to will be (a
`password` argument's value whole): the agent runs the tool with them, and in replay they must
match the tool's recorded step.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import accumulate, pairwise
from typing import Any, Protocol

from agentreplay_llamaindex._chunk_places import (
    Member,
    Place,
    at,
    growing_texts,
    holds_json,
    with_edits,
)
from agentreplay_llamaindex._chunk_texts import text_places


class RedactPieces(Protocol):
    """`Redactor.redact_pieces`."""

    def __call__(self, pieces: Sequence[str], *, json_text: bool = False) -> list[str]: ...


#: pieces a chunk adds, each a text with the same pieces of the other chunks
_DELTAS: tuple[Place, ...] = (("response", "delta"),
                              ("response", "additional_kwargs", "thinking_delta"))


def _compacted_texts(chunks: list[dict[str, Any]]) -> list[list[Member]]:
    """The pieces of each compacted text: a chunk's whole text, then what each chunk after
    it adds."""
    texts: list[list[Member]] = []
    going: dict[int, list[Member]] = {}
    for number, chunk in enumerate(chunks):
        for position, place, whole in text_places(chunk.get("response")):
            members = going.get(position)
            if whole or members is None or members[-1][0] != number - 1:
                members = going[position] = []
                texts.append(members)
            members.append((number, ("response", *place)))
    return texts


def _redact_growing(chunks: list[dict[str, Any]], members: list[Member],
                    redact_pieces: RedactPieces) -> Iterator[tuple[Member, str]]:
    """The members of a growing text whose text changes: the redacted text so far."""
    texts = [at(chunks[number], place) for number, place in members]
    pieces = [texts[0]] + [text[len(before):] for before, text in pairwise(texts)]
    if not any(pieces[1:]):
        return  # the same string in each chunk: the recorder redacts it as it is
    redacted = redact_pieces(pieces, json_text=holds_json(members[0][1]))
    for member, text, new in zip(members, texts, accumulate(redacted), strict=True):
        if new != text:
            yield member, new


def redacted_stream(chunks: list[dict[str, Any]],
                    redact_pieces: RedactPieces) -> list[dict[str, Any]]:
    """A stream's stored (compacted) chunks with a secret the chunks make together redacted."""
    edits: dict[int, list[tuple[Place, str]]] = {}
    deltas = [[(number, place) for number, chunk in enumerate(chunks)
               if isinstance(at(chunk, place), str)] for place in _DELTAS]
    for members in [*_compacted_texts(chunks), *deltas]:
        pieces = [at(chunks[number], place) for number, place in members]
        for (number, place), before, after in zip(members, pieces, redact_pieces(pieces),
                                                  strict=True):
            if after != before:
                edits.setdefault(number, []).append((place, after))
    for members in growing_texts(chunks):
        for (number, place), new in _redact_growing(chunks, members, redact_pieces):
            edits.setdefault(number, []).append((place, new))
    out = with_edits(chunks, edits)
    for number in edits:
        out[number] = {**out[number], "response": {**out[number]["response"], "raw": None}}
    return out
