"""Strings in diffs: similarity of two texts and a compact wdiff-style inline diff.

Texts are compared word by word (``\\w+``, whitespace runs and single punctuation marks are the
tokens), after stripping the common prefix and suffix, so a one-word change in a long prompt
costs little and reads as ``…weather in [-Paris-]{+Lyon+} tomorrow…``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import TypeVar

_T = TypeVar("_T")

_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
_WORD = re.compile(r"\w+|[^\w\s]")
# Beyond this many differing tokens per side, aligning costs more than it tells us.
_ALIGN_LIMIT = 4000
# Short strings (typically names and single words) compare character by character.
_CHAR_LIMIT = 200
# Changed stretches longer than this are narrowed to the changed characters.
_LONG_WORD = 40
_ELLIPSIS = "…"
_ESCAPES = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def tokens(text: str) -> list[str]:
    """Split `text` into words, whitespace runs and punctuation marks (lossless)."""
    return _TOKEN.findall(text)


def common_affixes(a: Sequence[_T], b: Sequence[_T]) -> tuple[int, int]:
    """Return the lengths of the common prefix and the (non-overlapping) common suffix."""
    limit = min(len(a), len(b))
    prefix = 0
    while prefix < limit and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    return prefix, suffix


def text_similarity(a: str, b: str) -> float:
    """Return how alike two strings are, from 0.0 (nothing shared) to 1.0 (equal)."""
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    if len(a) + len(b) <= _CHAR_LIMIT:
        return SequenceMatcher(None, a, b).ratio()
    # Whitespace is left out: shared spaces would make any two texts look half alike.
    ta, tb = _WORD.findall(a), _WORD.findall(b)
    if not ta or not tb:
        return SequenceMatcher(None, a, b).ratio() if ta == tb else 0.0
    prefix, suffix = common_affixes(ta, tb)
    ma, mb = ta[prefix : len(ta) - suffix], tb[prefix : len(tb) - suffix]
    if len(ma) <= _ALIGN_LIMIT and len(mb) <= _ALIGN_LIMIT:
        blocks = SequenceMatcher(None, ma, mb).get_matching_blocks()
        matched = sum(block.size for block in blocks)
    else:  # an upper bound, but order-insensitive overlap is enough to rank candidates
        matched = sum((Counter(ma) & Counter(mb)).values())
    # Texts differing only in spacing share every word; they are still not equal.
    return min(0.999, 2.0 * (prefix + suffix + matched) / (len(ta) + len(tb)))


def visible(text: str) -> str:
    """Show line breaks and tabs as escapes so that a diff stays on its lines."""
    return text.translate(_ESCAPES)


def clip(text: str, limit: int) -> str:
    """Shorten `text` to `limit` characters by replacing its middle with an ellipsis."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return _ELLIPSIS
    head = (limit - 1) // 2
    tail = limit - 1 - head
    return text[:head] + _ELLIPSIS + (text[-tail:] if tail else "")


def first_difference(a: str, b: str) -> str:
    """Describe where two strings start to differ, e.g. ``index 812 (line 4)``."""
    index, _ = common_affixes(a, b)
    where = f"index {index}"
    if "\n" in a or "\n" in b:
        where += f" (line {a.count(chr(10), 0, index) + 1})"
    return where


def inline_diff(a: str, b: str, *, context: int = 30, budget: int = 300) -> str:
    """Return a one-line wdiff-style diff of two texts: ``[-removed-]{+added+}``.

    Unchanged stretches are shortened to `context` characters around each change; after
    roughly `budget` characters the remaining changes are only counted.
    """
    segments = _merge(_segments(a, b))
    changes = sum(1 for op, _, _ in segments if op == "~")
    parts: list[str] = []
    used = shown = 0
    last = len(segments) - 1
    for index, (op, old, new) in enumerate(segments):
        out_of_budget = used >= budget
        if op == "=":
            if index == 0:
                piece = _elide(old, "", _tail(old, context))
            elif index == last or out_of_budget:
                piece = _elide(old, _head(old, context), "")
            else:
                piece = _elide(old, _head(old, context), _tail(old, context))
            parts.append(visible(piece))
            if out_of_budget:
                break
        else:
            if out_of_budget:
                break
            if old:
                parts.append("[-" + visible(clip(old, 80)) + "-]")
            if new:
                parts.append("{+" + visible(clip(new, 80)) + "+}")
            shown += 1
        used = sum(len(part) for part in parts)
    if shown < changes:
        rest = changes - shown
        gap = "" if parts and parts[-1].endswith(" ") else " "
        parts.append(f"{gap}(+{rest} more change{'s' if rest != 1 else ''})")
    return "".join(parts)


