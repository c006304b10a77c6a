"""ReplayTool: a tool with the original's name, description and schema that answers from the
recording and never runs the original."""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForToolRun,
    CallbackManagerForToolRun,
)
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, Tool
from pydantic import ConfigDict, Field

from agentreplay_core import Player
from agentreplay_core._recorded_errors import FAILURES, error_to_record, recorded_error
from agentreplay_langchain._compat import keep_signatures, tool_start_inputs
from agentreplay_langchain._convert import tool_output, tool_result
from agentreplay_langchain._custom_events import adispatch_again, dispatch_again, error_events
from agentreplay_langchain._instrument import untracked
from agentreplay_langchain._interrupts import (
    answer_again,
    apause_again,
    call_key,
    pause_again,
    resume_answers,
)
from agentreplay_langchain._live_effects import LiveEffects
from agentreplay_langchain._requests import tool_request
from agentreplay_langchain._store_writes import STORE_WRITES, awrite_again, write_again
from agentreplay_langchain._store_writes import noted as store_writes
from agentreplay_langchain._store_writes import watch as watch_store
from agentreplay_langchain._stream_writes import install as install_stream_noting
from agentreplay_langchain._stream_writes import write_again as stream_again
from agentreplay_langchain._tree import call_id_of, tracked_path


@dataclass
class _Invocation:
    request: Any
    tool_input: Any = None
    tool_call_id: str | None = None
    served: bool = False
    live: bool = False
    #: what the served (not live) call wrote to the graph's store when recorded
    store_writes: Any = None


_call_paths: weakref.WeakKeyDictionary[Player, dict[str, str]] = weakref.WeakKeyDictionary()


def call_paths(player: Player) -> dict[str, str]:
    """The recorded path of each tool call id, for replays nothing tracks: the replayed model
    gives a call the id it had, and identical parallel calls (same tool, same arguments) are
    told apart by it, whatever order their threads reach the player in. Recordings made on
    langchain-core 1.2 or later hold the id in the path (`tool:weather[call:...]`)."""
    found = _call_paths.get(player)
    if found is None:
        found = {}
        for step in player.steps:
            call_id = call_id_of(step.path) if step.kind == "tool" else None
            if call_id is not None:
                found.setdefault(call_id, step.path)
        _call_paths[player] = found
    return found


# The request is taken from the raw tool input in run()/arun(), as on_tool_start saw it while
# recording; _run only gets arguments after validation (defaults filled in).
_invocation: ContextVar[_Invocation | None] = ContextVar("agentreplay_tool_call", default=None)

#: BaseTool fields a replay copies from the original (`extras` exists from langchain-core 1.x)
_COPIED = tuple(f for f in ("return_direct", "response_format", "handle_validation_error",
                            "handle_tool_error", "tags", "metadata", "extras")
                if f in BaseTool.model_fields)


@contextlib.contextmanager
def _running_live(invocation: _Invocation) -> Iterator[list[Any]]:
    """While the original runs in a replay gone live (it writes to the store itself): what it
    writes to the graph's store, in the list yielded, once it has run. (Its run is not
    tracked: it runs at the stand-in's path, what it draws inside the fork's step of it.)"""
    invocation.live = True
    token = watch_store(invocation.tool_input)
    writes: list[Any] = [None]
    try:
        with untracked():
            yield writes
    finally:
        writes[0] = store_writes(token) if token is not None else None


