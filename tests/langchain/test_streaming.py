"""Streaming: a recorded stream replays chunk for chunk, with the same token callbacks."""

from __future__ import annotations

import asyncio
import functools
import operator
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.messages.tool import invalid_tool_call, tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableParallel
from langgraph.graph import END, START, MessagesState, StateGraph

from agentreplay_core import Store
from agentreplay_langchain import (
    AbandonedStreamReplayed,
    RecordingCallbackHandler,
    ReplayChatModel,
    instrument,
)
from tests.langchain.fakes import (
    Counter,
    ScriptedChatModel,
    StreamingChatModel,
    make_tools,
    nonce,
)

PLAN = [[("weather", {"city": "Oslo"}), ("search", {"query": "fjords"})]]
QUESTION = "what is there to do in Oslo today"


class Tokens(BaseCallbackHandler):
    """The token callbacks a user's handler sees: the token and the chunk that came with it."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, dict[str, Any]]] = []

    def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        self.seen.append((token, chunk_view(chunk.message) if chunk is not None else {}))


class AsyncTokens(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.seen: list[tuple[Any, dict[str, Any]]] = []

    async def on_llm_new_token(self, token: Any, *, chunk: Any = None, **kwargs: Any) -> None:
        self.seen.append((token, chunk_view(chunk.message) if chunk is not None else {}))


def chunk_view(message: BaseMessage) -> dict[str, Any]:
    """Everything a consumer reads from a streamed chunk."""
    view: dict[str, Any] = {"content": message.content, "id": message.id,
                            "response_metadata": message.response_metadata}
    if isinstance(message, AIMessageChunk):
        view.update(tool_call_chunks=message.tool_call_chunks, tool_calls=message.tool_calls,
                    usage=message.usage_metadata,
                    position=getattr(message, "chunk_position", None))
    return view


def message_view(message: BaseMessage) -> dict[str, Any]:
    """A whole answer as the agent uses it (chunk or message alike)."""
    assert isinstance(message, AIMessage)
    return {"content": message.content, "id": message.id, "tool_calls": message.tool_calls,
            "usage": message.usage_metadata, "response_metadata": message.response_metadata}


def merged(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    return functools.reduce(operator.add, chunks)


def live_model() -> Any:
    return ScriptedChatModel(plan=PLAN).bind_tools(make_tools(Counter()))


def replay_model(player: Any) -> Any:
    return ReplayChatModel(player=player).bind_tools(make_tools(Counter()))


def test_sync_stream_replays_the_same_chunks_and_token_callbacks(store: Store) -> None:
    live_tokens = Tokens()
    with store.record(name="stream") as rec:
        live = list(live_model().stream(QUESTION, config={
            "callbacks": [RecordingCallbackHandler(rec), live_tokens]}))
    assert rec.stats.internal_errors == 0
    assert any(c.tool_call_chunks for c in live) and any(c.usage_metadata for c in live)
    assert len(live) > 3

    replay_tokens = Tokens()
    with store.replay(rec.run_id) as player:
        replayed = list(replay_model(player).stream(QUESTION,
                                                    config={"callbacks": [replay_tokens]}))
    assert [chunk_view(c) for c in replayed] == [chunk_view(c) for c in live]
    assert replay_tokens.seen == live_tokens.seen
    assert message_view(merged(replayed)) == message_view(merged(live))
    # a second live run really differs, so the replay cannot have gone live
    again = list(live_model().stream(QUESTION))
    assert [c.content for c in again] != [c.content for c in live]


def test_async_stream_replays_the_same_chunks_and_token_callbacks(store: Store) -> None:
    async def consume(model: Any, handler: AsyncTokens, extra: list[Any]) -> list[Any]:
        return [c async for c in model.astream(QUESTION, config={"callbacks": [handler, *extra]})]

    live_tokens = AsyncTokens()
    with store.record(name="astream") as rec:
        live = asyncio.run(consume(live_model(), live_tokens, [RecordingCallbackHandler(rec)]))
    replay_tokens = AsyncTokens()
    with store.replay(rec.run_id) as player:
        replayed = asyncio.run(consume(replay_model(player), replay_tokens, []))
    assert [chunk_view(c) for c in replayed] == [chunk_view(c) for c in live]
    assert replay_tokens.seen == live_tokens.seen
    assert merged(replayed).tool_calls == merged(live).tool_calls


def test_astream_events_on_replay_yield_the_recorded_stream_events(store: Store) -> None:
    async def events(model: Any, callbacks: list[Any]) -> list[tuple[str, dict[str, Any]]]:
        return [(e["event"], chunk_view(e["data"]["chunk"]))
                async for e in model.astream_events(QUESTION, version="v2",
                                                    config={"callbacks": callbacks})
                if e["event"] == "on_chat_model_stream"]

    with store.record(name="events") as rec:
        live = asyncio.run(events(live_model(), [RecordingCallbackHandler(rec)]))
    with store.replay(rec.run_id) as player:
        replayed = asyncio.run(events(replay_model(player), []))
    assert len(live) > 3
    assert replayed == live


def _graph(model: Any) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph.compile()


def test_langgraph_messages_mode_sees_the_same_tokens(store: Store) -> None:
    def tokens(model: Any, callbacks: list[Any]) -> list[tuple[Any, Any, Any]]:
        stream = _graph(model).stream({"messages": [HumanMessage(QUESTION)]},
                                      stream_mode="messages", config={"callbacks": callbacks})
        return [(chunk_view(m), meta["langgraph_node"], meta["langgraph_step"])
                for m, meta in stream]

    with store.record(name="graph-messages") as rec:
        live = tokens(live_model(), [RecordingCallbackHandler(rec)])
    with store.replay(rec.run_id) as player:
        replayed = tokens(replay_model(player), [])
    assert len(live) > 3 and {node for _, node, _ in live} == {"agent"}
    assert replayed == live


def test_call_recorded_with_invoke_streams_with_its_tool_calls(store: Store) -> None:
    with store.record(name="invoke") as rec:
        live = live_model().invoke(QUESTION, config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert len(live.tool_calls) == 2
    tokens = Tokens()
    with store.replay(rec.run_id) as player:
        chunks = list(replay_model(player).stream(QUESTION, config={"callbacks": [tokens]}))
    assert message_view(merged(chunks)) == message_view(live)
    assert [token for token, _ in tokens.seen] == [c.content for c in chunks]
    # one chunk for the whole recorded answer: no extra chunk with an id of the replay's own
    assert {c.id for c in chunks} == {live.id}


def test_call_recorded_from_a_stream_invokes_as_the_merged_message(store: Store) -> None:
    with store.record(name="streamed") as rec:
        live = list(live_model().stream(QUESTION,
                                        config={"callbacks": [RecordingCallbackHandler(rec)]}))
    with store.replay(rec.run_id) as player:
        replayed = replay_model(player).invoke(QUESTION)
    assert type(replayed) is AIMessage
    assert message_view(replayed) == message_view(merged(live))
    assert len(replayed.tool_calls) == 2


def test_streaming_model_invoked_fires_the_recorded_tokens_again(store: Store) -> None:
    """A model built with streaming=True streams inside invoke; the replay fires its tokens."""
    live_tokens = Tokens()
    with store.record(name="streaming-invoke") as rec:
        live = StreamingChatModel(streaming=True).invoke(QUESTION, config={
            "callbacks": [RecordingCallbackHandler(rec), live_tokens]})
    assert len(live_tokens.seen) > 3
    replay_tokens = Tokens()
    with store.replay(rec.run_id) as player:
        replayed = ReplayChatModel(player=player).invoke(QUESTION,
                                                         config={"callbacks": [replay_tokens]})
    assert replay_tokens.seen == live_tokens.seen
    assert message_view(replayed) == message_view(live)


def _read(stream: Iterator[Any], count: int) -> list[Any]:
    """Read `count` chunks, then stop reading (LangChain sees the stream closed)."""
    taken = []
    for chunk in stream:
        taken.append(chunk)
        if len(taken) == count:
            break
    return taken


def test_abandoned_stream_replays_up_to_where_the_consumer_stopped(store: Store) -> None:
    with store.record(name="abandoned") as rec:
        live = _read(live_model().stream(QUESTION, config={
            "callbacks": [RecordingCallbackHandler(rec)]}), 2)
    (step,) = store.load_steps(rec.run_id)
    assert step.is_error  # LangChain reported on_llm_error(GeneratorExit)

    with store.replay(rec.run_id) as player:
        replayed = _read(replay_model(player).stream(QUESTION), 2)
    assert [chunk_view(c) for c in replayed] == [chunk_view(c) for c in live]

    with store.replay(rec.run_id) as player:
        stream = replay_model(player).stream(QUESTION)
        assert [chunk_view(next(stream)) for _ in range(2)] == [chunk_view(c) for c in live]
        with pytest.raises(AbandonedStreamReplayed) as caught:
            next(stream)
    message = str(caught.value)
    assert str(rec.run_id) in message and "abandoned" in message
    assert "after 2 chunks" in message and "Stop reading" in message


def test_abandoned_async_stream_replays_up_to_where_the_consumer_stopped(store: Store) -> None:
    async def read(model: Any, count: int, callbacks: list[Any]) -> list[Any]:
        taken = []
        async with aclosing(model.astream(QUESTION, config={"callbacks": callbacks})) as stream:
            async for chunk in stream:
                taken.append(chunk)
                if len(taken) == count:
                    break
        return taken

    # The model's own astream, closed by the consumer: LangChain reports GeneratorExit. (Through
    # a wrapper such as bind_tools the model's stream is only finalised by the garbage
    # collector, and when the event loop ends first it gets CancelledError, which records as a
    # cancelled call instead: see test_cancelled_stream_replays_its_chunks_then_never_ends.)
    with store.record(name="abandoned-async") as rec:
        live = asyncio.run(read(ScriptedChatModel(), 3, [RecordingCallbackHandler(rec)]))
    (step,) = store.load_steps(rec.run_id)
    assert step.is_error
    with store.replay(rec.run_id) as player:
        replayed = asyncio.run(read(ReplayChatModel(player=player), 3, []))
    assert [chunk_view(c) for c in replayed] == [chunk_view(c) for c in live]
    with store.replay(rec.run_id) as player, pytest.raises(AbandonedStreamReplayed):
        asyncio.run(read(ReplayChatModel(player=player), 10, []))


class SlowStream(ScriptedChatModel):
    """Streams two chunks, then stalls (a provider that stopped sending)."""

    async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        index = 0
        async for chunk in super()._astream(*args, **kwargs):
            if index == 2:
                await asyncio.sleep(30)
            index += 1
            yield chunk


def test_cancelled_stream_replays_its_chunks_then_never_ends(store: Store) -> None:
    """A stream cut by the caller's timeout: the replay serves the recorded chunks and then
    waits, so that the same timeout fires again."""
    async def read(model: Any, callbacks: list[Any]) -> tuple[list[Any], bool]:
        taken: list[Any] = []

        async def consume() -> None:
            async for chunk in model.astream(QUESTION, config={"callbacks": callbacks}):
                taken.append(chunk)
        try:
            await asyncio.wait_for(consume(), timeout=0.5)
        except asyncio.TimeoutError:
            return taken, True
        return taken, False

    with store.record(name="timed-out") as rec:
        live, live_timed_out = asyncio.run(read(SlowStream(), [RecordingCallbackHandler(rec)]))
    assert live_timed_out and len(live) == 2
    with store.replay(rec.run_id) as player:
        replayed, timed_out = asyncio.run(read(ReplayChatModel(player=player), []))
    assert timed_out
    assert [chunk_view(c) for c in replayed] == [chunk_view(c) for c in live]


class FailingStream(ScriptedChatModel):
    """Streams a few chunks, then the connection drops."""

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for index, chunk in enumerate(super()._stream(*args, **kwargs)):
            if index == 3:
                raise ConnectionResetError(f"connection reset by peer ({chunk.text!r} lost)")
            yield chunk


class ProviderError(Exception):
    """An error type whose constructor cannot be called again from its message."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"HTTP {status}: {body}")


