"""`replay_tools`: tools with the originals' metadata that serve recorded results."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any

from llama_index.core.async_utils import asyncio_run
from llama_index.core.tools.types import AsyncBaseTool, BaseTool, ToolMetadata, ToolOutput

from agentreplay_core import Player
from agentreplay_core._player import checked_player
from agentreplay_core._recorded_errors import FAILURES, recorded_error
from agentreplay_llamaindex._context_tools import TakesContext, made_for
from agentreplay_llamaindex._convert import (
    tool_output_from_storage,
    tool_request,
)
from agentreplay_llamaindex._live import aserve, serve
from agentreplay_llamaindex._stream_events import STREAM_EVENTS, watch, write_again, written
from agentreplay_llamaindex._tracking import replay_path
from agentreplay_llamaindex._waiting import Suspended, is_suspension, wait_again
from agentreplay_llamaindex._workflow_state import (
    WORKFLOW_STATE,
    apply,
    context_in,
    snapshot,
    tool_step_output,
)

log = logging.getLogger("agentreplay.llamaindex")


class ReplayTool(AsyncBaseTool):
    """A tool that returns the recorded `ToolOutput` (or raises the recorded error) without
    running anything. What the original tool called inside (a query engine's LLM calls)
    counts as replayed with it.

    With `live` (the original tool) and `store.replay(..., on_divergence="live")`, calls from
    the first divergence on run the original and are recorded into the forked run.

    What the recorded tool wrote to the workflow's state (`ctx.store`) is written again into
    the Context the call is given (`replay_tools` makes the stand-in of a tool that takes the
    Context one that agents pass it to).
    """

    def __init__(self, player: Player, metadata: ToolMetadata,
                 live: BaseTool | None = None) -> None:
        self._player = checked_player(player, "ReplayTool")
        self._metadata = metadata
        self._live = live

    @property
    def metadata(self) -> ToolMetadata:
        return self._metadata

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        tool = self._live
        live = self._going_live(args, kwargs)

        def run() -> ToolOutput:
            assert tool is not None
            with live.noting():
                return tool(*args, **kwargs)

        served: list[Mapping[str, Any]] = []
        try:
            try:
                return serve(
                    self._player, "tool", self._metadata.get_name(), tool_request(args, kwargs),
                    live=None if tool is None else run, to_step=live.to_step,
                    from_step=_keeping(served), path=replay_path())
            except Suspended as suspended:
                changing = self._suspend(suspended.stored, served, args, kwargs)
                if changing is not None:
                    asyncio_run(changing)
                asyncio_run(wait_again(context_in((args, kwargs)), suspended.stored,
                                       self._metadata.get_name()))
                return self.call(*args, **kwargs)  # the Context held the answer already
        except FAILURES as exc:  # a replayed Ctrl-C left its effects too
            served[:] = _recorded_effects(exc)
            raise
        finally:  # what the tool wrote before it returned or raised
            changing = self._write_back(served, args, kwargs)
            if changing is not None:
                asyncio_run(changing)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        tool = self._live
        live = self._going_live(args, kwargs)

        async def run() -> ToolOutput:
            assert tool is not None
            with live.noting():
                if isinstance(tool, AsyncBaseTool):
                    return await tool.acall(*args, **kwargs)
                return tool(*args, **kwargs)

        served: list[Mapping[str, Any]] = []
        try:
            try:
                return await aserve(
                    self._player, "tool", self._metadata.get_name(), tool_request(args, kwargs),
                    live=None if tool is None else run, to_step=live.to_step,
                    from_step=_keeping(served), path=replay_path())
            except Suspended as suspended:
                changing = self._suspend(suspended.stored, served, args, kwargs)
                if changing is not None:
                    await changing
                await wait_again(context_in((args, kwargs)), suspended.stored,
                                 self._metadata.get_name())
                return await self.acall(*args, **kwargs)  # the Context held the answer already
        except FAILURES as exc:  # a replayed Ctrl-C left its effects too
            served[:] = _recorded_effects(exc)
            raise
        finally:
            changing = self._write_back(served, args, kwargs)
            if changing is not None:
                await changing

    def _suspend(self, stored: Mapping[str, Any], served: list[Mapping[str, Any]],
                 args: tuple[Any, ...], kwargs: dict[str, Any]
                 ) -> Coroutine[Any, Any, None] | None:
        """The recorded run ended with this call suspended, waiting for an event (a server
        resumes it in another request, another run): the stand-in waits again as it did, so
        the workflow suspends here too. Write what the call wrote before it waited (before the
        question the wait streams, as live); the write of its state changes, to await, if
        any."""
        if context_in((args, kwargs)) is None:
            raise RuntimeError(
                f"agentreplay: run {self._player.run_id}: tool {self._metadata.get_name()!r} "
                "was suspended waiting for an event when recorded, but its replay stand-in was "
                "given no workflow Context to wait in (make the stand-in with replay_tools(), "
                "which agents pass the Context to)")
        served.clear()  # written here, not again when the call ends
        return self._write_back([stored], args, kwargs)

    def _going_live(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _LiveCall:
        """How a call that goes live is recorded into the forked run: as a recording records
        it, with what it wrote to the workflow's state (against the state before the call,
        taken only where the replay can go live) and to its stream."""
        ctx = context_in((args, kwargs)) \
            if self._live is not None and self._player.can_go_live else None
        return _LiveCall(ctx)

    def _write_back(self, served: list[Mapping[str, Any]], args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Coroutine[Any, Any, None] | None:
        """Write the events the served step's tool wrote to the workflow's stream when
        recorded into the call's Context; the write of its state changes, to await, if any.
        (A call that went live did both itself.)"""
        stored = served[0] if served else None
        if not stored or not (stored.get(WORKFLOW_STATE) or stored.get(STREAM_EVENTS)):
            return None
        ctx = context_in((args, kwargs))
        if ctx is None:
            did = " and ".join(what for key, what in (
                (WORKFLOW_STATE, "changed the workflow state"),
                (STREAM_EVENTS, "wrote events to the workflow's stream")) if stored.get(key))
            log.warning(
                "agentreplay: run %s: tool %r %s when recorded, but its replay stand-in was "
                "given no workflow Context: the replay differs from here on (make the "
                "stand-in with replay_tools(), which agents pass the Context to)",
                self._player.run_id, self._metadata.get_name(), did)
            return None
        write_again(ctx, stored.get(STREAM_EVENTS) or [], self._metadata.get_name())
        changes = stored.get(WORKFLOW_STATE)
        return apply(ctx, changes) if changes else None


class _LiveCall:
    """A call that may go live in a fork: its Context's state before it, and what it writes
    to the stream while it runs, for the step the fork records."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        before = snapshot(ctx) if ctx is not None else None
        self._state = (ctx, before) if before is not None else None
        self._events: list[str] | None = None

    @contextlib.contextmanager
    def noting(self) -> Iterator[None]:
        if self._ctx is None:
            yield
            return
        token = watch(self._ctx)
        try:
            yield
        finally:
            self._events = written(token)

    def to_step(self, output: ToolOutput) -> dict[str, Any]:
        return tool_step_output(output, self._state, self._events)


