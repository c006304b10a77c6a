"""Turning a recorded model step back into what LangChain expects from a model."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import operator
from collections.abc import Callable, Iterator
from typing import Any, cast

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    BaseMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.messages.utils import message_chunk_to_message
from langchain_core.outputs import (
    ChatGeneration,
    ChatGenerationChunk,
    Generation,
    GenerationChunk,
)
from langchain_core.runnables.config import var_child_runnable_config

from agentreplay_core import Player, ReplayDivergence, Step, decode
from agentreplay_core._codec import TAG
from agentreplay_core._divergence import abandoned_stream
from agentreplay_core._key_order import in_key_order, keep_key_order
from agentreplay_core._recorded_errors import error_from_record, is_cancellation
from agentreplay_langchain._construct import chat_generation
from agentreplay_langchain._convert import (
    EVENTS,
    EVENTS_ORDER,
    LLM_OUTPUT_ORDER,
    dump,
    revive,
    revive_encoded,
    storable,
)
from agentreplay_langchain._instrument import untracked


class Encoded:
    """A part of a recorded output still as the codec stored it: revived (and so decoded) by
    the function that serves it, once."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


#: the parts of a model step's output that hold LangChain objects
_REVIVED_PARTS = ("generations", "chunks")


def step_output(step: Step) -> Any:
    """A recorded model step's output for this call: its generations and chunks left
    `Encoded` for the serving functions below, the rest decoded, and the recorded model's
    description (class, parameters), which a replay does not use, left out."""
    output = step.output
    if type(output) is not dict or TAG in output:
        return decode(output)
    served = {key: Encoded(value) if key in _REVIVED_PARTS else decode(value)
              for key, value in output.items() if key != "model"}
    if type(served.get("llm_output")) is dict:  # in the recorded order, or sorted
        served["llm_output"] = in_key_order(served["llm_output"], served.get(LLM_OUTPUT_ORDER))
    return served


def _revived(part: Any) -> Any:
    """A part of an output as `step_output` or a live call gave it, revived."""
    if isinstance(part, Encoded):
        return revive_encoded(part.value)
    return revive(part, fresh=True)


def error_of(step: Step, output: dict[str, Any], served: int | None = None,
             unit: str = "chunk") -> BaseException:
    """The exception a recorded failed model call raises again (after `served` chunks or
    events of its stream)."""
    if output.get("abandoned"):
        return abandoned_stream(step, served, unit)
    # a live call of a forked run recorded its error as the step's whole output
    return error_from_record(output.get("error", output))


async def wait_if_cancelled(output: dict[str, Any]) -> None:
    """A call that was cancelled while recording (a timeout) never completes here either, so
    the caller's same timeout fires again."""
    if is_cancellation(output.get("error")):
        await asyncio.Event().wait()


def served_or_live(player: Player, name: str, request: Callable[[], Any], path: str | None,
                   live: Callable[[], Callable[[], dict[str, Any]]] | None,
                   live_request: Callable[[], Any]) -> tuple[Step | None, Any]:
    """A replay model's call: its recorded step and output; or, with a live counterpart in a
    replay that may fork, from the first divergence on the live call's output (no step),
    recorded into the fork under `live_request()` (a copy: recorded after the call)."""
    if live is None or player.fork_starter is None or player.fork is None:
        try:
            step = player.next_step("llm", name, request(), path=path)
            return step, step_output(step)
        except ReplayDivergence:
            if live is None or player.fork_starter is None:
                raise
    return None, player.next("llm", name, live_request(), path=path, live=live())


