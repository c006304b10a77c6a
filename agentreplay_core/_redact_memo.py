"""What a `Redactor` remembers between steps, in bounded memory: agents resend their whole
history with every model call, so most texts (and keys, and secrets) were seen a call earlier.
"""

from __future__ import annotations

from typing import TypeVar

#: texts remembered as scanned (by content) before the memo is emptied
MEMO_CHARS = 16_000_000
#: a text (or a step's texts together) longer than this is not remembered
MEMO_LONGEST = 2_000_000
#: entries of each small memo (field names, keys, digests) before it is emptied
SMALL_MEMO = 20_000

K = TypeVar("K")
V = TypeVar("V")


def remembered(memo: dict[K, V], key: K, value: V) -> V:
    """`memo[key] = value`, emptying the memo first when it is full; returns `value`."""
    if len(memo) > SMALL_MEMO:
        memo.clear()
    memo[key] = value
    return value


class TextMemo:
    """Texts scanned already: `clean` ones, and the redacted form of `dirty` ones."""

    __slots__ = ("_chars", "clean", "dirty")

    def __init__(self) -> None:
        self.clean: set[str] = set()
        self.dirty: dict[str, str] = {}
        self._chars = 0

    def remember(self, texts: list[str], redacted: str | None) -> None:
        """Remember texts as clean (`redacted` None) or one text's redacted form."""
        size = sum(len(t) for t in texts)
        if size > MEMO_LONGEST:
            return
        self._chars += size
        if self._chars > MEMO_CHARS:  # bounded memory: start over
            self.clean = set()
            self.dirty = {}
            self._chars = size
        if redacted is None:
            self.clean.update(texts)
        else:
            self.dirty[texts[0]] = redacted
