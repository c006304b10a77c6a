"""What a replay backend reads from the recording before any call: names and LLM metadata."""

from __future__ import annotations

from typing import Any

from agentreplay_core import Player, Step, decode
from agentreplay_core._player import checked_player
from agentreplay_llamaindex._convert import is_legacy_request

_STAND_INS = {"llm": "ReplayLLM", "embedding": "ReplayEmbedding",
              "retriever": "ReplayRetriever", "rerank": "ReplayReranker"}


def recorded_names(player: Player, kind: str) -> list[str]:
    return sorted({s.name for s in player.steps if s.kind == kind})


def recorded_name(player: Player, kind: str, name: str | None) -> str:
    """`name`, or the only name the recording holds for `kind`."""
    checked_player(player, _STAND_INS.get(kind, f"a replay {kind} stand-in"))
    if name is not None:
        return name
    names = recorded_names(player, kind)
    if len(names) == 1:
        return names[0]
    if not names:
        # nothing to serve: every call will diverge as `unexpected_call`, which is the truth
        return f"unrecorded-{kind}"
    raise ValueError(
        f"run {player.run_id} recorded {kind} calls under several names ({', '.join(names)}); "
        f"pass name=... to say which one this replay backend stands for")


def step_llm_metadata(step: Step) -> dict[str, Any] | None:
    """The metadata the live LLM reported for one step (context window, chat or completion,
    tools): with the output, or with the request in runs recorded before `llm_view`."""
    for stored in (step.output, step.input):
        held = stored.get("metadata") if isinstance(stored, dict) else None
        if isinstance(held, dict):
            meta = decode(held, restore_objects=False)
            return {k: v for k, v in meta.items() if v is not None}
    return None


def recorded_llm_steps(player: Player, name: str) -> list[tuple[Step, dict[str, Any]]]:
    """The `name` LLM steps that hold the metadata they were recorded with, in step order,
    each with it."""
    steps = []
    for step in player.steps:
        if step.kind == "llm" and step.name == name:
            meta = step_llm_metadata(step)
            if meta is not None:
                steps.append((step, meta))
    return steps


def has_legacy_llm_steps(player: Player, name: str) -> bool:
    """Whether the run holds `name` LLM steps recorded before `llm_view` (their requests hold
    the metadata and their match keys were computed the old way)."""
    return any(step.kind == "llm" and step.name == name and is_legacy_request(step.input)
               for step in player.steps)
