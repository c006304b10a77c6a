"""A tool call the workflow suspended while it waited for an event (a person's answer).

From llama-index-workflows 2.9 `ctx.wait_for_event` suspends the waiting step (it raises
`WaitingForEvent`) and the workflow runs the step again when the event arrives. A server often
ends the request there (it stores the Context) and resumes in another request, each its own
recorded run: the first run then ends with the tool suspended, and its replay must suspend
there too. So a call still suspended when the recording ends is a step of its own (a call the
same run resumed is not: its result is the tool's step, and the replay serves it at once,
asking no one), the tool's name and request with

    {"waiting_for": {"event_type": "module:Class", "waiter_id": ..., "requirements": {...},
                     "timeout": ..., "waiter_event": "<the event as JsonSerializer encodes it>"}}

(beside what the tool wrote to the workflow's state and stream before it waited), and the
replay stand-in calls `ctx.wait_for_event` again with the same arguments: the workflow suspends
and streams the question as it did live.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any

from llama_index.core.workflow import Event, JsonSerializer

log = logging.getLogger("agentreplay.llamaindex")

#: in a tool's step in place of its output: the call was suspended waiting for this event
WAITING_FOR = "waiting_for"


class Suspended(Exception):
    """Raised by the stand-in's step reader on a suspension step, for the stand-in to wait."""

    def __init__(self, stored: Mapping[str, Any]) -> None:
        super().__init__("the recorded tool call was suspended, waiting for an event")
        self.stored = stored


def is_suspension(stored: Any) -> bool:
    return isinstance(stored, Mapping) and WAITING_FOR in stored


def suspension_output(err: BaseException) -> dict[str, Any]:
    """What a `WaitingForEvent` says the call waits for, as a suspension step stores it."""
    add = err.add  # type: ignore[attr-defined]
    event_type = add.event_type
    waiter_event = add.waiter_event
    encoded: str | None = None
    if waiter_event is not None:
        try:
            encoded = str(JsonSerializer().serialize(waiter_event))
        except Exception:
            log.warning("agentreplay: the event of type %s a tool's wait_for_event streams "
                        "cannot be encoded; a replay that suspends there will not stream it",
                        type(waiter_event).__name__)
    requirements = dict(add.requirements or {})
    try:
        json.dumps(requirements)
    except (TypeError, ValueError):
        log.warning("agentreplay: the requirements of a tool's wait_for_event are not JSON; a "
                    "replay that suspends there waits without them")
        requirements = {}
    return {WAITING_FOR: {
        "event_type": f"{event_type.__module__}:{event_type.__qualname__}",
        "waiter_id": add.waiter_id, "requirements": requirements,
        "timeout": add.timeout, "waiter_event": encoded}}


async def wait_again(ctx: Any, stored: Mapping[str, Any], tool: str) -> Any:
    """Call `ctx.wait_for_event` as the recorded call did: the workflow suspends the step
    (streaming the question) unless the Context already holds the answer, which it returns."""
    waiting = stored[WAITING_FOR]
    event_type = _imported_event_class(waiting.get("event_type"))
    if event_type is None:  # a recording names classes; it never makes the replay import one
        raise RuntimeError(
            f"agentreplay: tool {tool!r} waited for an event of class "
            f"{waiting.get('event_type')!r} when recorded, which this program has not "
            "imported: the replay cannot wait for it")
    waiter_event = _rebuilt_event(waiting.get("waiter_event"))
    if waiting.get("waiter_event") is not None and waiter_event is None:
        log.warning("agentreplay: tool %r streamed an event while it waited when recorded "
                    "whose class this program has not imported: the replay does not stream it",
                    tool)
    return await ctx.wait_for_event(event_type, waiter_event=waiter_event,
                                    waiter_id=waiting.get("waiter_id"),
                                    requirements=waiting.get("requirements") or None,
                                    timeout=waiting.get("timeout"))


def _imported_event_class(name: Any) -> type[Event] | None:
    """The class `name` ("module:Class", or "module.Class" as the serializer names it)
    denotes, if the program has imported it and it is an `Event`."""
    text = str(name)
    module, _, qualname = text.partition(":") if ":" in text else text.rpartition(".")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, Event) else None


def _rebuilt_event(encoded: Any) -> Event | None:
    if not isinstance(encoded, str):
        return None
    try:
        if _imported_event_class(json.loads(encoded).get("qualified_name")) is None:
            return None
        event = JsonSerializer().deserialize(encoded)
    except Exception:
        return None
    return event if isinstance(event, Event) else None
