"""Serving one recorded call, or (after a divergence, with a live object) making it live.

For the value-in, value-out stand-ins (retriever, reranker, tools). With `on_divergence="live"`
the call that diverges and every later one with a live object go live and are recorded into
the forked run in the recording's format (`to_step`); the host gets the live object's own
result. Without a live object, or without that mode, a divergence raises as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agentreplay_core import Player, ReplayDivergence

T = TypeVar("T")


def serve(player: Player, kind: str, name: str, request: Any, *,
          live: Callable[[], T] | None, to_step: Callable[[T], Any],
          from_step: Callable[[Any], T], path: str | None = None) -> T:
    """The recorded result of this call, or the live one's."""
    if live is None:
        return from_step(player.next(kind, name, request, path=path))
    made: list[T] = []

    def run() -> Any:
        made.append(live())
        return to_step(made[0])

    stored = player.next(kind, name, request, path=path, live=run)
    return made[0] if made else from_step(stored)


async def aserve(player: Player, kind: str, name: str, request: Any, *,
                 live: Callable[[], Awaitable[T]] | None, to_step: Callable[[T], Any],
                 from_step: Callable[[Any], T], path: str | None = None) -> T:
    """`serve` for async calls (`Player.anext` takes no live call: go live by hand)."""
    fork = player.fork if live is not None else None
    if fork is None:
        try:
            return from_step(await player.anext(kind, name, request, path=path))
        except ReplayDivergence as diverged:
            if live is None:
                raise
            fork = player.go_live(diverged)  # raises it unless on_divergence="live"
    assert live is not None
    made: list[T] = []

    async def run() -> Any:
        made.append(await live())
        return to_step(made[0])

    stored = await fork.acall(kind, name, request, run, path=path)
    return made[0] if made else from_step(stored)
