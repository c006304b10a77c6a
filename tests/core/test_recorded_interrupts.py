"""A call a Ctrl-C or `sys.exit()` interrupted is recorded, and its replay stops there too."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentreplay_core import ReplayedError, RunStatus, Store


def agent(call: Any) -> str:
    """Agent code that handles tool failures and carries on; an interrupt must pass it."""
    try:
        return str(call())
    except Exception as exc:
        return f"tool failed, continuing: {type(exc).__name__}"


def test_a_call_interrupted_by_ctrl_c_is_recorded_and_stops_the_replay(
        any_store: Store) -> None:
    interrupt = KeyboardInterrupt()

    def fetch() -> str:
        raise interrupt

    with any_store.record() as rec, pytest.raises(KeyboardInterrupt) as live:
        agent(lambda: rec.call("tool", "fetch", {"url": "x"}, fetch))
    assert live.value is interrupt  # propagated unchanged
    [step] = any_store.load_steps(rec.run_id)
    assert step.is_error and step.output["type"] == "KeyboardInterrupt"
    assert any_store.get_run(rec.run_id).status == RunStatus.COMPLETE  # the program caught it
    with any_store.replay(rec.run_id) as player, pytest.raises(KeyboardInterrupt):
        agent(lambda: player.next("tool", "fetch", {"url": "x"}))


@pytest.mark.parametrize("code", [3, "shutting down", None])
def test_an_async_call_ended_by_sys_exit_replays_the_same_exit_code(
        any_store: Store, code: int | str | None) -> None:
    async def shutdown() -> str:
        raise SystemExit(code)

    with any_store.record() as rec, pytest.raises(SystemExit) as live:
        asyncio.run(rec.acall("tool", "shutdown", {}, shutdown))
    assert live.value.code == code
    with any_store.replay(rec.run_id) as player, pytest.raises(SystemExit) as again:
        asyncio.run(player.anext("tool", "shutdown", {}))
    assert again.value.code == code and type(again.value) is SystemExit


class Halt(KeyboardInterrupt):
    """A BaseException of a module the program has imported: never rebuilt from a record."""


@pytest.mark.parametrize("forged", [
    {"type": "GeneratorExit", "module": "builtins"},
    {"type": "BaseException", "module": "builtins"},
    {"type": "CancelledError", "module": "asyncio.exceptions"},  # without `cancelled`
    {"type": "Exit", "module": "_pytest.outcomes", "args": ["stop the test session"]},
    {"type": Halt.__qualname__, "module": Halt.__module__},
])
def test_a_run_log_cannot_raise_other_base_exceptions(any_store: Store,
                                                      forged: dict[str, Any]) -> None:
    """A tampered (or foreign) error record may name any BaseException; only the built-in
    interrupts are raised as themselves, which at worst stop the replay. Others would slip
    past the program's error handling (a GeneratorExit, pytest's Exit, a subclass of an
    interrupt with a behaviour of its own), so they come back as `ReplayedError`."""
    with any_store.record() as rec:
        rec.record("tool", "t", {}, {**forged, "message": ""}, is_error=True)
    with any_store.replay(rec.run_id) as player, pytest.raises(ReplayedError) as caught:
        player.next("tool", "t", {})
    assert caught.value.type_name == forged["type"]
