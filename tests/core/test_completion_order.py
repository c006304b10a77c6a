"""Concurrent async calls complete in replay in the order they completed while recording.

A fan-out that gathers results as they come sees them in the order the calls ended; replay
serves every call at once, so without ordering they would end in the order they were asked for
and the prompt built from them would differ.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentreplay_core import Player, Store, _completion_order

Call = Callable[[str, dict[str, Any], Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def _fan_out(call: Call, delays: list[float]) -> tuple[list[str], str]:
    """Asks four questions at once, notes the answers as they come, then asks for a summary
    of them in that order."""
    came: list[str] = []

    async def ask(i: int) -> None:
        async def answer() -> str:
            await asyncio.sleep(delays[i])
            return f"answer {i}"
        came.append(await call("part", {"i": i}, answer))

    await asyncio.gather(*(ask(i) for i in range(len(delays))))

    async def summary() -> str:
        return "summary of " + ", ".join(came)
    return came, await call("summary", {"of": list(came)}, summary)


def _recording(rec: Any) -> Call:
    async def call(name: str, request: dict[str, Any], fn: Callable[[], Awaitable[Any]]) -> Any:
        return await rec.acall("llm", name, request, fn)
    return call


def _replaying(player: Player) -> Call:
    async def call(name: str, request: dict[str, Any], fn: Callable[[], Awaitable[Any]]) -> Any:
        return await player.anext("llm", name, request)
    return call


@pytest.mark.parametrize("delays", [[0.08, 0.06, 0.04, 0.02], [0.02, 0.08, 0.0, 0.05]],
                         ids=["reversed", "shuffled"])
def test_a_fan_out_sees_its_answers_in_the_recorded_order(
        any_store: Store, delays: list[float]) -> None:
    with any_store.record() as rec:
        live = asyncio.run(_fan_out(_recording(rec), delays))
    ended = sorted(range(len(delays)), key=lambda i: delays[i])
    assert live[0] == [f"answer {i}" for i in ended]  # the calls did end in that order
    with any_store.replay(rec.run_id) as player:
        replayed = asyncio.run(_fan_out(_replaying(player), [0.0] * len(delays)))
    assert replayed == live


def test_a_call_the_replay_never_asks_for_holds_up_the_others_only_so_long(
        any_store: Store, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_completion_order, "PATIENCE", 0.2)
    with any_store.record() as rec:
        asyncio.run(_fan_out(_recording(rec), [0.08, 0.06, 0.04, 0.02]))

    async def without_the_first(player: Player) -> list[str]:
        # the fastest call while recording (part 3) is not made in this replay
        came: list[str] = []

        async def ask(i: int) -> None:
            came.append(await player.anext("llm", "part", {"i": i}))
        await asyncio.gather(*(ask(i) for i in range(3)))
        return came

    with caplog.at_level(logging.WARNING, logger="agentreplay"), \
            any_store.replay(rec.run_id, allow_unused=True) as player:
        came = asyncio.run(without_the_first(player))
    assert sorted(came) == ["answer 0", "answer 1", "answer 2"]
    [warning] = [r.getMessage() for r in caplog.records if "recorded order" in r.getMessage()]
    assert "(llm 'part') ended before step" in warning and "was not asked for" in warning


def test_sequential_replay_and_sync_calls_do_not_wait(any_store: Store) -> None:
    """Calls one after another never overlap: nothing to wait for, whatever the mode."""
    async def one_by_one(call: Call) -> list[str]:
        out = []
        for i in range(3):
            async def answer(i: int = i) -> str:
                return f"answer {i}"
            out.append(await call("part", {"i": i}, answer))
        return out

    with any_store.record() as rec:
        live = asyncio.run(one_by_one(_recording(rec)))
    for match in ("keyed", "sequential"):
        with any_store.replay(rec.run_id, match=match) as player:
            assert asyncio.run(one_by_one(_replaying(player))) == live
