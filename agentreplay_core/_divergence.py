"""Building `ReplayDivergence` errors: what was expected, what came, and what is nearest."""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from uuid import UUID

from agentreplay_core._codec import decode
from agentreplay_core._diff import (
    classify,
    nearest_candidates,
    render_diff,
    structural_diff,
    summarize,
)
from agentreplay_core._errors import AbandonedStreamReplayed, ReplayDivergence
from agentreplay_core._model import Step
from agentreplay_core._plural import counted

#: how much of the request an `unexpected_call` shows: enough to recognise the call, while
#: a whole prompt or document would bury the rest of the message
SHOWN_REQUEST = 300

#: each adapter's replay backends, for a hint naming those of the framework in use
REPLAY_BACKENDS = {
    "agentreplay_langchain": "LangChain: replay_tools(player, tools), ReplayChatModel, "
                             "ReplayLLM, ReplayEmbeddings, ReplayRetriever",
    "agentreplay_llamaindex": "LlamaIndex: replay_tools(player, tools), ReplayLLM, "
                              "ReplayEmbedding, ReplayRetriever, ReplayReranker",
}


def peek(tree: Any) -> Any:
    """A recorded value for a message: decoded if possible, else as stored.

    A divergence report must never turn into an unrelated error because some other recorded
    value cannot be rebuilt here (an unencodable marker, a class that is not importable).
    """
    try:
        return decode(tree, restore_objects=False)
    except Exception:
        return tree


def divergence(
    *,
    run_id: UUID,
    kind: str,
    name: str,
    request: Any,
    key: str,
    path: str | None,
    pending: Sequence[Step],
    recorded_total: int,
    expected_next: Step | None,
) -> ReplayDivergence:
    """The error for a call that matched no pending step.

    `expected_next` is the step sequential matching wanted next (None in keyed mode).
    """
    same = [s for s in pending if s.kind == kind and s.name == name]
    if path is not None:
        same.sort(key=lambda s: s.path != path)  # stable: same path first, then order
    candidates = nearest_candidates(
        request, kind, name, [(s.step, s.kind, s.name, peek(s.input)) for s in pending])
    common: dict[str, Any] = {"run_id": run_id, "kind": kind, "name": name, "actual": request,
                              "candidates": candidates}
    later = expected_next is not None and any(s.match_key == key for s in same)
    if expected_next is not None and (later or (same and same[0] is not expected_next)):
        what = "the recording holds this call later; " if later else ""
        return ReplayDivergence(
            step=expected_next.step, classification="order_changed",
            expected=peek(expected_next.input),
            detail=(f"{what}step {expected_next.step} ({expected_next.kind} "
                    f"{expected_next.name!r}) was expected next"), **common)
    if same:
        target = same[0]
        expected = peek(target.input)
        entries = structural_diff(expected, request)
        detail = "the request differs from the recorded one"
        if not entries:
            detail = ("the request equals the recorded one but its match key differs: record "
                      "and replay must compute match keys the same way (match_key=...)")
        return ReplayDivergence(
            step=target.step, classification=classify(kind, entries), expected=expected,
            diff=render_diff(entries), detail=detail, **common)
    calls = "call was" if recorded_total == 1 else "calls were"
    detail = (f"all {recorded_total} recorded {kind} {name!r} {calls} already replayed"
              if recorded_total else f"the recording holds no {kind} call named {name!r}")
    # no recorded request to diff against: the request itself says which call this was
    detail += f"\nrequest: {summarize(request, SHOWN_REQUEST)}"
    return ReplayDivergence(step=None, classification="unexpected_call", detail=detail,
                            **common)


def _within(path: str, ran: Collection[str]) -> bool:
    """`path` or a call enclosing it started in the replay (what a call that ran for real
    records inside it, an embedding model's vectors below its span, ran for real too)."""
    while path:
        if path in ran:
            return True
        path = path.rpartition("/")[0]
    return False


def _listed(steps: Sequence[Step]) -> str:
    """The first ten steps as `N (kind 'name')`, and how many more."""
    listing = ", ".join(f"{s.step} ({s.kind} {s.name!r})" for s in steps[:10])
    return listing + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")


def _replay_backends() -> str:
    """The replay backends of the adapters imported here (those of every adapter if none is:
    the calls were then made through `rec.call` or another adapter)."""
    used = [names for module, names in REPLAY_BACKENDS.items() if module in sys.modules]
    return "; ".join(used or REPLAY_BACKENDS.values())


