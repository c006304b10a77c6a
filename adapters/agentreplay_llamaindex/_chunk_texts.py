"""Streamed chunks stored without the text they repeat.

A LlamaIndex stream yields, with each chunk, the whole message so far: chunk n's text is
chunk n-1's text plus its delta. Stored as they came, a stream of n chunks held its text n/2
times over (a 6 KB answer streamed in 1,258 chunks stored 4.2 MB). A chunk whose text block
(or completion text) continues the previous chunk's is stored with only what it adds
(`"continued": suffix` in place of `"text"`); replay rebuilds each text from the chunks before
it. A text that does not continue the previous one (a provider that sends deltas only, a
block that changed) is stored whole, as are blocks that are not text.

Secrets: the recorder redacts what it stores, and a secret cut into what several chunks add
would never be seen whole by it. So the texts are redacted first (`redacted`: the recorder's
rules on each chunk's whole text) and compacted after: what a chunk adds is cut from the
redacted texts, and a chunk whose redacted text does not continue the previous one (a secret
completed: its placeholder replaced the part streamed before) is stored whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: in a stored chunk's text block (or completion response): the text added to the previous
#: chunk's text at the same place, which the chunk's text is
CONTINUED = "continued"

Texts = list[str | None]


def texts_of(stored: Any) -> Texts:
    """The texts of a stored response, whole: a chat message's by block (None for a block that
    is not text), a completion's as one; none for a response stored as an object."""
    if not isinstance(stored, dict):
        return []
    if stored.get("type") == "completion":
        text = stored.get("text")
        return [text if isinstance(text, str) else None]
    message = stored.get("message") if stored.get("type") == "chat" else None
    blocks = message.get("blocks") if isinstance(message, dict) else None
    if not isinstance(blocks, list):
        return []
    return [block["text"] if isinstance(block, dict) and isinstance(block.get("text"), str)
            else None for block in blocks]


Place = tuple[str | int, ...]


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


def redacted_stream(chunks: list[dict[str, Any]],
                    redact_pieces: Callable[[list[str]], list[str]]) -> list[dict[str, Any]]:
    """A stream's stored (compacted) chunks with a secret the chunks make together redacted.

    A secret the model streams is cut into what several chunks add, where no redaction of a
    single stored string sees it; and a chunk's whole text holds the first part of a secret
    that ends in a later chunk, too short to be recognised there. So the pieces of each text
    (a chunk's whole text, then what each chunk after it adds) and the chunks' deltas are
    redacted as the texts they make: the parts of a secret are taken out of every chunk, its
    placeholder put in the chunk where it ends. A changed chunk loses its `raw` payload too:
    the provider's chunk holds the same piece.
    """
    texts: list[list[tuple[int, Place]]] = []
    open_texts: dict[int, list[tuple[int, Place]]] = {}
    deltas: list[tuple[int, Place]] = []
    for number, chunk in enumerate(chunks):
        response = chunk.get("response")
        for at, place, whole in _text_places(response):
            going = open_texts.get(at)
            if whole or going is None or going[-1][0] != number - 1:
                going = open_texts[at] = []
                texts.append(going)
            going.append((number, ("response", *place)))
        if isinstance(response, dict) and isinstance(response.get("delta"), str):
            deltas.append((number, ("response", "delta")))
    edits: dict[int, list[tuple[Place, str]]] = {}
    for members in [*texts, deltas]:
        pieces = [_at(chunks[number], place) for number, place in members]
        for (number, place), before, after in zip(members, pieces, redact_pieces(pieces),
                                                  strict=True):
            if after != before:
                edits.setdefault(number, []).append((place, after))
    if not edits:
        return chunks
    out = list(chunks)
    for number, changes in edits.items():
        changed: Any = chunks[number]
        for place, new in changes:
            changed = _replaced(changed, place, new)
        out[number] = {**changed, "response": {**changed["response"], "raw": None}}
    return out


def _added(text: str | None, previous: Texts, at: int) -> str | None:
    """What `text` adds to the previous chunk's text at `at`, if it continues it."""
    before = previous[at] if at < len(previous) else None
    if text is None or not before or not text.startswith(before):
        return None
    return text[len(before):]


def compacted(stored: Any, previous: Texts) -> Any:
    """`stored` (one chunk's response, whole) as stored after a chunk whose texts were
    `previous`: a text that continues one of them holds only what it adds."""
    if not previous or not isinstance(stored, dict):
        return stored
    if stored.get("type") == "completion":
        added = _added(stored.get("text"), previous, 0)
        if added is None:
            return stored
        kept = {k: v for k, v in stored.items() if k != "text"}
        kept[CONTINUED] = added
        return kept
    now = texts_of(stored)
    if not any(_added(text, previous, i) is not None for i, text in enumerate(now)):
        return stored
    blocks = []
    for i, block in enumerate(stored["message"]["blocks"]):
        added = _added(now[i], previous, i)
        blocks.append(block if added is None else {"block_type": "text", CONTINUED: added})
    return {**stored, "message": {**stored["message"], "blocks": blocks}}


def expanded(stored: Any, previous: Texts) -> Any:
    """The chunk's response whole again, given the texts of the chunk before it (a chunk
    stored whole, as by recordings made before compaction, comes back as it is)."""
    if not isinstance(stored, dict):
        return stored
    if stored.get("type") == "completion":
        if CONTINUED not in stored:
            return stored
        whole = {k: v for k, v in stored.items() if k != CONTINUED}
        whole["text"] = _before(previous, 0) + stored[CONTINUED]
        return whole
    message = stored.get("message") if stored.get("type") == "chat" else None
    blocks = message.get("blocks") if isinstance(message, dict) else None
    if not isinstance(blocks, list) or not any(
            isinstance(b, dict) and CONTINUED in b for b in blocks):
        return stored
    assert isinstance(message, dict)
    whole_blocks = [{"block_type": "text", "text": _before(previous, i) + b[CONTINUED]}
                    if isinstance(b, dict) and CONTINUED in b else b
                    for i, b in enumerate(blocks)]
    return {**stored, "message": {**message, "blocks": whole_blocks}}


def _before(previous: Texts, at: int) -> str:
    before = previous[at] if at < len(previous) else None
    if before is None:  # a damaged recording: the chunk continues nothing known
        raise ValueError(f"a stored stream chunk continues text block {at} of the chunk "
                         "before it, which has none")
    return before
