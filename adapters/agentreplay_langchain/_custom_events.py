"""Custom events a tool or retriever dispatches (`dispatch_custom_event`, LangChain's way to
report progress from inside a run): recorded with its step and dispatched again by its
stand-in.

A replayed tool or retriever does not run, so without them `astream_events` and the handlers
of a replay would miss what the live one reported (`on_custom_event`). They are stored in the
order they were dispatched, beside the result or the error, and dispatched again before the
stand-in returns or raises, from its own run (as a tool that dispatches them itself does).
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.callbacks.manager import AsyncParentRunManager, ParentRunManager

from agentreplay_core._key_order import in_key_order, keep_key_order
from agentreplay_core._recorded_errors import kept_beside, recorded_error
from agentreplay_langchain._convert import dump, revive, storable

#: beside a tool step's result (or in its error record): [{name, data[, data_order]}, ...]
CUSTOM_EVENTS = "custom_events"
_ORDER = "data_order"


def event_entry(name: str, data: Any) -> dict[str, Any]:
    """A dispatched event as stored: its data as of the dispatch (its repr if the store cannot
    hold it: an event must never make the tool's result unstorable), with its key order."""
    stored = storable(dump(data))
    entry: dict[str, Any] = {"name": name, "data": stored}
    keep_key_order(entry, _ORDER, stored)
    return entry


class EventCollector(BaseCallbackHandler):
    """The only callbacks of a tool run live in a fork: what it dispatches, to be recorded
    into the fork's step and dispatched again from the stand-in's run."""

    run_inline = True

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def on_custom_event(self, name: Any, data: Any, *, run_id: Any, **kwargs: Any) -> None:
        self.events.append(event_entry(str(name), data))


def error_events(error: BaseException) -> Any:
    """Where the events of a failed call are: the record a replayed error was rebuilt from,
    or what a live run's error keeps beside it."""
    return recorded_error(error) or kept_beside(error)


def recorded_events(output: Any) -> list[tuple[str, Any]]:
    """The events a stored tool output (or error record) holds, revived; none if it has none
    or they are not in the stored form (a damaged recording dispatches nothing)."""
    events = output.get(CUSTOM_EVENTS) if isinstance(output, dict) else None
    if not isinstance(events, list):
        return []
    return [(entry["name"], in_key_order(revive(entry.get("data")), entry.get(_ORDER)))
            for entry in events if isinstance(entry, dict) and isinstance(entry.get("name"), str)]


def dispatch_again(run_manager: ParentRunManager | None, output: Any) -> None:
    """Dispatch the recorded events of `output` from the stand-in's (tool or retriever) run."""
    events = recorded_events(output) if run_manager is not None else []
    if events:
        assert run_manager is not None
        manager = run_manager.get_child()
        for name, data in events:
            manager.on_custom_event(name, data, run_id=run_manager.run_id)


async def adispatch_again(run_manager: AsyncParentRunManager | None,
                          output: Any) -> None:
    """`dispatch_again` for async runs."""
    events = recorded_events(output) if run_manager is not None else []
    if events:
        assert run_manager is not None
        manager = run_manager.get_child()
        for name, data in events:
            await manager.on_custom_event(name, data, run_id=run_manager.run_id)
