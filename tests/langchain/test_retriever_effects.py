"""What a retriever reports while it runs comes back in replay: the custom events it dispatches
(`dispatch_custom_event`) and what it writes to LangGraph's custom stream, dispatched and
written again by `ReplayRetriever` before it returns the documents or raises."""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict
from uuid import UUID

import pytest
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    BaseCallbackHandler,
    CallbackManagerForRetrieverRun,
    adispatch_custom_event,
    dispatch_custom_event,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from pydantic import ConfigDict

from agentreplay_core import Store
from agentreplay_langchain import ReplayRetriever, instrument, replay_tools
from tests.langchain.fakes import Counter, nonce


class SurveyingRetriever(BaseRetriever):
    """Reports its progress as custom events (from itself and from a run inside it) and to
    LangGraph's custom stream when there is one; fails for a query about a closed index."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    counter: Counter

    def _found(self, query: str) -> list[Document]:
        if query.startswith("closed"):
            raise LookupError(f"index closed for {query!r}")
        return [Document(page_content=f"{query}: {nonce()}", id=nonce(),
                         metadata={"score": 0.75, "source": "atlas"})]

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        self.counter.hit("retrieve")
        # a retriever's run is not the context's, so it hands its own to what it dispatches
        inside: Any = {"callbacks": run_manager.get_child()}
        dispatch_custom_event("searching", {"query": query, "shard": 2, "id": nonce()},
                              config=inside)
        write_progress({"searched": query})
        RunnableLambda(_ranked).invoke(3, config=inside)
        return self._found(query)

    async def _aget_relevant_documents(
            self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        self.counter.hit("aretrieve")
        await adispatch_custom_event("searching", {"zone": query, "id": nonce()},
                                     config={"callbacks": run_manager.get_child()})
        return self._found(query)


def _ranked(hits: int) -> None:
    dispatch_custom_event("ranked", {"hits": hits})  # from a run inside the retriever's


def write_progress(chunk: dict[str, Any]) -> None:
    try:
        from langgraph.config import get_stream_writer
        get_stream_writer()(chunk)
    except Exception:  # not inside a graph (or a LangGraph without the API)
        pass


class Seen(BaseCallbackHandler):
    """The caller's handler: the custom events that reached it, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, list[tuple[str, Any]]]] = []

    def on_custom_event(self, name: Any, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append((name, list(data.items())))  # keys in the dispatched order


def ask(retriever: BaseRetriever) -> tuple[list[Any], list[Any]]:
    """Sync, async and failing calls: what each returned or raised, and the events seen."""
    seen = Seen()
    config: Any = {"callbacks": [seen]}
    results: list[Any] = [retriever.invoke("fjords", config=config),
                          asyncio.run(retriever.ainvoke("glaciers", config=config))]
    with pytest.raises(LookupError) as failed:
        retriever.invoke("closed archive", config=config)
    results.append(str(failed.value))
    return results, seen.events


def test_a_retrievers_custom_events_are_dispatched_again_in_replay(store: Store) -> None:
    with store.record(name="retriever-events", entropy=True) as rec, instrument(rec):
        live, live_events = ask(SurveyingRetriever(counter=Counter()))
    assert rec.stats.internal_errors == 0
    assert [name for name, _ in live_events] == ["searching", "ranked", "searching",
                                                 "searching", "ranked"]
    with store.replay(rec.run_id) as player, instrument(player):
        again, events = ask(ReplayRetriever(player=player))
    assert events == live_events  # the failing call's too, before its error
    assert again == live  # documents with their ids and metadata, and the same error


def test_events_inside_a_tool_are_the_tools_and_the_retrievers(store: Store) -> None:
    """A retriever called inside a tool: its events are the tool's and the retriever's, so a
    replay dispatches each of them once whether it serves the whole tool call or runs the
    tool and serves the retriever inside it."""
    counter = Counter()

    def lookup_tool(retriever: BaseRetriever) -> Any:
        @tool
        def lookup(topic: str) -> str:
            """Look a topic up."""
            return " | ".join(d.page_content for d in retriever.invoke(topic))
        return lookup

    seen = Seen()
    with store.record(name="retriever-in-tool", entropy=True) as rec, instrument(rec):
        live = lookup_tool(SurveyingRetriever(counter=counter)).invoke(
            "fjords", config={"callbacks": [seen]})
    assert len(seen.events) == 2
    replayed = Seen()
    with store.replay(rec.run_id) as player, instrument(player):
        stand_in = replay_tools(player, [lookup_tool(SurveyingRetriever(counter=counter))])[0]
        again = stand_in.invoke("fjords", config={"callbacks": [replayed]})
    assert again == live and counter.total == 1
    assert replayed.events == seen.events
    inner = Seen()
    with store.replay(rec.run_id, allow_unused=True) as player, instrument(player):
        # the tool's own code runs; only the retriever inside it is replayed
        again = lookup_tool(ReplayRetriever(player=player)).invoke(
            "fjords", config={"callbacks": [inner]})
    assert again == live and counter.total == 1
    assert inner.events == seen.events


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_live_retriever_in_a_fork_reports_and_is_recorded(store: Store,
                                                             use_async: bool) -> None:
    with store.record(name="retriever-fork", entropy=True) as rec, instrument(rec):
        SurveyingRetriever(counter=Counter()).invoke("fjords")

    def ask_twice(retriever: BaseRetriever, seen: Seen) -> list[Any]:
        config: Any = {"callbacks": [seen]}
        found: list[Any] = []
        for query in ("volcanoes", "closed crater"):
            try:
                found.append(asyncio.run(retriever.ainvoke(query, config=config)) if use_async
                             else retriever.invoke(query, config=config))
            except LookupError as error:
                found.append(str(error))
        return found

    counter, seen = Counter(), Seen()
    with store.replay(rec.run_id, on_divergence="live") as player, instrument(player):
        live = ask_twice(ReplayRetriever(player=player,
                                         live=SurveyingRetriever(counter=counter)), seen)
        assert player.fork is not None
        fork_id = player.fork.run_id
    assert sum(counter.counts.values()) == 2
    assert "index closed" in live[1]
    assert [dict(data).get("query", dict(data).get("zone")) for name, data in seen.events
            if name == "searching"] == ["volcanoes", "closed crater"]
    replayed = Seen()
    with store.replay(fork_id) as player, instrument(player):
        again = ask_twice(ReplayRetriever(player=player), replayed)
    assert again == live and replayed.events == seen.events


class Question(TypedDict):
    question: str
    context: str


def one_node_graph(node: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(Question)
    builder.add_node(node.__name__, node)
    builder.add_edge(START, node.__name__)
    builder.add_edge(node.__name__, END)
    return builder.compile()


def test_a_retrievers_stream_writes_are_written_again(store: Store) -> None:
    def graph(retriever: BaseRetriever) -> Any:
        def retrieve(state: Question) -> dict[str, str]:
            docs = retriever.invoke(state["question"])
            return {"context": docs[0].page_content}
        return one_node_graph(retrieve)

    def stream(app: Any) -> list[Any]:
        return list(app.stream({"question": "fjords", "context": ""},
                               stream_mode=["custom", "values"]))

    with store.record(name="retriever-stream", entropy=True) as rec, instrument(rec):
        live = stream(graph(SurveyingRetriever(counter=Counter())))
    assert ("custom", {"searched": "fjords"}) in live
    with store.replay(rec.run_id) as player, instrument(player):
        again = stream(graph(ReplayRetriever(player=player)))
    assert again == live


def test_stream_writes_inside_a_tool_are_the_tools_too(store: Store) -> None:
    """A retriever called inside a tool writes to the stream: the tool's step keeps the writes
    as well, in the order they were made, so a replay writes each once whether it serves the
    whole tool call or runs the tool and serves the retriever inside it."""
    def graph(lookup: Any) -> Any:
        def research(state: Question) -> dict[str, str]:
            return {"context": lookup.invoke(state["question"])}
        return one_node_graph(research)

    def lookup_tool(retriever: BaseRetriever) -> Any:
        @tool
        def lookup(topic: str) -> str:
            """Look a topic up."""
            write_progress({"looking up": topic})
            found = retriever.invoke(topic)
            write_progress({"found": len(found)})
            return found[0].page_content
        return lookup

    def stream(app: Any) -> list[Any]:
        return [chunk for mode, chunk in app.stream({"question": "fjords", "context": ""},
                                                    stream_mode=["custom", "values"])
                if mode == "custom"]

    counter = Counter()
    with store.record(name="retriever-in-tool-stream", entropy=True) as rec, instrument(rec):
        live = stream(graph(lookup_tool(SurveyingRetriever(counter=counter))))
    assert live == [{"looking up": "fjords"}, {"searched": "fjords"}, {"found": 1}]
    with store.replay(rec.run_id) as player, instrument(player):
        lookup = replay_tools(player, [lookup_tool(SurveyingRetriever(counter=counter))])[0]
        again = stream(graph(lookup))
    assert again == live and counter.total == 1
    with store.replay(rec.run_id, allow_unused=True) as player, instrument(player):
        # the tool's own code runs and writes; the retriever inside it is replayed
        again = stream(graph(lookup_tool(ReplayRetriever(player=player))))
    assert again == live and counter.total == 1
