"""Events an agent tool writes to the workflow's stream, kept with its result.

A tool that takes the workflow `Context` can stream events to the program while it works
(`ctx.write_event_to_stream(Progress(msg=...))`, which a UI shows). A replay serves the tool
without running it, so the events it wrote are recorded with its step (`stream_events`: each
as the workflow's `JsonSerializer` encodes it, as text, so nothing about it changes in the
store) and written to the stream again when the stand-in serves the result, before the
agent's `ToolCallResult`, as live.

A `Context` has no attributes of its own to wrap (slots), so the recording wraps its class's
`write_event_to_stream`, once (`agentreplay_core._noting`): the wrapper notes an event only
while a recorded tool call runs in the writer's context, and always calls the original.
The question `wait_for_event` streams for a person (its `waiter_event`) is not noted: the
replay serves the answered call and asks no one. A replay rebuilds an event only as an
`Event` class already imported by the program (a recording names classes; it never makes
the replay import one).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import sys
from collections.abc import Callable
from contextvars import Token
from typing import Any

from llama_index.core.workflow import Event, JsonSerializer

from agentreplay_core._noting import Notes, wrap_once

log = logging.getLogger("agentreplay.llamaindex")

#: beside a tool's stored output: the events it wrote to the stream, in order
STREAM_EVENTS = "stream_events"

_written: Notes[str] = Notes("agentreplay_tool_stream_events")


def watch(ctx: Any) -> Token[list[str] | None]:
    """Start noting the events written to the stream in this context (a tool's call)."""
    wrap_once(type(ctx), "write_event_to_stream", _noting)
    wrap_once(type(ctx), "wait_for_event", _asking)
    return _written.start()


def written(token: Token[list[str] | None]) -> list[str] | None:
    """The events noted since `watch` gave `token` (None: none), and stop noting them."""
    return _written.stop(token)


def _asking(original: Callable[..., Any]) -> Callable[..., Any]:
    if not inspect.iscoroutinefunction(original):  # not the method this knows
        return original

    @functools.wraps(original)
    async def wait_for_event(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _written.pause()
        try:
            return await original(self, *args, **kwargs)
        finally:
            _written.resume(token)
    return wait_for_event


def _noting(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def write_event_to_stream(self: Any, ev: Any, *args: Any, **kwargs: Any) -> Any:
        events = _written.current
        if events is not None and ev is not None:
            try:  # encoded now: the program may change the event once it is written
                events.append(str(JsonSerializer().serialize(ev)))
            except Exception:
                log.warning("agentreplay: an event of type %s a tool wrote to the workflow's "
                            "stream cannot be encoded; a replay will not write it",
                            type(ev).__name__)
        return original(self, ev, *args, **kwargs)
    return write_event_to_stream


def write_again(ctx: Any, events: list[Any], tool: str) -> None:
    """Write recorded `events` to `ctx`'s stream, each as the class it was recorded as."""
    serializer = JsonSerializer()
    for encoded in events:
        event = _rebuilt(serializer, encoded)
        if event is None:
            log.warning("agentreplay: tool %r wrote an event to the workflow's stream when "
                        "recorded whose class this program has not imported (or that is not "
                        "an Event): the replay does not write it", tool)
        else:
            ctx.write_event_to_stream(event)


def _rebuilt(serializer: JsonSerializer, encoded: Any) -> Event | None:
    if not isinstance(encoded, str):
        return None
    try:
        name = json.loads(encoded).get("qualified_name")
        module, _, class_name = str(name).rpartition(".")
        cls = getattr(sys.modules.get(module), class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, Event)):
            return None
        event = serializer.deserialize(encoded)
    except Exception:
        return None
    return event if isinstance(event, Event) else None
