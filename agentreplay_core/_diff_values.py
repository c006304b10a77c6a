"""Value helpers shared by the diff functions: categories, equality, paths, rendering, similarity.

Values are decoded requests: JSON-like trees of dicts, lists, strings, numbers, booleans and
None, possibly holding other Python objects, which are compared with ``==`` and shown with a
truncated ``repr``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from difflib import SequenceMatcher
from typing import Any

from agentreplay_core._diff_text import clip, text_similarity

ROOT = "$"
# Decoded requests are shallow; the guard only stops self-referencing objects.
MAX_DEPTH = 64
_ELLIPSIS = "…"


def category(value: Any) -> str:
    """Return the JSON-ish category of `value`: dict, list, str, bool, number, null or other."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, Mapping):
        return "dict"
    if isinstance(value, (list, tuple)):
        return "list"
    return "other"


def values_equal(a: Any, b: Any) -> bool:
    """``a == b`` that treats NaN as equal to NaN and survives ``==`` raising or misbehaving."""
    if a is b:
        return True
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except Exception:  # e.g. numpy arrays, whose == is elementwise
        return type(a) is type(b) and safe_repr(a) == safe_repr(b)


def safe_repr(value: Any, limit: int = 10_000) -> str:
    """``repr(value)`` on one line, at most about `limit` characters, never raising."""
    try:
        text = repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__} object; repr failed: {type(exc).__name__}>"
    if "\n" in text or "\r" in text:  # e.g. numpy arrays
        text = " ".join(text.split())
    return clip(text, limit)


def fingerprint(value: Any) -> str:
    """Canonical text of `value`, used to align lists: equal text means (almost surely) equal."""
    try:
        return json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # mixed key types, cycles
        return f"{type(value).__name__}:{safe_repr(value)}"


def key_path(parent: str, key: Any) -> str:
    """Path of `key` inside the dict at `parent`: ``messages``, ``params["weird key"]``."""
    if isinstance(key, str) and key.isidentifier():
        return key if parent == ROOT else f"{parent}.{key}"
    if isinstance(key, str):
        return f"{parent}[{json.dumps(key, ensure_ascii=False)}]"
    return f"{parent}[{safe_repr(key, 60)}]"


def index_path(parent: str, index: int) -> str:
    """Path of item `index` of the list at `parent`: ``messages[2]``."""
    return f"{parent}[{index}]"


def type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def summarize(value: Any, width: int = 80) -> str:
    """Render `value` on one line of at most `width` characters, cutting with an ellipsis.

    Dicts and lists are rendered item by item and only as far as needed, so summarizing a
    huge value stays cheap.
    """
    width = max(width, 8)
    text = _brief(value, width + 1, 0)
    if len(text) <= width:
        return text
    if isinstance(value, str):  # keep the closing quote so the string still reads as one
        return text[: width - 2] + _ELLIPSIS + text[-1]
    return text[: width - 1] + _ELLIPSIS


def _brief(value: Any, limit: int, depth: int) -> str:
    kind = category(value)
    if kind == "str":
        return repr(value[: limit + 2]) if len(value) > limit else repr(value)
    if depth > MAX_DEPTH:
        return _ELLIPSIS
    if kind == "dict":
        items = (
            f"{_brief(k, limit, depth + 1)}: {_brief(v, limit, depth + 1)}"
            for k, v in value.items()
        )
        return "{" + _join(items, limit) + "}"
    if kind == "list":
        items = (_brief(item, limit, depth + 1) for item in value)
        if not isinstance(value, tuple):
            return "[" + _join(items, limit) + "]"
        return "(" + _join(items, limit) + ("," if len(value) == 1 else "") + ")"
    return safe_repr(value)[: limit + 1]  # cut at the end only: the start says what it is


def _join(items: Any, limit: int) -> str:
    parts: list[str] = []
    used = 0
    for item in items:
        if used > limit:
            parts.append(_ELLIPSIS)
            break
        parts.append(item)
        used += len(item) + 2
    return ", ".join(parts)


def similarity(expected: Any, actual: Any) -> float:
    """Return how alike two values are, from 0.0 (unrelated) to 1.0 (equal).

    Dicts score the mean over the union of their keys (a missing key scores 0), lists align
    their items like `structural_diff` does, strings compare by words (by characters when
    short), other values score 1 when equal and 0 otherwise. Cheap enough to rank a few
    hundred recorded requests.
    """
    return _similarity(expected, actual, 0)


def _similarity(a: Any, b: Any, depth: int) -> float:
    kind = category(a)
    if kind != category(b):
        return 0.0
    if kind == "str":
        return text_similarity(a, b)
    if kind not in ("dict", "list") or depth > MAX_DEPTH:
        return 1.0 if values_equal(a, b) and type(a) is type(b) else 0.0
    if kind == "dict":
        keys = set(a) | set(b)
        if not keys:
            return 1.0
        shared = sum(_similarity(a[k], b[k], depth + 1) for k in keys if k in a and k in b)
        return shared / len(keys)
    return _sequence_similarity(a, b, depth)


def _sequence_similarity(a: Sequence[Any], b: Sequence[Any], depth: int) -> float:
    if not a and not b:
        return 1.0
    fa, fb = [fingerprint(x) for x in a], [fingerprint(x) for x in b]
    score = 0.0
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, fa, fb).get_opcodes():
        if tag == "equal":
            score += i2 - i1
        elif tag == "replace":  # pairing by position is enough for a score
            score += sum(
                _similarity(x, y, depth + 1) for x, y in zip(a[i1:i2], b[j1:j2], strict=False)
            )
    return 2.0 * score / (len(a) + len(b))
