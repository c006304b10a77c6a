"""Recorded errors replay as the same errors, handled errors as the same messages, and nothing
that failed while recording runs again during replay."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Sequence
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, ToolException
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from agentreplay_core import Recorder, SerializationError, Store
from agentreplay_langchain import (
    RecordingCallbackHandler,
    RecordingEmbeddings,
    ReplayChatModel,
    ReplayEmbeddings,
    ReplayRetriever,
    instrument,
    replay_tools,
)
from tests.langchain.fakes import (
    Counter,
    HashEmbeddings,
    Plan,
    ScriptedChatModel,
    nonce,
    transcript,
)
from tests.langchain.test_tool_loop import tool_loop


class QuotaExceeded(Exception):
    """A user-defined tool error."""


class RateLimitError(Exception):
    """Like a provider SDK's rate-limit error."""


class StatusError(Exception):
    """An error that cannot be rebuilt from its message alone (keyword-only details)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class FailingChatModel(BaseChatModel):
    """A chat model whose provider refuses every call."""

    error: Exception
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "failing"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        self.calls += 1
        raise self.error


def call(name: str, args: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def callbacks(rec: Recorder) -> RunnableConfig:
    return {"callbacks": [RecordingCallbackHandler(rec)]}


def quota_tool(counter: Counter, **options: Any) -> BaseTool:
    def lookup(city: str) -> str:
        counter.hit("lookup")
        raise QuotaExceeded(f"quota exceeded looking up {city}")
    return StructuredTool.from_function(lookup, name="lookup", description="Look up a city.",
                                        **options)


def test_unhandled_tool_error_replays_without_running(store: Store) -> None:
    counter = Counter()
    with store.record(name="tool-error") as rec, pytest.raises(QuotaExceeded) as live:
        quota_tool(counter).invoke(call("lookup", {"city": "Oslo"}), config=callbacks(rec))
    assert counter.total == 1
    replay_counter = Counter()
    with store.replay(rec.run_id) as player:
        [tool] = replay_tools(player, [quota_tool(replay_counter)])
        with pytest.raises(QuotaExceeded) as replayed:
            tool.invoke(call("lookup", {"city": "Oslo"}))
    assert str(replayed.value) == str(live.value) == "quota exceeded looking up Oslo"
    assert replay_counter.total == 0


def flaky(counter: Counter, **options: Any) -> BaseTool:
    def forecast(city: str) -> str:
        counter.hit("forecast")
        raise ToolException(f"no forecast for {city} right now")
    return StructuredTool.from_function(forecast, name="forecast",
                                        description="Forecast for a city.", **options)


def test_handled_tool_exception_replays_the_same_error_message(store: Store) -> None:
    with store.record(name="handled") as rec:
        live = flaky(Counter(), handle_tool_error=True).invoke(
            call("forecast", {"city": "Oslo"}), config=callbacks(rec))
    assert (live.status, live.content) == ("error", "no forecast for Oslo right now")
    counter = Counter()
    with store.replay(rec.run_id) as player:
        [tool] = replay_tools(player, [flaky(counter, handle_tool_error=True)])
        replayed = tool.invoke(call("forecast", {"city": "Oslo"}))
    assert isinstance(replayed, ToolMessage)
    assert transcript([replayed]) == transcript([live])
    assert counter.total == 0


def test_callable_error_handler_is_not_applied_twice(store: Store) -> None:
    handled: list[str] = []

    def apologise(error: ToolException) -> str:
        handled.append(str(error))
        return f"sorry: {error} (attempt {len(handled)})"

    with store.record(name="handled-callable") as rec:
        live = flaky(Counter(), handle_tool_error=apologise).invoke(
            call("forecast", {"city": "Oslo"}), config=callbacks(rec))
    assert live.content == "sorry: no forecast for Oslo right now (attempt 1)"
    with store.replay(rec.run_id) as player:
        [tool] = replay_tools(player, [flaky(Counter(), handle_tool_error=apologise)])
        replayed = tool.invoke(call("forecast", {"city": "Oslo"}))
    assert transcript([replayed]) == transcript([live])
    assert handled == ["no forecast for Oslo right now"]  # only while recording


def _tool_graph(tools: Sequence[BaseTool]) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


def test_toolnode_handled_error_replays_the_same_tool_message(store: Store) -> None:
    asked = AIMessage("", id="ai-1", tool_calls=[
        call("lookup", {"city": "Oslo"}, "call_a"), call("forecast", {"city": "Rome"}, "call_b")])
    # entropy: LangGraph gives the tool messages uuid4 ids
    with store.record(name="toolnode-errors", entropy=True) as rec:
        live = _tool_graph([quota_tool(Counter()), flaky(Counter())]).invoke(
            {"messages": [asked]}, config=callbacks(rec))["messages"]
    assert [m.status for m in live[1:]] == ["error", "error"]
    assert "QuotaExceeded('quota exceeded looking up Oslo')" in str(live[1].content)
    counter = Counter()
    with store.replay(rec.run_id) as player:
        tools = replay_tools(player, [quota_tool(counter), flaky(counter)])
        replayed = _tool_graph(tools).invoke({"messages": [asked]})["messages"]
    assert transcript(replayed) == transcript(live)
    assert counter.total == 0


def strict_tool(counter: Counter, handle: bool) -> BaseTool:
    def repeat(text: str, times: int) -> str:
        counter.hit("repeat")
        return text * times
    return StructuredTool.from_function(repeat, name="repeat", description="Repeat a text.",
                                        handle_validation_error=handle)


def test_handled_validation_error_replays_and_uses_up_its_step(store: Store) -> None:
    bad = call("repeat", {"text": "ab", "times": "many"})
    with store.record(name="validation") as rec:
        live = strict_tool(Counter(), True).invoke(bad, config=callbacks(rec))
    assert live.status == "error" and rec.step_count == 1
    counter = Counter()
    with store.replay(rec.run_id) as player:  # leaving it raises if the step was not used up
        replayed = replay_tools(player, [strict_tool(counter, True)])[0].invoke(bad)
        assert player.unconsumed() == []
    assert transcript([replayed]) == transcript([live])
    assert counter.total == 0


def test_unhandled_validation_error_replays_and_uses_up_its_step(store: Store) -> None:
    bad = call("repeat", {"text": "ab", "times": "many"})
    with store.record(name="validation-raised") as rec, pytest.raises(Exception) as live:
        strict_tool(Counter(), False).invoke(bad, config=callbacks(rec))
    with store.replay(rec.run_id) as player:
        with pytest.raises(type(live.value)) as replayed:
            replay_tools(player, [strict_tool(Counter(), False)])[0].invoke(bad)
        assert player.unconsumed() == []
    assert "times" in str(replayed.value)


@pytest.mark.parametrize("error", [RateLimitError("429: slow down, retry in 20s"),
                                   StatusError("503 from the provider", status=503)],
                         ids=["rebuildable", "keyword-only"])
def test_chat_model_error_replays(store: Store, error: Exception) -> None:
    live_model = FailingChatModel(error=error)
    with store.record(name="model-error") as rec, pytest.raises(type(error)):
        live_model.invoke("hello", config=callbacks(rec))
    assert store.load_steps(rec.run_id)[0].is_error
    with store.replay(rec.run_id) as player, pytest.raises(Exception) as replayed:
        ReplayChatModel(player=player).invoke("hello")
    # the same class (a handler picking errors by class catches it), message and details,
    # also where the constructor wants more than the message
    assert type(replayed.value) is type(error) and str(replayed.value) == str(error)
    if isinstance(error, StatusError):
        assert isinstance(replayed.value, StatusError) and replayed.value.status == 503
    assert live_model.calls == 1


def test_content_and_artifact_replays_both(store: Store) -> None:
    artifact = {"rows": [(1, "a"), (2, "b")], "fetched": dt.datetime(2026, 1, 2, 3, 4, 5),
                "raw": b"\x00\x01", "ratio": 1 / 3}

    def query(sql: str) -> tuple[str, dict[str, Any]]:
        return f"2 rows for {sql}", artifact

    def database(counter: Counter) -> BaseTool:
        def run(sql: str) -> tuple[str, dict[str, Any]]:
            counter.hit("db")
            return query(sql)
        return StructuredTool.from_function(run, name="db", description="Query the database.",
                                            response_format="content_and_artifact")

    with store.record(name="artifact") as rec:
        live = database(Counter()).invoke(call("db", {"sql": "select 1"}), config=callbacks(rec))
    counter = Counter()
    with store.replay(rec.run_id) as player:
        replayed = replay_tools(player, [database(counter)])[0].invoke(
            call("db", {"sql": "select 1"}))
    assert replayed.content == "2 rows for select 1"
    assert replayed.artifact == artifact
    assert transcript([replayed]) == transcript([live])
    assert counter.total == 0


class BrokenRetriever(BaseRetriever):
    """A retriever whose index is offline for one query."""

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if "secret" in query:
            raise PermissionError(f"not allowed to search for {query!r}")
        return [Document(page_content=f"about {query}", id="d1", metadata={"score": 0.25})]


def test_retriever_error_replays(store: Store) -> None:
    with store.record(name="retriever-error") as rec:
        docs = BrokenRetriever().invoke("cats", config=callbacks(rec))
        with pytest.raises(PermissionError) as live:
            BrokenRetriever().invoke("secret plans", config=callbacks(rec))
    with store.replay(rec.run_id) as player:
        retriever = ReplayRetriever(player=player)
        assert retriever.invoke("cats") == docs
        with pytest.raises(PermissionError) as replayed:
            retriever.invoke("secret plans")
    assert str(replayed.value) == str(live.value) == "not allowed to search for 'secret plans'"


def test_a_tool_that_returns_its_own_error_message_replays_it(store: Store) -> None:
    # tools may report failure themselves, without raising (LangGraph tools often do)
    def refund(order: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        return ToolMessage(f"order {order} is not refundable", tool_call_id=tool_call_id,
                           status="error", artifact={"order": order, "reason": "final sale"},
                           additional_kwargs={"code": 409})

    tool = StructuredTool.from_function(refund, name="refund", description="Refund an order.")
    with store.record(name="own-error") as rec:
        live = tool.invoke(call("refund", {"order": "A-7"}), config=callbacks(rec))
    with store.replay(rec.run_id) as player:
        replayed = replay_tools(player, [tool])[0].invoke(call("refund", {"order": "A-7"}))
    assert transcript([replayed]) == transcript([live])
    assert replayed.additional_kwargs == {"code": 409}


class FlakyEmbeddings(HashEmbeddings):
    """Refuses texts that are too long, and hangs on one text (a provider that times out)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if any(len(t) > 20 for t in texts):
            raise ValueError("input too long for this embedding model")
        return super().embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        if text == "hang":
            await asyncio.sleep(30)
        return self.embed_query(text)


