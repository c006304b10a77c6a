"""What a tool (or retriever) run live in a fork does beside its result: the custom events it
dispatches and what it writes to LangGraph's stream. Both reach the caller as the tool makes
them (the events through the stand-in, which dispatches them from its own run; the writes
directly), and both are recorded into the fork's step, beside its result or its error, as a
recording stores them, so the fork replays them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from agentreplay_core._recorded_errors import keep_beside
from agentreplay_langchain._custom_events import CUSTOM_EVENTS, EventCollector
from agentreplay_langchain._stream_writes import noted, store_writes_into, watch


class LiveEffects:
    """Collects while the live tool runs (`collecting`), then adds to its output (`into`)."""

    def __init__(self) -> None:
        #: the tool's only callback handler
        self.events = EventCollector()
        self._writes: list[Any] | None = None

    def _effects(self) -> dict[str, Any]:
        effects: dict[str, Any] = {}
        if self.events.events:
            effects[CUSTOM_EVENTS] = self.events.events
        return store_writes_into(effects, self._writes) if self._writes else effects

    @contextlib.contextmanager
    def collecting(self) -> Iterator[None]:
        """While the tool runs; an error it raises keeps the effects beside it."""
        token = watch()
        try:
            yield
        except BaseException as error:
            self._writes = noted(token) if token is not None else None
            effects = self._effects()
            if effects:
                keep_beside(error, effects)
            raise
        self._writes = noted(token) if token is not None else None

    def into(self, output: dict[str, Any]) -> dict[str, Any]:
        """`output` (the fork's step of the tool) with the effects collected."""
        output.update(self._effects())
        return output