def _segments(a: str, b: str) -> list[tuple[str, str, str]]:
    """Split two texts into ("=", same, "") and ("~", old, new) stretches."""
    ta, tb = tokens(a), tokens(b)
    prefix, suffix = common_affixes(ta, tb)
    ma, mb = ta[prefix : len(ta) - suffix], tb[prefix : len(tb) - suffix]
    segments: list[tuple[str, str, str]] = []
    if prefix:
        segments.append(("=", "".join(ta[:prefix]), ""))
    if len(ma) <= _ALIGN_LIMIT and len(mb) <= _ALIGN_LIMIT:
        for tag, i1, i2, j1, j2 in SequenceMatcher(None, ma, mb).get_opcodes():
            old, new = "".join(ma[i1:i2]), "".join(mb[j1:j2])
            if tag == "equal":
                segments.append(("=", old, ""))
            else:
                segments.extend(_refine(old, new))
    elif ma or mb:
        segments.append(("~", "".join(ma), "".join(mb)))
    if suffix:
        segments.append(("=", "".join(ta[len(ta) - suffix :]), ""))
    return segments


def _refine(old: str, new: str) -> list[tuple[str, str, str]]:
    """Narrow a change inside long words (ids, base64, reprs) down to the characters."""
    if len(old) <= _LONG_WORD and len(new) <= _LONG_WORD:
        return [("~", old, new)]
    prefix, suffix = common_affixes(old, new)
    parts = [
        ("=", old[:prefix], ""),
        ("~", old[prefix : len(old) - suffix], new[prefix : len(new) - suffix]),
    ]
    parts.append(("=", old[len(old) - suffix :], ""))
    return [part for part in parts if part[1] or part[2]]


def _merge(segments: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Join neighbours of one kind, and changes separated only by whitespace.

    ``[-Paris today-]{+Lyon tonight+}`` reads better than two changes around a space.
    """
    joined: list[tuple[str, str, str]] = []
    for op, old, new in segments:
        if joined and joined[-1][0] == op:
            _, prev_old, prev_new = joined.pop()
            joined.append((op, prev_old + old, prev_new + new))
        else:
            joined.append((op, old, new))
    merged: list[tuple[str, str, str]] = []
    for index, (op, old, new) in enumerate(joined):
        if op == "=" and not old.strip() and 0 < index < len(joined) - 1:
            _, prev_old, prev_new = merged.pop()  # a change, since neighbours differ in kind
            merged.append(("~", prev_old + old, prev_new + old))
        elif op == "~" and merged and merged[-1][0] == "~":
            _, prev_old, prev_new = merged.pop()
            merged.append(("~", prev_old + old, prev_new + new))
        else:
            merged.append((op, old, new))
    return merged


def _elide(text: str, head: str, tail: str) -> str:
    """`text` if short enough, else its `head` and `tail` around an ellipsis."""
    return text if len(head) + len(tail) + 1 >= len(text) else head + _ELLIPSIS + tail


def _head(text: str, context: int) -> str:
    """The first `context` characters of `text`, ending at a word boundary when one is near."""
    if len(text) <= context:
        return text
    cut = text[:context]
    space = cut.rfind(" ")
    return cut[: space + 1] if space >= context // 2 else cut


def _tail(text: str, context: int) -> str:
    """The last `context` characters of `text`, starting at a word boundary when one is near."""
    if len(text) <= context:
        return text
    cut = text[-context:]
    space = cut.find(" ")
    return cut[space + 1 :] if 0 <= space <= context // 2 else cut
