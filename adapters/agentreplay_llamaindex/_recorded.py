"""What a replay backend reads from the recording before any call: names and LLM metadata."""

from __future__ import annotations

from typing import Any

from agentreplay_core import Player, decode


def recorded_names(player: Player, kind: str) -> list[str]:
    return sorted({s.name for s in player.steps if s.kind == kind})


def recorded_name(player: Player, kind: str, name: str | None) -> str:
    """`name`, or the only name the recording holds for `kind`."""
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


def recorded_llm_metadata(player: Player, name: str) -> dict[str, Any]:
    """The metadata the live LLM reported (context window, chat or completion, tools)."""
    for step in player.steps:
        if step.kind == "llm" and step.name == name:
            request = decode(step.input, restore_objects=False)
            meta = request.get("metadata") if isinstance(request, dict) else None
            if isinstance(meta, dict):
                return {k: v for k, v in meta.items() if v is not None}
    return {"model_name": name}
