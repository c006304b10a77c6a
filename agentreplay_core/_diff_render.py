"""Readable text for a list of `DiffEntry` (what a `ReplayDivergence` message shows)."""

from __future__ import annotations

import textwrap
from typing import Any

from agentreplay_core._diff_structure import DiffEntry
from agentreplay_core._diff_text import clip, first_difference, inline_diff
from agentreplay_core._diff_values import safe_repr, summarize, type_name

_INDENT = "    "
# The inline diff of a long value fills about this many lines before changes are only counted.
_INLINE_LINES = 4
# Non-string values that differ are compared through at most this much of their repr.
_REPR_LIMIT = 4000


def render_diff(entries: list[DiffEntry], *, width: int = 100) -> str:
    """Render diff entries as text, one block per entry, lines of about `width` characters.

    ``~ path: old -> new`` for a changed value, ``+ path: value`` for an added one and
    ``- path: value`` for a removed one. Long values are cut with an ellipsis; long strings
    show where they start to differ and a word-level inline diff
    (``…weather in [-Paris-]{+Lyon+} tomorrow…``). When `entries` came from a truncated
    `structural_diff`, a last line says how many differences were left out. Equal values
    (no entries) render as an empty string.
    """
    width = max(width, 40)
    lines: list[str] = []
    for entry in entries:
        lines.extend(_render_entry(entry, width))
    omitted = getattr(entries, "omitted", 0)
    if omitted:
        lines.append(f"... and {omitted} more difference{'s' if omitted != 1 else ''}")
    return "\n".join(lines)


def _render_entry(entry: DiffEntry, width: int) -> list[str]:
    path = clip(entry.path, width // 2)
    if entry.op == "added":
        return [_single("+", path, entry.actual, width)]
    if entry.op == "removed":
        return [_single("-", path, entry.expected, width)]
    if entry.op == "type_changed":
        note = f" ({type_name(entry.expected)} -> {type_name(entry.actual)})"
        line, _ = _change_line(path, entry.expected, entry.actual, width - len(note))
        return [line + note]
    a, b = entry.expected, entry.actual
    line, cut = _change_line(path, a, b, width)
    if not cut:
        return [line]
    if isinstance(a, str) and isinstance(b, str):
        head = f"~ {path}: text differs from {first_difference(a, b)}, {len(a)} -> {len(b)} chars:"
        texts = (a, b)
    else:
        head = line
        texts = (safe_repr(a, _REPR_LIMIT), safe_repr(b, _REPR_LIMIT))
    inner = width - len(_INDENT)
    body = inline_diff(*texts, context=max(10, inner // 4), budget=inner * (_INLINE_LINES - 1))
    wrapped = textwrap.wrap(body, inner, break_on_hyphens=False)
    return [head, *(_INDENT + text for text in wrapped)]


def _single(sign: str, path: str, value: Any, width: int) -> str:
    prefix = f"{sign} {path}: "
    return prefix + summarize(value, max(width - len(prefix), 20))


def _change_line(path: str, a: Any, b: Any, width: int) -> tuple[str, bool]:
    """``~ path: old -> new``, sharing the room between both sides; True if either was cut."""
    prefix = f"~ {path}: "
    room = max(width - len(prefix) - len(" -> "), 24)
    # One character more than the room tells whether a side fits without rendering it all.
    full_a, full_b = summarize(a, room + 1), summarize(b, room + 1)
    if len(full_a) + len(full_b) <= room:
        return f"{prefix}{full_a} -> {full_b}", False
    half = room // 2
    if len(full_a) <= half:
        full_b = summarize(b, room - len(full_a))
    elif len(full_b) <= half:
        full_a = summarize(a, room - len(full_b))
    else:
        full_a, full_b = summarize(a, half), summarize(b, room - half)
    return f"{prefix}{full_a} -> {full_b}", True
