"""Indexes that keep each replayed call's matching work proportional to the call itself.

`InsideIndex` answers "which unconsumed steps were recorded inside this call" (the replay
boundary) without walking the run, and `KeyedQueues` finds the step a keyed call gets without
scanning the calls of the same request.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Container, Iterable

from agentreplay_core._model import Step

Key = tuple[str, str, str]


class InsideIndex:
    """Steps by each of their ancestor paths, in step order.

    A step at ``a/b/c`` is listed under ``a`` and ``a/b``, exactly the parents for which
    `is_inside(step.path, parent)` holds. Entries are dropped once handed out, so replaying a
    whole run costs O(steps x path depth) in all.
    """

    def __init__(self, steps: Iterable[Step]) -> None:
        self._below: dict[str, deque[Step]] = {}
        below = self._below
        for step in steps:
            path = step.path
            cut = path.rfind("/")
            while cut > 0:  # a parent is never empty: `is_inside` is false for ""
                parent = path[:cut]
                queue = below.get(parent)
                if queue is None:
                    queue = below[parent] = deque()
                queue.append(step)
                cut = path.rfind("/", 0, cut)

    def take_inside(self, parent: str, before: int) -> list[Step]:
        """The steps below `parent` numbered lower than `before`, each handed out once.

        Steps are listed in step order, so a call's inner steps are at the front of its path's
        queue: the ones of earlier calls at the same path were handed out with those calls.
        """
        queue = self._below.get(parent)
        taken: list[Step] = []
        while queue and queue[0].step < before:
            taken.append(queue.popleft())
        return taken


class _Queue:
    """Steps in step order and the index of the first one not known to be consumed (a list
    and an int: far lighter than a deque for the one-step queues most requests have)."""

    __slots__ = ("head", "items")

    def __init__(self, first: Step) -> None:
        self.items = [first]
        self.head = 0

    def first_pending(self, consumed: Container[int]) -> Step | None:
        items, head = self.items, self.head
        while head < len(items) and items[head].step in consumed:
            head += 1  # served, or consumed through a replay boundary
        self.head = head
        return items[head] if head < len(items) else None


def started(step: Step) -> float:
    """When a step's call started, as a number: a time given without a zone (`rec.record(...,
    started_at=datetime.now())`) compares with the recorder's own, as local time."""
    try:
        return step.started_at.timestamp()
    except (AttributeError, OverflowError, OSError, ValueError):  # no time: with the earliest
        return float("-inf")


class KeyedQueues:
    """Steps by (kind, name, match key), in the order the calls started (the step order, but
    where a call ended after a later call of the same request began: a call a timeout
    cancelled, recorded when the run ended, before the retry that followed it); among the
    steps of one key, by path too once it matters.

    Built on first use (opening a replay does not pay for it). Consumed steps are skipped
    once and for all as they are met, so a lookup costs O(1) amortised, whatever the number
    of recorded calls with the same request.
    """

    def __init__(self, steps: list[Step]) -> None:
        self._steps = steps
        self._by_key: dict[Key, _Queue] | None = None
        self._by_path: dict[Key, dict[str, _Queue]] = {}
        self._build_lock = threading.Lock()  # `holds` may run outside the player's lock

    def _build(self) -> dict[Key, _Queue]:
        with self._build_lock:
            if self._by_key is None:
                self._by_key = self._index()
            return self._by_key

    def _index(self) -> dict[Key, _Queue]:
        by_key: dict[Key, _Queue] = {}
        for step in self._steps:
            key = (step.kind, step.name, step.match_key)
            queue = by_key.get(key)
            if queue is None:
                by_key[key] = _Queue(step)
            else:
                queue.items.append(step)
        for queue in by_key.values():
            if len(queue.items) > 1:
                queue.items.sort(key=started)  # stable: steps started together keep their order
        return by_key

    def holds(self, key: Key) -> bool:
        """Whether any step (served or not) was recorded with this key."""
        by_key = self._by_key if self._by_key is not None else self._build()
        return key in by_key

    def take(self, key: Key, path: str | None, consumed: Container[int]) -> Step | None:
        """The first unconsumed step of `key` recorded at `path`, else at the nearest
        enclosing scope of `path` (same last segment), else the first unconsumed step of
        `key` (None if there is none); `path` None: the first unconsumed step of `key`,
        wherever it was recorded. The step is not marked consumed here."""
        by_key = self._by_key if self._by_key is not None else self._build()
        queue = by_key.get(key)
        if queue is None:
            return None
        first = queue.first_pending(consumed)
        if first is None or path is None or first.path == path \
                or queue.head == len(queue.items) - 1:
            return first
        # several calls with this request are pending and the next is elsewhere in the tree
        by_path = self._by_path.get(key)
        if by_path is None:
            by_path = self._by_path[key] = {}
            for step in queue.items[queue.head:]:
                placed = by_path.get(step.path)
                if placed is None:
                    by_path[step.path] = _Queue(step)
                else:
                    placed.items.append(step)
        return _nearest(by_path, path, consumed) or first


def _nearest(by_path: dict[str, _Queue], path: str, consumed: Container[int]) -> Step | None:
    """The first pending step at `path`, else at the same leaf in the nearest enclosing scope
    that holds one: a scope the replay tracks and the recording did not (a branch of a chain
    recorded by an older version) still finds the steps of the scope around it."""
    scope, _, leaf = path.rpartition("/")
    while True:
        placed = by_path.get(f"{scope}/{leaf}" if scope else leaf)
        found = placed.first_pending(consumed) if placed is not None else None
        if found is not None or not scope:
            return found
        scope = scope.rpartition("/")[0]
