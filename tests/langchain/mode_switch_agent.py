"""An agent whose code never says record or replay: `python -m tests.langchain.mode_switch_agent`
prints what it did as JSON. `AGENTREPLAY_MODE=record|replay|off` (with `AGENTREPLAY_RUN_ID`,
`AGENTREPLAY_DSN`, `AGENTREPLAY_SCHEMA`) decides whether the same code records the run, replays
it or runs untouched; the tests also run `agent()` inside `with Session(...)` blocks.

The agent retrieves a document (vector store over float64 embeddings), then runs a tool loop
with a model whose ids, wording and usage are random and tools with random results, so only a
recording can reproduce its output. The JSON also says how often the live parts ran.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool
from langchain_core.vectorstores import InMemoryVectorStore

from agentreplay_langchain import (
    instrument,
    replayable_chat_model,
    replayable_embeddings,
    replayable_retriever,
    replayable_tools,
)
from tests.langchain.fakes import (
    Counter,
    HashEmbeddings,
    Plan,
    ScriptedChatModel,
    make_tools,
    transcript,
)
from tests.langchain.replay_child import tools_that_must_not_run
from tests.langchain.test_tool_loop import tool_loop

PLAN: Plan = [[("weather", {"city": "Paris"}), ("search", {"query": "louvre hours"})]]
QUESTION = "What should I visit in the capital of France?"
DOCS = [Document(id=f"doc-{i}", page_content=text, metadata={"source": f"s{i}"})
        for i, text in enumerate(["Paris is the capital of France", "Rome has the Colosseum",
                                  "Berlin has a wall"])]


@dataclass
class LiveParts:
    """The live backends the agent is given (it decides nothing about them)."""

    model: BaseChatModel
    tools: list[BaseTool]
    embeddings: Embeddings
    counter: Counter = field(default_factory=Counter)


def live_parts() -> LiveParts:
    counter = Counter()
    return LiveParts(ScriptedChatModel(plan=PLAN), make_tools(counter), HashEmbeddings(),
                     counter)


class _UnreachableModel(ScriptedChatModel):
    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        raise AssertionError("the live model was called during replay")


class _UnreachableEmbeddings(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the live embeddings were called during replay")

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("the live embeddings were called during replay")


def unreachable_parts() -> LiveParts:
    """Live backends that fail if anything calls them: a replay must not."""
    return LiveParts(_UnreachableModel(), tools_that_must_not_run(), _UnreachableEmbeddings())


def agent(live: LiveParts, question: str = QUESTION, style: str = "") -> dict[str, Any]:
    """The agent: builds its backends through the factories, retrieves, runs its tool loop."""
    model = replayable_chat_model(live.model)
    tools = replayable_tools(live.tools)
    vectors = InMemoryVectorStore(embedding=replayable_embeddings(live.embeddings))
    vectors.add_documents(DOCS)
    retriever = replayable_retriever(vectors.as_retriever(search_kwargs={"k": 1}))
    docs = retriever.invoke(question)
    prompt = f"{question} {style}(context: {docs[0].page_content})"
    messages = tool_loop(model, tools, prompt)
    return {"docs": [[d.id, d.page_content] for d in docs], "transcript": transcript(messages)}


def main() -> None:
    live = live_parts()
    with instrument():  # inert unless AGENTREPLAY_MODE asks for a session
        result = agent(live)
    model = live.model
    assert isinstance(model, ScriptedChatModel)
    result["live_calls"] = {"model": model.calls, "tools": live.counter.total,
                            "embeddings": getattr(live.embeddings, "calls", 0)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
