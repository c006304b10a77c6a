"""Fork and continue for `ReplayLLM`: its calls after a divergence go to the live LLM.

Each live call is recorded into the forked run exactly as the recording handlers record a
call (same request, output, stream chunks, errors), so the forked run replays like any other.
The step keeps the name `ReplayLLM` replays: the whole forked run is one model's slot in the
agent, which one `ReplayLLM` serves; the live model's own metadata is in the step's request.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Generator
from typing import Any

from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM

from agentreplay_core import Recorder
from agentreplay_core._keys import at_path
from agentreplay_core._recorded_errors import (
    FAILURES,
    FAILURES_AND_CANCELLATION,
    error_to_record,
)
from agentreplay_llamaindex._llm_calls import (
    TOOL_CALLS_REQUIRED,
    LlmCall,
    chunk_item,
    new_call,
    tool_calls_required,
    write_call,
    write_error,
)

_END = object()

#: the key under which `ReplayLLM._prepare_chat_with_tools` passes the tool-call options to
#: its chat methods, so that a live LLM can build its own wire format from the tool objects
TOOL_OPTIONS = "_agentreplay_tool_options"

#: what `ReplayLLM.get_tool_calls_from_response` serves for one response: its recorded
#: `tool_calls`, and `TOOL_CALLS_REQUIRED` where the recording holds it
Reading = dict[str, Any]
Remember = Callable[[Any, Reading], None]


class LiveLLM:
    """Makes `ReplayLLM`'s calls on the live LLM and records them into the forked run.

    Args:
        llm: the live LLM.
        name: the model name the calls are recorded under (the one `ReplayLLM` replays).
        remember: where the responses go for `ReplayLLM.get_tool_calls_from_response`.
    """

    def __init__(self, llm: LLM, name: str, remember: Remember) -> None:
        self.llm = llm
        self.name = name
        self._remember = remember

    def _begin(self, mode: str, payload: Any, kwargs: dict[str, Any], path: str,
               stream: bool) -> tuple[LlmCall, Any, dict[str, Any]]:
        """(the call record, the live payload, the live kwargs)."""
        kwargs = dict(kwargs)
        options = kwargs.pop(TOOL_OPTIONS, None)
        if mode == "chat" and options is not None:
            if not isinstance(self.llm, FunctionCallingLLM):
                raise TypeError(
                    f"the agent asked ReplayLLM({self.name!r}) for tool calls after the replay "
                    f"went live, but its live LLM ({type(self.llm).__name__}) is not a "
                    "FunctionCallingLLM; pass the model the run was recorded with as live=")
            # the live integration turns the tool objects into its own wire format
            prepared = self.llm._prepare_chat_with_tools_compat(
                kwargs.pop("tools", []), chat_history=list(payload), **options, **kwargs)
            payload = prepared.pop("messages")
            kwargs = prepared
        return new_call(self.llm, mode, payload, kwargs, path, name=self.name,
                        stream=stream), payload, kwargs

    def _finished(self, fork: Recorder, call: LlmCall, response: Any) -> Any:
        output = write_call(fork, call, response=response)
        self._remember(response, {k: output[k] for k in ("tool_calls", TOOL_CALLS_REQUIRED)
                                  if k in output})
        return response

    def call(self, fork: Recorder, method: str, mode: str, payload: Any,
             kwargs: dict[str, Any], path: str, *positional: Any) -> Any:
        """`llm.<method>(payload, *positional, **kwargs)`, recorded; streams are relayed."""
        stream = method.startswith("stream")
        call, payload, live_kwargs = self._begin(mode, payload, kwargs, path, stream)
        try:
            with at_path(path):  # what the model draws sits inside its step, as recorded
                result = getattr(self.llm, method)(payload, *positional, **live_kwargs)
        except FAILURES as err:  # a Ctrl-C too, as the handlers record it
            write_error(fork, call, err)
            raise
        if stream:
            return self._relay(fork, call, result)
        return self._finished(fork, call, result)

    async def acall(self, fork: Recorder, method: str, mode: str, payload: Any,
                    kwargs: dict[str, Any], path: str, *positional: Any) -> Any:
        """`await llm.<method>(...)`, recorded; async streams are relayed."""
        stream = method.startswith("astream")
        call, payload, live_kwargs = self._begin(mode, payload, kwargs, path, stream)
        try:
            with at_path(path):
                result = await getattr(self.llm, method)(payload, *positional, **live_kwargs)
        except FAILURES_AND_CANCELLATION as err:
            write_error(fork, call, err)
            raise
        if stream:
            return self._arelay(fork, call, result)
        return self._finished(fork, call, result)

    def _chunk(self, call: LlmCall, chunk: Any) -> None:
        item = chunk_item(call, chunk)
        call.chunks.append(item)
        reading: Reading = {"tool_calls": item.get("tool_calls")}
        if reading["tool_calls"] == []:
            # the live model is at hand: ask it what it does without tool calls, chunk by
            # chunk (the recording stores that once per step, for the final response)
            reading[TOOL_CALLS_REQUIRED] = tool_calls_required(call.instance, chunk)
        self._remember(chunk, reading)

    def _relay(self, fork: Recorder, call: LlmCall, chunks: Any
               ) -> Generator[Any, None, None]:
        # as the handlers do: a stream the host closes early is recorded as abandoned, a
        # failing one with its error after the chunks it produced
        last = None
        chunks = iter(chunks)
        try:
            while True:
                # the path only while the model makes a chunk: the host's code between chunks
                # runs where it is
                with at_path(call.path):
                    chunk = next(chunks, _END)
                if chunk is _END:
                    break
                self._chunk(call, chunk)
                last = chunk
                yield chunk
        except GeneratorExit:
            write_call(fork, call, response=None, abandoned=True)
            raise
        except FAILURES as err:
            write_call(fork, call, response=None, error=error_to_record(err))
            raise
        write_call(fork, call, response=last)

    async def _arelay(self, fork: Recorder, call: LlmCall, chunks: Any
                      ) -> AsyncGenerator[Any, None]:
        last = None
        chunks = aiter(chunks)
        try:
            while True:
                with at_path(call.path):
                    chunk = await anext(chunks, _END)
                if chunk is _END:
                    break
                self._chunk(call, chunk)
                last = chunk
                yield chunk
        except GeneratorExit:
            write_call(fork, call, response=None, abandoned=True)
            raise
        except FAILURES_AND_CANCELLATION as err:
            write_call(fork, call, response=None, error=error_to_record(err))
            raise
        write_call(fork, call, response=last)


def tool_options(verbose: bool, allow_parallel_tool_calls: bool, tool_required: bool
                 ) -> dict[str, Any]:
    return {"verbose": verbose, "allow_parallel_tool_calls": allow_parallel_tool_calls,
            "tool_required": tool_required}