def _recorded_effects(exc: BaseException) -> list[Mapping[str, Any]]:
    """The recorded error `exc` was raised again from, which holds what the tool wrote to the
    workflow's state and stream before it raised (nothing for a divergence)."""
    record = recorded_error(exc)
    return [record] if record is not None else []


def _keeping(served: list[Mapping[str, Any]]) -> Callable[[Mapping[str, Any]], ToolOutput]:
    """`tool_output_from_storage` that also keeps the step it read."""
    def read(stored: Mapping[str, Any]) -> ToolOutput:
        served.append(stored)
        if is_suspension(stored):
            raise Suspended(stored)
        return tool_output_from_storage(stored)
    return read


class ReplayContextTool(ReplayTool, TakesContext):
    """A `ReplayTool` for a tool that takes the workflow Context: agents pass the Context
    only to a `FunctionTool` that says it takes one, and this one says so."""


def replay_tools(player: Player, tools: Sequence[BaseTool], *, live: bool = True
                 ) -> list[ReplayTool]:
    """Replay stand-ins for `tools`: same name, description and schema, recorded results.

    The originals run only in a replay opened with `on_divergence="live"`, from the first
    divergence on (`live=False`: never). The stand-in of a tool that takes the workflow
    Context takes it too, and writes what the tool wrote to the workflow's state.
    """
    return [made_for(tool, ReplayTool, ReplayContextTool, player, tool.metadata,
                     tool if live else None) for tool in tools]
