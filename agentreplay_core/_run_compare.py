"""Comparing two recorded runs step by step (`agentreplay diff`): pure functions, no I/O.

The steps of run A and run B are aligned like lines in a text diff. Steps equal in what was
asked and answered (kind, name, input, output, error flag; not timing, path or checksum)
anchor the alignment; between anchors, steps of the same kind and name are paired as
`differs`, and the rest is `only_a` or `only_b`. Each difference is classified in the
vocabulary of `ReplayDivergence`, read with A as the recording and B as the new run:

- `prompt_changed`, `params_changed`, `tool_args_changed`: the request differs (`classify`);
  two llm steps in the same place with another model name count as `params_changed`;
- `output_changed` (diff only, replay never reports it): same request, another answer;
- `missing_call`: a step only A holds; `unexpected_call`: a step only B holds;
- `order_changed`: the same step, but elsewhere in the other run (`moved_to` says where).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Literal

from agentreplay_core._codec import canonical_bytes
from agentreplay_core._diff import classify, render_diff, structural_diff, summarize
from agentreplay_core._diff_structure import DiffEntry
from agentreplay_core._divergence import peek
from agentreplay_core._model import Step

__all__ = ["OUTPUT_CHANGED", "RunComparison", "StepPair", "changes", "compare_steps",
           "describe"]

PairStatus = Literal["same", "differs", "only_a", "only_b"]
#: the classification of a step whose request is the same but whose answer is not
OUTPUT_CHANGED = "output_changed"


@dataclass(frozen=True)
class StepPair:
    """One row of the comparison: a step of A, of B, or of both."""

    status: PairStatus
    a: Step | None
    b: Step | None
    #: None for `same`, else one of the classifications in the module docstring
    classification: str | None = None
    #: for a step only one run holds in this place: its number in the other run, if it
    #: appears there elsewhere (`order_changed`)
    moved_to: int | None = None

    @property
    def step(self) -> Step:
        """The step this row is about (A's if both)."""
        step = self.a or self.b
        assert step is not None
        return step


@dataclass(frozen=True)
class RunComparison:
    """The aligned steps of two runs; see `compare_steps`."""

    pairs: list[StepPair]

    @property
    def identical(self) -> bool:
        return all(p.status == "same" for p in self.pairs)

    @property
    def first_divergence(self) -> StepPair | None:
        return next((p for p in self.pairs if p.status != "same"), None)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(("same", "differs", "only_a", "only_b"), 0)
        for pair in self.pairs:
            out[pair.status] += 1
        return out


def _bytes(tree: Any) -> bytes:
    try:
        return canonical_bytes(tree)
    except Exception:  # a row changed behind agentreplay's back may not even serialise
        return repr(tree).encode()


def _token(step: Step) -> tuple[str, str, bytes, bytes, bool]:
    return step.kind, step.name, _bytes(step.input), _bytes(step.output), bool(step.is_error)


def compare_steps(steps_a: Sequence[Step], steps_b: Sequence[Step], *,
                  ignore_kinds: Iterable[str] = ()) -> RunComparison:
    """Align the steps of two runs (see the module docstring); `ignore_kinds` leaves steps
    of those kinds out (e.g. `time` and `uuid`, which differ between any two live runs)."""
    skip = frozenset(ignore_kinds)
    a = [s for s in steps_a if s.kind not in skip]
    b = [s for s in steps_b if s.kind not in skip]
    tokens_a, tokens_b = [_token(s) for s in a], [_token(s) for s in b]
    pairs: list[StepPair] = []
    matcher = SequenceMatcher(None, tokens_a, tokens_b, autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            pairs.extend(StepPair("same", x, y) for x, y in zip(a[a1:a2], b[b1:b2], strict=True))
        else:
            pairs.extend(_align_gap(a[a1:a2], b[b1:b2]))
    return RunComparison(_mark_moves(pairs))


def _align_gap(a: Sequence[Step], b: Sequence[Step]) -> list[StepPair]:
    """Steps between two anchors: pair those of the same kind and name, in order."""
    out: list[StepPair] = []
    matcher = SequenceMatcher(None, [(s.kind, s.name) for s in a], [(s.kind, s.name) for s in b],
                              autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            out.extend(_differs(x, y) for x, y in zip(a[a1:a2], b[b1:b2], strict=True))
            continue
        rest_a, rest_b = list(a[a1:a2]), list(b[b1:b2])
        # A model swapped in place (gpt-4o -> gpt-5) is a changed parameter, not two calls.
        while rest_a and rest_b and rest_a[0].kind == rest_b[0].kind == "llm":
            out.append(_differs(rest_a.pop(0), rest_b.pop(0)))
        out.extend(StepPair("only_a", x, None, "missing_call") for x in rest_a)
        out.extend(StepPair("only_b", None, y, "unexpected_call") for y in rest_b)
    return out


def _differs(a: Step, b: Step) -> StepPair:
    if _token(a) == _token(b):  # equal steps the anchor pass left in a gap
        return StepPair("same", a, b)
    if _bytes(a.input) != _bytes(b.input):
        return StepPair("differs", a, b, classify(a.kind, _input_diff(a, b)))
    if a.name != b.name:
        return StepPair("differs", a, b, "params_changed")
    return StepPair("differs", a, b, OUTPUT_CHANGED)


def _input_diff(a: Step, b: Step) -> list[DiffEntry]:
    return structural_diff(peek(a.input), peek(b.input))


def _mark_moves(pairs: list[StepPair]) -> list[StepPair]:
    """A step only A holds here that B holds elsewhere (and the other way round) moved."""
    waiting: dict[tuple[str, str, bytes, bytes, bool], list[int]] = {}
    for index, pair in enumerate(pairs):
        if pair.status == "only_b" and pair.b is not None:
            waiting.setdefault(_token(pair.b), []).append(index)
    out = list(pairs)
    for index, pair in enumerate(pairs):
        if pair.status != "only_a" or pair.a is None:
            continue
        twins = waiting.get(_token(pair.a))
        if not twins:
            continue
        other_index = twins.pop(0)
        other = pairs[other_index]
        assert other.b is not None
        out[index] = StepPair("only_a", pair.a, None, "order_changed", moved_to=other.b.step)
        out[other_index] = StepPair("only_b", None, other.b, "order_changed",
                                    moved_to=pair.a.step)
    return out


def changes(pair: StepPair, max_entries: int = 50) -> tuple[str, list[DiffEntry]]:
    """What differs in a `differs` row: (`"input"` or `"output"`, the structural diff)."""
    if pair.a is None or pair.b is None:
        return "input", []
    if pair.classification == OUTPUT_CHANGED:
        return "output", structural_diff(_answer(pair.a), _answer(pair.b),
                                         max_entries=max_entries)
    return "input", structural_diff(peek(pair.a.input), peek(pair.b.input),
                                    max_entries=max_entries)


def _answer(step: Step) -> Any:
    value = peek(step.output)
    return {"error": value} if step.is_error else value


def describe(pair: StepPair, width: int = 100) -> str:
    """Readable text for one row that is not `same` (A is "recorded", B "actual")."""
    step = pair.step
    if pair.status == "only_a":
        where = (f"; B holds it as step {pair.moved_to}" if pair.moved_to is not None
                 else "; B never made this call")
        return f"- request: {summarize(peek(step.input), width - 11)}{where}"
    if pair.status == "only_b":
        where = (f"; A holds it as step {pair.moved_to}" if pair.moved_to is not None
                 else "; A never made this call")
        return f"+ request: {summarize(peek(step.input), width - 11)}{where}"
    assert pair.a is not None and pair.b is not None
    lines = []
    if pair.a.name != pair.b.name:
        lines.append(f"~ name: {pair.a.name!r} -> {pair.b.name!r}")
    if pair.a.is_error != pair.b.is_error:
        lines.append(f"~ error: {pair.a.is_error} -> {pair.b.is_error}")
    part, entries = changes(pair)
    text = render_diff(entries, width=width)
    if text:
        lines.append(f"{part} (A -> B):")
        lines.extend("  " + line for line in text.splitlines())
    return "\n".join(lines)
