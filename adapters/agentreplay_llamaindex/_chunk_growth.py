"""Streamed chunks stored without the reasoning and tool-call arguments they repeat.

Besides its text (`_chunk_texts`), a LlamaIndex chunk holds its reasoning so far
(`ThinkingBlock`) and each tool call's arguments so far (`ToolCallBlock`, the provider's
calls in `additional_kwargs`, the tool calls read from the chunk); stored as they came, a
reasoning of n chunks was stored n/2 times over, and kept whole in every chunk after it. A
string that continues the previous chunk's string at the same place (`_chunk_places`) is
stored empty, with what it adds under `"grown"` (its place, and the suffix); replay rebuilds
it from the chunk before. Short strings (an id, a name) are kept as they are: their place
would take as much room as they do. What a tool call's arguments add is stored under the
arguments' own key (`[place, {"arguments": suffix}]`): redaction and `secrets=` then treat it
as the JSON text it is part of (`holds_json`), a secret going back JSON-escaped.
"""

from __future__ import annotations

from typing import Any

from agentreplay_llamaindex._chunk_places import (
    Place,
    at,
    growing_texts,
    holds_json,
    replaced,
    with_edits,
)

#: in a stored chunk: [place, suffix] of each string stored empty, which is the string at the
#: same place in the chunk before with the suffix added
GROWN = "grown"
#: a string is stored as what it adds only when the string it continues is this long (its
#: place, stored instead, takes about 50 bytes)
_WORTH = 64


def compacted_growth(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`chunks` (stored, in order) with each long string that continues the one at its place
    in the chunk before stored as what it adds."""
    grown: dict[int, list[tuple[Place, str]]] = {}
    for members in growing_texts(chunks):
        texts = [at(chunks[number], place) for number, place in members]
        for (number, place), before, text in zip(members[1:], texts, texts[1:], strict=False):
            if len(before) >= _WORTH:
                grown.setdefault(number, []).append((place, text[len(before):]))
    out = with_edits(chunks, {number: [(place, "") for place, _ in suffixes]
                              for number, suffixes in grown.items()})
    for number, suffixes in grown.items():
        out[number] = {**out[number],
                       GROWN: [[list(place), _stored(place, suffix)] for place, suffix in suffixes]}
    return out


def _stored(place: Place, suffix: str) -> str | dict[str, str]:
    return {str(place[-1]): suffix} if holds_json(place) else suffix


def expanded_growth(chunk: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    """The chunk's strings whole again, given the chunk before it, whole (a chunk stored whole,
    as by recordings made before this compaction, comes back as it is)."""
    suffixes = chunk.get(GROWN)
    if not suffixes:
        return chunk
    if before is None:
        raise ValueError("a stored stream chunk continues strings of the chunk before it, "
                         "which is missing")
    whole = {k: v for k, v in chunk.items() if k != GROWN}
    for place, stored in suffixes:
        suffix = stored if isinstance(stored, str) else next(iter(stored.values()), None)
        previous = at(before, tuple(place))
        if not isinstance(previous, str) or not isinstance(suffix, str):  # a damaged recording
            raise ValueError(f"a stored stream chunk continues the string at {place} of the "
                             "chunk before it, which has none")
        whole = replaced(whole, tuple(place), previous + suffix)
    return whole