class FailingWithProviderError(ScriptedChatModel):
    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for index, chunk in enumerate(super()._stream(*args, **kwargs)):
            if index == 2:
                raise ProviderError(529, {"error": "overloaded"})
            yield chunk


def _read_until_error(stream: Iterator[Any]) -> tuple[list[Any], BaseException]:
    taken = []
    try:
        for chunk in stream:
            taken.append(chunk)
    except Exception as exc:
        return taken, exc
    raise AssertionError("the stream did not fail")


def test_error_mid_stream_replays_the_chunks_then_the_same_error(store: Store) -> None:
    with store.record(name="failing") as rec:
        live, live_error = _read_until_error(FailingStream().stream(QUESTION, config={
            "callbacks": [RecordingCallbackHandler(rec)]}))
        provider_live, provider_live_error = _read_until_error(FailingWithProviderError().stream(
            "second", config={"callbacks": [RecordingCallbackHandler(rec)]}))
    assert len(live) == 3 and isinstance(live_error, ConnectionResetError)

    with store.replay(rec.run_id) as player:
        model = ReplayChatModel(player=player)
        replayed, error = _read_until_error(model.stream(QUESTION))
        provider_replayed, provider_error = _read_until_error(model.stream("second"))
    assert [chunk_view(c) for c in replayed] == [chunk_view(c) for c in live]
    assert type(error) is ConnectionResetError and str(error) == str(live_error)
    assert [c.content for c in provider_replayed] == [c.content for c in provider_live]
    # a type whose constructor cannot be called again from the message keeps its type
    assert type(provider_error) is ProviderError and str(provider_error) == str(
        provider_live_error)