def missing_calls(run_id: UUID, missing: Sequence[Step], ran: Collection[str] = (),
                  refused: Mapping[str, str] | None = None,
                  diverged: Mapping[str, str] | None = None) -> ReplayDivergence:
    """The error for recorded steps the replay never asked for; `ran`: the paths where a
    tracked call started in the replay (those steps' calls ran for real, not replayed);
    `refused`: paths where a replay backend was asked but could not take the request, and
    why; `diverged`: paths where a replay backend was asked and the request diverged, and
    how. Named after the first call not inside another missing one (a tool, not the clock
    read recorded inside it before it)."""
    paths = {s.path for s in missing if s.path}
    first = next((s for s in missing
                  if not s.path or not _within(s.path.rpartition("/")[0], paths)), missing[0])
    detail = (f"{counted(len(missing), 'recorded step')} "
              f"{'was' if len(missing) == 1 else 'were'} never replayed: {_listed(missing)}; ")
    refused = refused or {}
    asked = [s for s in missing if s.path in refused]
    if asked:
        step = asked[0]
        whose = "" if len(asked) == len(missing) else f"{_listed(asked)}: "
        detail += (f"{whose}its replay backend was asked at the recorded path but could not "
                   f"take the request ({refused[step.path]}); ")
    diverged = diverged or {}
    turned = [s for s in missing if s.path and s.path not in refused and _within(s.path, diverged)]
    if turned:
        whose = "" if len(turned) == len(missing) else f"{_listed(turned)}: "
        detail += (f"{whose}its replay backend was asked for it at the recorded path and "
                   f"refused the request, which differed from the recorded one "
                   f"({_diverged_how(turned[0].path, diverged)}): no call was made live in "
                   f"its place; ")
    live = [s for s in missing if s.path and s.path not in refused
            and not _within(s.path, diverged) and _within(s.path, ran)]
    if live:
        one = len(live) == 1
        who = ("it" if one else "they") if len(live) == len(missing) else _listed(live)
        detail += (f"{who} ran for real in this replay, at the recorded "
                   f"path{'' if one else 's'}, instead of being served from the recording: "
                   "give the replay the replay backend of "
                   f"{'that call' if one else 'those calls'} ({_replay_backends()}), or pass "
                   f"allow_unused=True if running {'it' if one else 'them'} for real is "
                   "intended")
    elif len(turned) < len(missing):
        detail += "pass allow_unused=True if that is expected"
    else:  # the divergence said it all
        detail = detail.removesuffix("; ")
    return ReplayDivergence(
        run_id=run_id, step=first.step, kind=first.kind, name=first.name,
        classification="missing_call", expected=peek(first.input), detail=detail)


def _diverged_how(path: str, diverged: Mapping[str, str]) -> str:
    """How the call at `path` (or the one around it that diverged) diverged."""
    while path not in diverged and "/" in path:
        path = path.rpartition("/")[0]
    return diverged.get(path, "diverged")


def ran_for_real(diverged: ReplayDivergence, unasked: Sequence[Step]) -> None:
    """Add to a divergence the recorded calls never asked for although a call started at
    their paths earlier in the replay: they likely ran for real, and their answer, not a
    change in the code, may be what made this call differ."""
    one = len(unasked) == 1
    diverged.detail += (
        f"\nrecorded step{'' if one else 's'} {_listed(unasked)} {'was' if one else 'were'} "
        "never asked for, though a call "
        f"started at {'its' if one else 'their'} recorded path earlier in this replay: "
        f"{'it' if one else 'they'} likely ran for real instead of being served from the "
        f"recording (a model, tool or retriever not given its replay backend: "
        f"{_replay_backends()}), and what {'it' if one else 'they'} returned may be what "
        "changed this call")
    diverged.args = (diverged._message(),)


_CAUGHT = ("caught by the replayed code (a tool error handler such as "
           "ToolNode(handle_tool_errors=True), a try/except)")


def _copy(d: ReplayDivergence, detail: str) -> ReplayDivergence:
    return ReplayDivergence(
        run_id=d.run_id, step=d.step, kind=d.kind, name=d.name,
        classification=d.classification, expected=d.expected, actual=d.actual, diff=d.diff,
        candidates=d.candidates, detail=f"{d.detail}\n{detail}" if d.detail else detail)


def raised_again(first: ReplayDivergence, unused: ReplayDivergence) -> ReplayDivergence:
    """The replay's first divergence, raised again at its end in place of `unused` (the
    `missing_call` it likely left): the replayed code caught it."""
    return _copy(first, f"this divergence was raised earlier and {_CAUGHT}; the replay went "
                        f"on, and at its end {unused.detail}")


def after_caught(later: ReplayDivergence, first: ReplayDivergence) -> ReplayDivergence:
    """A divergence that came after one the replayed code caught, which is likely its cause."""
    quoted = "\n".join("  " + line for line in str(first).splitlines())
    return _copy(later, f"an earlier divergence, {_CAUGHT}, is likely the cause:\n{quoted}")


def abandoned_stream(step: Step, served: int | None = None,
                     unit: str = "chunk") -> AbandonedStreamReplayed:
    """The error a replay raises when it asks a stream its recording abandoned (after
    `served` chunks or events; None: for the whole response at once) for more than was
    recorded. Ending the stream there instead would hand the program a shorter answer than
    any live model gave, and its behaviour would change without a word."""
    told = "" if served is None else f" after {counted(served, unit)}"
    return AbandonedStreamReplayed(
        f"run {step.run_id}, step {step.step} ({step.kind} {step.name!r}): the recorded "
        f"stream was abandoned by its consumer{told}; the replay asked for more than was "
        "recorded. Stop reading the stream where the recorded run did.")