def test_embedding_errors_and_timeouts_replay(store: Store) -> None:
    async def agent(embeddings: Embeddings) -> list[float]:
        with pytest.raises(asyncio.TimeoutError):  # the caller gives up after 50 ms
            await asyncio.wait_for(embeddings.aembed_query("hang"), 0.05)
        return await embeddings.aembed_query("retry")

    inner = FlakyEmbeddings()
    with store.record(name="embedding-errors") as rec:
        embeddings = RecordingEmbeddings(inner, rec)
        with pytest.raises(ValueError, match="too long") as live:
            embeddings.embed_documents(["short", "a text that is far too long"])
        vector = asyncio.run(agent(embeddings))
    assert [s.is_error for s in store.load_steps(rec.run_id)] == [True, True, False]
    calls = inner.calls
    with store.replay(rec.run_id) as player:
        replay = ReplayEmbeddings(player=player)
        with pytest.raises(ValueError) as replayed:
            replay.embed_documents(["short", "a text that is far too long"])
        # the timed-out call never completes in replay either, so the same timeout fires and
        # the retry gets the retry's vector
        assert asyncio.run(agent(replay)) == vector
    assert str(replayed.value) == str(live.value)
    assert inner.calls == calls


def test_a_tool_call_that_timed_out_times_out_again(store: Store) -> None:
    async def slow_lookup(code: str) -> str:
        await asyncio.sleep(0 if code == "fast" else 30)
        return f"order {code}: {nonce()}"

    tool = StructuredTool.from_function(coroutine=slow_lookup, name="lookup",
                                        description="Look up an order.")

    async def agent(lookup: BaseTool, config: Any = None) -> Any:
        with pytest.raises(asyncio.TimeoutError):  # the caller gives up after 50 ms
            await asyncio.wait_for(lookup.ainvoke(call("lookup", {"code": "slow"}), config), 0.05)
        return await lookup.ainvoke(call("lookup", {"code": "fast"}), config)

    with store.record(name="tool-timeout") as rec:
        live = asyncio.run(agent(tool, callbacks(rec)))
    # (langchain-core 0.3 and 1.0 report no cancelled tool: the step is recorded at the end)
    assert sorted(s.is_error for s in store.load_steps(rec.run_id)) == [False, True]
    with store.replay(rec.run_id) as player:
        # the timed-out call never completes in replay either (before, it raised at once)
        replayed = asyncio.run(agent(replay_tools(player, [tool])[0]))
    assert transcript([replayed]) == transcript([live])