def live_call(model: Any, messages: list[BaseMessage], stop: list[str] | None,
              kwargs: dict[str, Any], *, streamed: bool) -> Callable[[], dict[str, Any]]:
    """The call of the live model for a replay that went live: the same messages, stop and
    bound tools, its answer in the form the recording handler stores (so that the forked run
    replays like any recording)."""
    def call() -> dict[str, Any]:
        options = dict(kwargs)
        tools, choice = options.pop("tools", None), options.pop("tool_choice", None)
        runnable = model.bind_tools(tools, **({"tool_choice": choice} if choice else {})) \
            if tools else model
        if options:
            runnable = runnable.bind(**options)
        output: dict[str, Any] = {"model": {"class": type(model).__qualname__}}
        with _alone():
            if streamed:
                chunks = list(runnable.stream(messages, stop=stop))
                output["chunks"] = [dump(ChatGenerationChunk(message=c)) for c in chunks]
                answer = message_chunk_to_message(functools.reduce(operator.add, chunks))
            else:
                answer = runnable.invoke(messages, stop=stop)
        output["generations"] = [dump(ChatGeneration(message=answer))]
        return output
    return call


def live_text_call(model: Any, prompt: str, stop: list[str] | None, kwargs: dict[str, Any],
                   *, streamed: bool) -> Callable[[], dict[str, Any]]:
    """`live_call` for a text-completion LLM: its answer (and, streamed, its tokens) in the
    form the recording handler stores."""
    def call() -> dict[str, Any]:
        output: dict[str, Any] = {"model": {"class": type(model).__qualname__}}
        with _alone():
            if streamed:
                tokens = list(model.stream(prompt, stop=stop, **kwargs))
                output["chunks"] = [dump(GenerationChunk(text=t)) for t in tokens]
                output["generations"] = [dump(Generation(text="".join(tokens)))]
            else:
                result = model.generate([prompt], stop=stop, **kwargs)
                output["generations"] = [dump(g) for g in result.generations[0]]
                output["llm_output"] = storable(result.llm_output)
                keep_key_order(output, LLM_OUTPUT_ORDER, output["llm_output"])
        return output
    return call


@contextlib.contextmanager
def _alone() -> Iterator[None]:
    """A live model's run with no callbacks at all: the replay model's own run reports its
    answer to the caller's handlers, and it is neither tracked nor a child of the run it is
    called in (LangChain hands a run the callbacks of the one around it, through the context),
    so what it draws sits inside the fork's step of the call. The rest of the config around it
    (`configurable`, for a model whose fields it sets) stays."""
    around = var_child_runnable_config.get()
    kept: Any = {k: v for k, v in around.items() if k != "callbacks"} if around else None
    token = var_child_runnable_config.set(kept)
    try:
        with untracked():
            yield
    finally:
        var_child_runnable_config.reset(token)


#: message classes that are never stream chunks (a generation holding one is served as is)
_WHOLE_MESSAGES = frozenset({AIMessage, HumanMessage, SystemMessage, ToolMessage, ChatMessage,
                             FunctionMessage})


def chat_generations(output: dict[str, Any]) -> list[ChatGeneration]:
    """The recorded generations as a model's `_generate` returns them (whole messages, also
    when the recorded call streamed and LangChain stored the merged chunk).

    `output` (here and in the functions below) is what `step_output` gave for this call, or
    a live call's output: each of its parts is revived once, into new objects.
    """
    result: list[ChatGeneration] = []
    for generation in _revived(output.get("generations", [])):
        message = generation.message
        if type(generation) is ChatGeneration and type(message) in _WHOLE_MESSAGES:
            result.append(generation)
            continue
        if isinstance(message, BaseMessageChunk):
            message = message_chunk_to_message(message)
        result.append(chat_generation(message, generation.generation_info))
    return result


#: langchain-core 1.x marks a stream's last chunk; `stream()` appends an empty one with a fresh
#: run id unless the model's last chunk says it is the last
_LAST_CHUNK: dict[str, Any] = (
    {"chunk_position": "last"} if "chunk_position" in AIMessageChunk.model_fields else {})


