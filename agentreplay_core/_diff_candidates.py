"""The recorded steps nearest to a request that matched none, for divergence messages."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentreplay_core._diff_structure import DiffList, structural_diff
from agentreplay_core._diff_values import ROOT, similarity

_VERBS = {
    "changed": "differs",
    "type_changed": "changed type",
    "added": "added",
    "removed": "removed",
}


@dataclass(frozen=True)
class Candidate:
    """A recorded step offered as "did you mean": how alike it is and what differs.

    ``str(candidate)`` reads like
    ``step 7 llm 'gpt-4o' (83% similar): messages[1].content differs``.
    """

    step: int
    kind: str
    name: str
    similarity: float
    summary: str

    def __str__(self) -> str:
        # Floor, so that only an identical request reads as 100%.
        percent = int(self.similarity * 100)
        text = f"step {self.step} {self.kind} {self.name!r} ({percent}% similar)"
        return f"{text}: {self.summary}" if self.summary else text


def nearest_candidates(
    actual: Any,
    kind: str,
    name: str,
    recorded: Iterable[tuple[int, str, str, Any]],
    limit: int = 3,
) -> list[Candidate]:
    """Rank recorded steps ``(step, kind, name, input)`` by how well they fit a request.

    Steps of the same kind and name come first, then the same kind, then any other; within
    each group the most similar input first, then the earliest step. Only as many groups as
    needed to fill `limit` are scored. Steps of another kind are listed only when their input
    has something in common with the request: a 0% match of another kind is noise.
    """
    if limit <= 0:
        return []
    groups: tuple[list[tuple[int, str, str, Any]], ...] = ([], [], [])
    for row in recorded:
        _, row_kind, row_name, _ = row
        if row_kind == kind:
            groups[0 if row_name == name else 1].append(row)
        else:
            groups[2].append(row)
    chosen: list[tuple[int, str, str, Any, float]] = []
    for index, group in enumerate(groups):
        if len(chosen) >= limit:
            break
        scored = [(*row, similarity(row[3], actual)) for row in group]
        if index == 2:
            scored = [item for item in scored if item[4] > 0]
        scored.sort(key=lambda item: (-item[4], item[0]))
        chosen.extend(scored[: limit - len(chosen)])
    return [
        Candidate(step, row_kind, row_name, score, _summary(recorded_input, actual))
        for step, row_kind, row_name, recorded_input, score in chosen
    ]


def _summary(expected: Any, actual: Any) -> str:
    """Name the first difference, e.g. ``messages[1].content differs (+2 more)``."""
    entries = structural_diff(expected, actual, max_entries=1)
    if not entries:
        return "same request"
    first = entries[0]
    where = "request" if first.path == ROOT else first.path
    text = f"{where} {_VERBS[first.op]}"
    more = len(entries) - 1 + (entries.omitted if isinstance(entries, DiffList) else 0)
    return f"{text} (+{more} more)" if more else text