def test_a_validation_error_after_going_live_is_recorded_into_the_fork(store: Store) -> None:
    before: Plan = [[("repeat", {"text": "ab", "times": 2})]]
    after: Plan = [[("repeat", {"text": "ab", "times": "many"})]]  # the new model errs
    with store.record(name="before") as rec:
        tool_loop(ScriptedChatModel(plan=before), [strict_tool(Counter(), True)], "twice",
                  callbacks(rec))
    counter = Counter()
    with store.replay(rec.run_id, on_divergence="live", allow_unused=True) as player:
        live = tool_loop(ReplayChatModel(player=player, live=ScriptedChatModel(plan=after)),
                         replay_tools(player, [strict_tool(counter, True)]), "twice, please")
        assert player.fork is not None
        fork_id = player.fork.run_id
    rejected = live[2]
    assert isinstance(rejected, ToolMessage) and rejected.status == "error"
    assert counter.total == 0  # rejected before it could run
    with store.replay(fork_id) as player:  # raises if the rejected call was not recorded
        again = tool_loop(ReplayChatModel(player=player),
                          replay_tools(player, [strict_tool(Counter(), True)]), "twice, please")
    assert transcript(again) == transcript(live)


@pytest.mark.parametrize("error", [RateLimitError("slow down"),
                                   StatusError("503 overloaded", status=503)],
                         ids=["rebuildable", "keyword-only"])