def _chunk_of_message(message: BaseMessage) -> AIMessageChunk:
    """One stream chunk carrying a whole recorded message, tool calls included (LangChain's own
    fakes drop them when streaming), marked as the stream's last chunk."""
    if not isinstance(message, AIMessage):
        return AIMessageChunk(content=message.content, id=message.id, **_LAST_CHUNK)
    # Invalid tool calls are left out: LangChain re-parses the arguments of streamed calls
    # leniently, so a call recorded as invalid (cut-off JSON) would come back as a valid one.
    calls = [tool_call_chunk(name=call["name"], args=json.dumps(call["args"]),
                             id=call.get("id"), index=index)
             for index, call in enumerate(message.tool_calls)]
    return AIMessageChunk(
        content=message.content,
        id=message.id,
        name=message.name,
        additional_kwargs=message.additional_kwargs,
        response_metadata=message.response_metadata,
        usage_metadata=message.usage_metadata,
        tool_call_chunks=calls,
        **_LAST_CHUNK,
    )


def chat_chunks(output: dict[str, Any]) -> list[ChatGenerationChunk]:
    """The recorded stream chunks, or one chunk holding the whole result of a call that was
    recorded without streaming."""
    stored = output.get("chunks")
    if stored is not None:
        return [ChatGenerationChunk(message=AIMessageChunk(content=item["token"]))
                if isinstance(item, dict) and set(item) == {"token"} else item
                for item in _revived(stored)]
    return [ChatGenerationChunk(message=_chunk_of_message(g.message),
                                generation_info=_chunk_info(g))
            for g in chat_generations(output)[:1]]


def _chunk_info(generation: ChatGeneration) -> dict[str, Any] | None:
    """The generation info of the one chunk that carries a whole recorded message. LangChain's
    `stream()` puts it in front of the chunk's response metadata (`{**info, **metadata}`),
    while the recorded metadata holds all of it already, where the recorded model's call put
    it (after `llm_output`'s keys): then it is left out, and the metadata keeps its order."""
    info = generation.generation_info
    metadata = generation.message.response_metadata
    if info and type(metadata) is dict and all(key in metadata for key in info) and \
            list({**info, **metadata}) != list(metadata):
        return None
    return info


class _Cut(Exception):
    """Where a recorded stream failed: the bridge must not finish the message."""


def protocol_events(output: dict[str, Any], message_id: str, *, failed: bool) -> list[Any]:
    """A model step's protocol events (langchain-core 1.8's `stream_events(version="v3")`):
    the recorded ones, or, for a call recorded without them, the events LangChain makes from
    its chunks (or its whole message), with the recorded message id. For a call that failed,
    what came before the error."""
    if EVENTS in output:
        return cast("list[Any]", in_key_order(output[EVENTS], output.get(EVENTS_ORDER)))
    # (only langchain-core versions that have the bridge ask a model for events)
    from langchain_core.language_models._compat_bridge import chunks_to_events

    chunks = chat_chunks(output)

    def source() -> Iterator[ChatGenerationChunk]:
        yield from chunks
        if failed:
            raise _Cut

    recorded_id = next((c.message.id for c in chunks if c.message.id), None)
    events: list[Any] = []
    try:
        for event in chunks_to_events(source(), message_id=recorded_id or message_id):
            events.append(event)
    except _Cut:
        pass
    return events


def text_generations(output: dict[str, Any]) -> list[Generation]:
    result = []
    for generation in _revived(output.get("generations", [])):
        if isinstance(generation, GenerationChunk):
            generation = Generation(text=generation.text,
                                    generation_info=generation.generation_info)
        result.append(generation)
    return result


def text_chunks(output: dict[str, Any]) -> list[GenerationChunk]:
    stored = output.get("chunks")
    if stored is not None:
        return [GenerationChunk(text=item["token"])
                if isinstance(item, dict) and set(item) == {"token"} else item
                for item in _revived(stored)]
    return [GenerationChunk(text=g.text, generation_info=g.generation_info)
            for g in text_generations(output)[:1]]