def test_parallel_streams_of_the_same_prompt_replay_each_branch_own_chunks(store: Store) -> None:
    """LangChain does not hand `_stream` its run manager; the replay still finds each branch's
    own recorded stream by the branch's path, whatever order the branches run in."""
    def run(model: Any, keys: list[str], callbacks: list[Any]) -> dict[str, list[Any]]:
        both = RunnableParallel({k: model for k in keys}).with_config(run_name="both")
        out: dict[str, list[Any]] = {}
        for part in both.stream(QUESTION, config={"callbacks": callbacks,
                                                  "max_concurrency": 1}):
            for key, chunk in part.items():
                out.setdefault(key, []).append(chunk_view(chunk))
        return out

    with store.record(name="parallel-streams") as rec:
        live = run(ScriptedChatModel(), ["a", "b"], [RecordingCallbackHandler(rec)])
    assert live["a"] != live["b"]
    with store.replay(rec.run_id) as player, instrument(player):
        forwards = run(ReplayChatModel(player=player), ["a", "b"], [])
    with store.replay(rec.run_id) as player, instrument(player):
        backwards = run(ReplayChatModel(player=player), ["b", "a"], [])
    assert forwards == live
    assert backwards == live


class MalformedCalls(ScriptedChatModel):
    """Answers with one good tool call and one whose arguments are cut off (invalid)."""

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        token = nonce()
        message = AIMessage(
            content="", tool_calls=[tool_call(name="weather", args={"city": token},
                                              id=f"call_{token}")],
            invalid_tool_calls=[invalid_tool_call(
                name="search", args='{"query": "' + token, id=f"call_bad_{token}",
                error="arguments are not valid JSON")])
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_invoke_recording_streams_only_its_valid_tool_calls(store: Store) -> None:
    """A call recorded as invalid must not come back valid: streamed tool-call arguments are
    re-parsed leniently (cut-off JSON is completed), so the replay leaves it out of the stream
    rather than let the agent run a call the recorded agent never ran. Invoked, it is kept."""
    with store.record(name="invalid-calls") as rec:
        live = MalformedCalls().invoke(QUESTION, config={
            "callbacks": [RecordingCallbackHandler(rec)]})
    with store.replay(rec.run_id) as player:
        streamed = merged(list(ReplayChatModel(player=player).stream(QUESTION)))
    assert streamed.tool_calls == live.tool_calls and len(live.tool_calls) == 1
    assert streamed.invalid_tool_calls == []
    with store.replay(rec.run_id) as player:
        invoked = ReplayChatModel(player=player).invoke(QUESTION)
    assert invoked.invalid_tool_calls == live.invalid_tool_calls


def test_stream_that_diverges_goes_live_and_its_chunks_replay_from_the_fork(store: Store) -> None:
    with store.record(name="before-fork") as rec:
        list(ScriptedChatModel().stream(QUESTION,
                                        config={"callbacks": [RecordingCallbackHandler(rec)]}))
    live = ScriptedChatModel()
    with store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player:
        went_live = list(ReplayChatModel(player=player, live=live).stream("a changed prompt"))
        assert player.fork is not None
        fork_id = player.fork.run_id
    assert live.calls == 1 and "a changed prompt" in str(merged(went_live).content)
    with store.replay(fork_id) as player:
        replayed = list(ReplayChatModel(player=player).stream("a changed prompt"))
    assert [chunk_view(c) for c in replayed] == [chunk_view(c) for c in went_live]