def test_a_fallback_after_a_failed_model_replays_both_calls(store: Store,
                                                            error: Exception) -> None:
    # with_fallbacks starts the backup without the primary's parent: the recorded steps are
    # matched by their requests, the failure first, then the backup's answer; the fallback
    # handles the error by its class, in replay as live
    primary = FailingChatModel(error=error)
    backup = ScriptedChatModel()
    with store.record(name="fallback") as rec:
        live = primary.with_fallbacks([backup], exceptions_to_handle=(type(error),)).invoke(
            "hello", config=callbacks(rec))
    assert primary.calls == 1 and backup.calls == 1
    kinds = [(s.kind, s.is_error) for s in store.load_steps(rec.run_id)]
    assert kinds == [("llm", True), ("llm", False)]
    with store.replay(rec.run_id) as player:
        replayed = ReplayChatModel(player=player).with_fallbacks(
            [ReplayChatModel(player=player)], exceptions_to_handle=(type(error),)
        ).invoke("hello")
    assert replayed.content == live.content and replayed.id == live.id


class StallsOnce(ScriptedChatModel):
    """A provider whose first answer never comes in time (the caller's timeout cancels it)."""

    stalled: bool = False

    async def _agenerate(self, *args: Any, **kwargs: Any) -> ChatResult:
        if not self.stalled:
            self.stalled = True
            await asyncio.sleep(30)
        return await super()._agenerate(*args, **kwargs)


async def _ask_with_retry(model: Any, config: RunnableConfig | None = None) -> list[str]:
    """An agent's timeout and retry around a model call: what each attempt gave."""
    log = []
    for _ in range(3):
        try:
            answer = await asyncio.wait_for(model.ainvoke("hi there", config=config), 0.3)
        except asyncio.TimeoutError:
            log.append("timed out")
            continue
        log.append(f"answer: {answer.content}")
        break
    return log


@pytest.mark.parametrize("attach", ["handler", "instrument"])
def test_a_model_call_a_timeout_cancelled_times_out_again_in_replay(
        store: Store, attach: str) -> None:
    # LangChain reports nothing for an `ainvoke` its caller cancels (its `gather` is
    # cancelled before the error callback): the call, recorded as cancelled when the run
    # ends (after the retry), replayed as an answer to the first attempt
    with store.record(name="timeout then retry") as rec:
        if attach == "handler":
            live = asyncio.run(_ask_with_retry(
                StallsOnce(), {"callbacks": [RecordingCallbackHandler(rec)]}))
        else:
            with instrument(rec):
                live = asyncio.run(_ask_with_retry(StallsOnce()))
    assert live[0] == "timed out" and live[1].startswith("answer: ")
    with store.replay(rec.run_id) as player:  # every step served: none left over
        assert asyncio.run(_ask_with_retry(ReplayChatModel(player=player))) == live


class Handle:
    """A live resource a provider's answer should not hold (here in `additional_kwargs`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


def test_an_answer_holding_a_value_the_store_cannot_keep_fails_loudly_in_replay(
        store: Store) -> None:
    # dumpd, which stored such answers before, turned the value into None: the replay gave
    # the agent another answer than it had, without a word
    model = GenericFakeChatModel(messages=iter([AIMessage("ok", additional_kwargs={
        "client": Handle(), "n": 1})]))
    with store.record(name="odd answer") as rec:
        live = model.invoke("hi", config={"callbacks": [RecordingCallbackHandler(rec)]})
    assert isinstance(live.additional_kwargs["client"], Handle)
    assert rec.stats.unencodable == 1
    with store.replay(rec.run_id, allow_unused=True) as player, \
            pytest.raises(SerializationError, match="Handle") as caught:
        ReplayChatModel(player=player).invoke("hi")
    assert "additional_kwargs.client" in str(caught.value)