class ReplayTool(BaseTool):
    """Serves a tool's recorded results (content, artifact, status, errors).

    Build one with `ReplayTool.from_tool(original, player)` or `replay_tools(player, tools)`.
    A tool call gets the recorded `ToolMessage` back whole (status, artifact, name, id and
    metadata as recorded, handled errors included, so no error handler runs again); a recorded
    exception is raised again.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    player: Player = Field(exclude=True)
    #: the original tool, run only from the first divergence on of a replay opened with
    #: `on_divergence="live"` (its results are recorded into the forked run)
    live: BaseTool | None = Field(default=None, exclude=True)

    @functools.cached_property
    def _injected_args_keys(self) -> frozenset[str]:
        # The arguments LangGraph injects that are not part of the tool's schema (a
        # `runtime: ToolRuntime` parameter of a tool with an explicit `args_schema`, as
        # `TodoListMiddleware`'s `write_todos`): they are found in the original's signature,
        # which a stand-in lacks, and must be left out of the request as `on_tool_start`
        # left them out while recording (and handed to the original in a fork).
        keys = getattr(self.live, "_injected_args_keys", None)
        return keys if isinstance(keys, frozenset) else frozenset()

    @classmethod
    def from_tool(cls, tool: BaseTool, player: Player) -> ReplayTool:
        if isinstance(tool, ReplayTool):
            return tool
        install_stream_noting()  # what the original writes in a fork is noted
        fields: dict[str, Any] = {f: getattr(tool, f) for f in _COPIED}
        fields.update(name=tool.name, description=tool.description, player=player, live=tool)
        if isinstance(tool, Tool) and not tool.args_schema:
            # a legacy single-input tool: models see one string argument `__arg1`, which only
            # a `Tool` shows them; its input handling is the same as the original's
            return _ReplaySingleInputTool(func=None, **fields)
        # a tool without args_schema has the schema of its `_run` signature: keep that one, so
        # that the model sees the same tool and arguments are validated the same way
        schema = tool.args_schema if tool.args_schema is not None else tool.get_input_schema()
        return cls(args_schema=schema, **fields)

    def _call(self, run_manager: CallbackManagerForToolRun | AsyncCallbackManagerForToolRun
              | None, args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[_Invocation, str | None]:
        """This call (its request as on_tool_start saw it) and its recorded path."""
        invocation = _invocation.get()
        if invocation is None:  # _run called directly: take the arguments as they came
            given = args[0] if len(args) == 1 and not kwargs else kwargs
            invocation = _Invocation(tool_request(given, resume_answers(watch=False)),
                                     tool_input=given)
        invocation.served = True
        path = tracked_path(run_manager.handlers, run_manager.run_id) if run_manager else None
        if path is None and invocation.tool_call_id is not None:
            path = call_paths(self.player).get(invocation.tool_call_id)
        return invocation, path

    def _serve(self, run_manager: CallbackManagerForToolRun | None, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
        invocation, path = self._call(run_manager, args, kwargs)
        live = self._live_call(invocation) if self.live is not None else None
        try:
            output = self.player.next("tool", self.name, invocation.request, path=path,
                                      live=live)
        except FAILURES as replayed:  # an interrupt replayed too
            dispatch_again(run_manager, error_events(replayed))
            stream_again(recorded_error(replayed))
            # a LangGraph interrupt pauses the graph as it did
            pause_again(replayed, self.player, self._call_key(invocation))
            raise
        self._answered_again(invocation)
        dispatch_again(run_manager, output)  # (a live run's too: it had no callbacks)
        if not invocation.live:  # (a live run wrote to the stream itself)
            stream_again(output)
        return self._result(invocation, output)

    async def _aserve(self, run_manager: AsyncCallbackManagerForToolRun | None,
                      args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # an async tool goes live through its async API: a coroutine-only tool has no other
        invocation, path = self._call(run_manager, args, kwargs)
        live = self._alive_call(invocation) if self.live is not None else None
        try:
            output = await self.player.anext("tool", self.name, invocation.request, path=path,
                                             live=live)
        except FAILURES as replayed:  # an interrupt replayed too
            await adispatch_again(run_manager, error_events(replayed))
            stream_again(recorded_error(replayed))
            await apause_again(replayed, self.player, self._call_key(invocation))
            raise
        self._answered_again(invocation)
        await adispatch_again(run_manager, output)
        if not invocation.live:
            stream_again(output)
        return self._result(invocation, output)

    def _call_key(self, invocation: _Invocation) -> Any:
        request = invocation.request
        tool_input = request.get("input") if isinstance(request, dict) else request
        return call_key(self.name, invocation.tool_call_id, tool_input)

    def _answered_again(self, invocation: _Invocation) -> None:
        """A served call that paused before went through its answered interrupts again, so
        that the next `interrupt` of its LangGraph task takes the answer meant for it (a live
        run made its own `interrupt` calls)."""
        if not invocation.live:
            answer_again(self.player, self._call_key(invocation))

    def _result(self, invocation: _Invocation, output: Any) -> Any:
        """What `_run` returns for the served (or live) output of this call."""
        if isinstance(output, dict) and not invocation.live:
            invocation.store_writes = output.get(STORE_WRITES)
        result = tool_result(output)
        artifacts = self.response_format == "content_and_artifact"
        if isinstance(result, ToolMessage):
            if invocation.tool_call_id is not None:
                # BaseTool returns a ToolMessage it gets from _run as it is: the recorded one,
                # answering this call
                result.tool_call_id = invocation.tool_call_id
                return (result, None) if artifacts else result
            # called without a tool call, the tool returned its content (also when handled)
            return (result.content, result.artifact) if artifacts else result.content
        return (result, None) if artifacts else result

    def _live_call(self, invocation: _Invocation) -> Callable[[], dict[str, Any]]:
        """The original's run for a replay that went live, its result in the form the recording
        handler stores (so that the forked run replays like any recording)."""
        tool = self.live
        assert tool is not None

        def call() -> dict[str, Any]:
            effects = LiveEffects()
            with _running_live(invocation) as writes, effects.collecting():
                # no callbacks but a collector of its custom events: this replay tool's own
                # run reports the result (and dispatches the events) to the caller's
                result = tool.run(invocation.tool_input, tool_call_id=invocation.tool_call_id,
                                  callbacks=[effects.events])
            return effects.into(tool_output(result, invocation.tool_call_id, writes[0]))
        return call

    def _alive_call(self, invocation: _Invocation) -> Callable[[], Awaitable[dict[str, Any]]]:
        """`_live_call` through the original's async API."""
        tool = self.live
        assert tool is not None

        async def call() -> dict[str, Any]:
            effects = LiveEffects()
            with _running_live(invocation) as writes, effects.collecting():
                result = await tool.arun(invocation.tool_input,
                                         tool_call_id=invocation.tool_call_id,
                                         callbacks=[effects.events])
            return effects.into(tool_output(result, invocation.tool_call_id, writes[0]))
        return call

    def _run(self, *args: Any, run_manager: CallbackManagerForToolRun | None = None,
             **kwargs: Any) -> Any:
        result = self._serve(run_manager, args, kwargs)
        write_again(self._served_writes(), kwargs, self.name)
        return result

    async def _arun(self, *args: Any, run_manager: AsyncCallbackManagerForToolRun | None = None,
                    **kwargs: Any) -> Any:
        result = await self._aserve(run_manager, args, kwargs)
        await awrite_again(self._served_writes(), kwargs, self.name)
        return result

    @staticmethod
    def _served_writes() -> Any:
        """What the call just served wrote to the graph's store when recorded."""
        invocation = _invocation.get()
        return invocation.store_writes if invocation is not None else None

    def _unserved(self, invocation: _Invocation, output: Callable[[], Any], *,
                  is_error: bool = False) -> None:
        """The call never reached _run (its arguments failed validation, as they did while
        recording): the recorded step of it is used up all the same, or, once a replay went
        live, the call is recorded into the forked run as a recording would have."""
        if invocation.served:
            return
        fork = self.player.fork
        if fork is not None and self.live is not None:
            fork.record("tool", self.name, invocation.request, output(), is_error=is_error)
            return
        self.player.next_step("tool", self.name, invocation.request)

    @contextlib.contextmanager
    def _invoking(self, tool_input: str | dict[str, Any], kwargs: dict[str, Any]
                  ) -> Iterator[_Invocation]:
        """The request as on_tool_start saw it, for `_run`; a call that failed before `_run`
        uses up (or, live, records) its step with the error."""
        invocation = _Invocation(tool_request(tool_start_inputs(self, tool_input),
                                              resume_answers(watch=False)),
                                 tool_input=tool_input, tool_call_id=kwargs.get("tool_call_id"))
        token = _invocation.set(invocation)
        try:
            yield invocation
        except Exception as exc:
            self._unserved(invocation, functools.partial(error_to_record, exc), is_error=True)
            raise
        finally:
            _invocation.reset(token)

    def _returned(self, invocation: _Invocation, result: Any) -> Any:
        self._unserved(invocation, lambda: tool_output(result, invocation.tool_call_id))
        return result

    def run(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        with self._invoking(tool_input, kwargs) as invocation:
            result = super().run(tool_input, *args, **kwargs)
        return self._returned(invocation, result)

    async def arun(self, tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        with self._invoking(tool_input, kwargs) as invocation:
            result = await super().arun(tool_input, *args, **kwargs)
        return self._returned(invocation, result)


keep_signatures(ReplayTool._run, ReplayTool._arun)


class _ReplaySingleInputTool(ReplayTool, Tool):
    """The replay of a legacy single-input `Tool`: a `Tool` to LangChain (schema `__arg1`,
    one positional input), a `ReplayTool` in what it does."""


def replay_tools(player: Player, tools: Sequence[BaseTool]) -> list[ReplayTool]:
    """Replay versions of `tools`, in the same order, for an agent under replay."""
    return [ReplayTool.from_tool(tool, player) for tool in tools]


def replay_tool_call(player: Player) -> Callable[[Any, Callable[[Any], Any]], Any]:
    """A `wrap_tool_call` for LangGraph's `ToolNode` (and agent middleware): runs each call
    through a `ReplayTool` with the original's schema and error handling instead."""
    cache: dict[str, ReplayTool] = {}

    def wrap(request: Any, execute: Callable[[Any], Any]) -> Any:
        return execute(_with_replay_tool(request, player, cache))
    return wrap


def areplay_tool_call(player: Player
                      ) -> Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]:
    """The async `awrap_tool_call` counterpart of `replay_tool_call`."""
    cache: dict[str, ReplayTool] = {}

    async def wrap(request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        return await execute(_with_replay_tool(request, player, cache))
    return wrap


def _with_replay_tool(request: Any, player: Player, cache: dict[str, ReplayTool]) -> Any:
    tool = request.tool
    if tool is None:  # a tool the node does not know: its own error path, as while recording
        return request
    replay = cache.get(tool.name)
    if replay is None:
        replay = cache[tool.name] = ReplayTool.from_tool(tool, player)
    return request.override(tool=replay)
