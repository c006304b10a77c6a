"""A LlamaIndex program whose code never says record or replay:
`python -m tests.llamaindex.mode_switch_agent` prints what it did as JSON, and
`AGENTREPLAY_MODE=record|replay|off` decides whether the same code records the run, replays it
or runs untouched; the tests also run `program()` inside `with Session(...)` blocks.

A RAG query (vector index over float64 embeddings, a sampled completion model) and a
`FunctionAgent` whose sampled model calls both tools in parallel: only a recording can
reproduce the output. The JSON also says how often the live parts ran.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.llm import LLM
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool
from pydantic import Field

from agentreplay_llamaindex import (
    instrument,
    replayable_embedding,
    replayable_llm,
    replayable_retriever,
    replayable_tools,
)
from tests.llamaindex import scenarios
from tests.llamaindex.models import HashEmbedding, SampledLLM, ToolCallingLLM


@dataclass
class LiveParts:
    """The live objects the program is given (it decides nothing about them)."""

    rag_llm: LLM
    agent_llm: LLM
    embedding: BaseEmbedding
    tools: list[BaseTool]
    ran: list[str] = field(default_factory=list)


class CountingEmbedding(HashEmbedding):
    """The float64 hash embedding, counting the texts it really embeds."""

    embedded: int = 0

    def _get_query_embedding(self, query: str) -> list[float]:
        self.embedded += 1
        return super()._get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self.embedded += 1
        return await super()._aget_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        self.embedded += 1
        return super()._get_text_embedding(text)


def live_parts() -> LiveParts:
    ran: list[str] = []

    def add(a: int, b: int) -> int:
        """Add two integers."""
        ran.append("add")
        return a + b

    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        ran.append("multiply")
        return a * b

    tools: list[BaseTool] = [FunctionTool.from_defaults(fn=add),
                             FunctionTool.from_defaults(fn=multiply)]
    return LiveParts(SampledLLM(), ToolCallingLLM(), CountingEmbedding(), tools, ran)


class UnreachableLLM(CustomLLM):
    """A model of the recorded name that fails if anything calls it."""

    name: str = Field(default="unreachable")

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.name)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        raise AssertionError("a live model was called during replay")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        def never() -> Generator[CompletionResponse, None, None]:
            yield from ()
            raise AssertionError("a live model was called during replay")

        return never()


class UnreachableEmbedding(BaseEmbedding):
    def __init__(self) -> None:
        super().__init__(model_name="hash-embedding")

    def _get_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("the live embedding model was called during replay")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("the live embedding model was called during replay")

    def _get_text_embedding(self, text: str) -> list[float]:
        raise AssertionError("the live embedding model was called during replay")


def unreachable_parts() -> LiveParts:
    """Live objects that fail if anything calls them: a replay must not."""
    def never(a: int, b: int) -> int:
        raise AssertionError("a replayed tool was executed")

    tools: list[BaseTool] = [
        FunctionTool.from_defaults(fn=never, name=t.metadata.name,
                                   description=t.metadata.description)
        for t in scenarios.agent_tools()]
    return LiveParts(UnreachableLLM(name="sampled-llm"), UnreachableLLM(name="tool-caller"),
                     UnreachableEmbedding(), tools)


async def _run(live: LiveParts, question: str) -> dict[str, Any]:
    index = scenarios.build_index(replayable_embedding(live.embedding))
    retriever = replayable_retriever(index.as_retriever(similarity_top_k=2))
    answer = await scenarios.rag(replayable_llm(live.rag_llm), retriever, "async")
    agent = await scenarios.agent(replayable_llm(live.agent_llm), replayable_tools(live.tools),
                                  workflow=False, user_msg=question)
    return {"rag": answer, "agent": agent}


def program(live: LiveParts, question: str = scenarios.AGENT_QUESTION) -> dict[str, Any]:
    """The program: builds its parts through the factories, queries, runs the agent."""
    return asyncio.run(_run(live, question))


def main() -> None:
    live = live_parts()
    with instrument():  # inert unless AGENTREPLAY_MODE asks for a session
        result = program(live)
    embedding = live.embedding
    assert isinstance(embedding, CountingEmbedding)
    result["live_calls"] = {"tools": len(live.ran), "embedded": embedding.embedded}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
