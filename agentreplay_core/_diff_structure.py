"""Structural diff of a recorded request (expected) against the one the code made (actual)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Literal

from agentreplay_core._diff_values import (
    MAX_DEPTH,
    ROOT,
    category,
    fingerprint,
    index_path,
    key_path,
    similarity,
    values_equal,
)

DiffOp = Literal["changed", "added", "removed", "type_changed"]

# Aligning n removed against m inserted items costs n*m similarity computations; above this
# the items are paired by position instead.
_PAIRING_LIMIT = 400


@dataclass(frozen=True)
class DiffEntry:
    """One difference between the recorded (expected) value and the actual one.

    Attributes:
        path: where the difference is, e.g. ``messages[2].content`` or ``params["weird key"]``;
            ``$`` is the whole value. Changed and removed list items carry their index in the
            recorded list, added items their index in the actual list.
        op: ``changed`` (same type, other value), ``type_changed`` (e.g. ``0.2`` -> ``"0.2"``),
            ``added`` (only in actual) or ``removed`` (only in expected).
        expected: the recorded value at `path` (None when added).
        actual: the actual value at `path` (None when removed).
    """

    path: str
    op: DiffOp
    expected: Any
    actual: Any


class DiffList(list[DiffEntry]):
    """What `structural_diff` returns: the entries kept, and how many were left out."""

    def __init__(self, entries: Iterable[DiffEntry] = (), omitted: int = 0) -> None:
        super().__init__(entries)
        self.omitted = omitted


class _Collector:
    def __init__(self, limit: int) -> None:
        self.entries: list[DiffEntry] = []
        self.omitted = 0
        self.limit = limit

    @property
    def total(self) -> int:
        return len(self.entries) + self.omitted

    def add(self, path: str, op: DiffOp, expected: Any, actual: Any) -> None:
        # Keep counting past the limit so the reader learns how much was left out.
        if len(self.entries) < self.limit:
            self.entries.append(DiffEntry(path, op, expected, actual))
        else:
            self.omitted += 1


def structural_diff(expected: Any, actual: Any, *, max_entries: int = 50) -> list[DiffEntry]:
    """Compare two decoded values and list their differences, outermost first.

    Dicts are compared key by key (recorded key order, then new keys). Lists are aligned
    with `difflib.SequenceMatcher` over each item's canonical JSON, so one inserted message
    is one ``added`` entry rather than every later message ``changed``. Strings that differ
    give one ``changed`` entry holding both strings; `render_diff` shows the changed words.

    Returns:
        A `DiffList` (a list) of at most `max_entries` entries; its `omitted` attribute
        counts the further differences, which `render_diff` reports. Empty when equal.
    """
    if max_entries < 1:
        raise ValueError(f"max_entries must be at least 1, got {max_entries}")
    out = _Collector(max_entries)
    _walk(ROOT, expected, actual, out, 0)
    return DiffList(out.entries, out.omitted)


def _walk(path: str, a: Any, b: Any, out: _Collector, depth: int) -> None:
    kind = category(a)
    if kind != category(b):
        out.add(path, "type_changed", a, b)
        return
    if kind == "dict" and depth <= MAX_DEPTH:
        for key, value in a.items():
            if key in b:
                _walk(key_path(path, key), value, b[key], out, depth + 1)
            else:
                out.add(key_path(path, key), "removed", value, None)
        for key, value in b.items():
            if key not in a:
                out.add(key_path(path, key), "added", None, value)
        return
    if kind == "list" and depth <= MAX_DEPTH:
        before = out.total
        _walk_sequence(path, a, b, out, depth)
        if out.total == before and type(a) is not type(b):  # same items, list vs tuple
            out.add(path, "type_changed", a, b)
        return
    if values_equal(a, b):
        if type(a) is not type(b) and kind in ("number", "other"):  # 1 vs 1.0
            out.add(path, "type_changed", a, b)
        return
    op: DiffOp = "type_changed" if kind == "other" and type(a) is not type(b) else "changed"
    out.add(path, op, a, b)


def _walk_sequence(
    path: str, a: Sequence[Any], b: Sequence[Any], out: _Collector, depth: int
) -> None:
    matcher = SequenceMatcher(None, [fingerprint(x) for x in a], [fingerprint(y) for y in b])
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for offset in range(i2 - i1):
                x, y = a[i1 + offset], b[j1 + offset]
                if not values_equal(x, y):  # same canonical text yet unequal: look closer
                    _walk(index_path(path, i1 + offset), x, y, out, depth + 1)
            continue
        for i, j in _pair(a[i1:i2], b[j1:j2]):
            if i is not None and j is not None:
                _walk(index_path(path, i1 + i), a[i1 + i], b[j1 + j], out, depth + 1)
            elif i is not None:
                out.add(index_path(path, i1 + i), "removed", a[i1 + i], None)
            elif j is not None:
                out.add(index_path(path, j1 + j), "added", None, b[j1 + j])


def _pair(a: Sequence[Any], b: Sequence[Any]) -> list[tuple[int | None, int | None]]:
    """Pair the items of two differing runs of a list, leaving the surplus unpaired.

    Equal-length runs pair by position. Otherwise the pairing keeps order and maximises the
    summed similarity, so ``[u2] -> [new, u2']`` pairs u2 with u2' and reports `new` added.
    """
    n, m = len(a), len(b)
    if n == m or not n or not m or n * m > _PAIRING_LIMIT:
        k = min(n, m)
        pairs: list[tuple[int | None, int | None]] = [(i, i) for i in range(k)]
        pairs += [(i, None) for i in range(k, n)]
        pairs += [(None, j) for j in range(k, m)]
        return pairs
    if n < m:
        return [(i, j) for i, j in _best_pairs(a, b)]
    return [(j, i) for i, j in _best_pairs(b, a)]


def _best_pairs(short: Sequence[Any], long: Sequence[Any]) -> list[tuple[int | None, int]]:
    """Pair every item of `short` with one of `long`, in order, maximising total similarity."""
    n, m = len(short), len(long)
    score = [[similarity(x, y) for y in long] for x in short]
    # best[i][j]: best total pairing short[:i] into long[:j]; impossible when j < i.
    best = [[0.0] * (m + 1)] + [[float("-inf")] * (m + 1) for _ in range(n)]
    for i in range(1, n + 1):
        for j in range(i, m + 1):
            best[i][j] = max(best[i][j - 1], best[i - 1][j - 1] + score[i - 1][j - 1])
    pairs: list[tuple[int | None, int]] = []
    i, j = n, m
    while j > 0:
        if i > 0 and best[i - 1][j - 1] + score[i - 1][j - 1] >= best[i][j - 1]:
            pairs.append((i - 1, j - 1))
            i -= 1
        else:
            pairs.append((None, j - 1))
        j -= 1
    pairs.reverse()
    return pairs
