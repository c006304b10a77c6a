"""Streamed chunks stored without the text they repeat.

A LlamaIndex stream yields, with each chunk, the whole message so far: chunk n's text is
chunk n-1's text plus its delta. Stored as they came, a stream of n chunks held its text n/2
times over (a 6 KB answer streamed in 1,258 chunks stored 4.2 MB). A chunk whose text block
(or completion text) continues the previous chunk's is stored with only what it adds
(`"continued": suffix` in place of `"text"`); replay rebuilds each text from the chunks before
it. A text that does not continue the previous one (a provider that sends deltas only, a
block that changed) is stored whole, as are blocks that are not text.

Secrets: a secret cut into what several chunks add is never seen whole by the recorder's
redaction of each stored string; the compacted chunks are redacted as a stream when the
stream ends (`_stream_secrets`).
"""

from __future__ import annotations

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


def text_places(response: Any) -> list[tuple[int, tuple[str | int, ...], bool]]:
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
    return [(position, ("message", "blocks", position, key), key == "text")
            for position, block in enumerate(blocks) if isinstance(block, dict)
            for key in ("text", CONTINUED) if isinstance(block.get(key), str)]


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
