"""The agent programs the tests record and replay: the same code runs with live or replay
backends, in the test process (recording) and in a fresh process (replay)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms.llm import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.tools import FunctionTool
from llama_index.core.tools.types import BaseTool
from pydantic import BaseModel

from agentreplay_core import ReplayDivergence


def divergence_in(exc: BaseException) -> ReplayDivergence:
    """The ReplayDivergence itself, or the one older workflows wrap in WorkflowRuntimeError."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, ReplayDivergence):
        seen = seen.__cause__ or seen.__context__
    assert isinstance(seen, ReplayDivergence), f"no ReplayDivergence behind {exc!r}"
    return seen


TEXTS = [
    "PostgreSQL stores the run log of every recorded agent run.",
    "Replay serves recorded results instead of calling the model again.",
    "A vector index retrieves the nodes nearest to the query embedding.",
    "Parallel tool calls finish in any order on a thread pool.",
]
QUESTION = "What does replay serve instead of calling the model?"
AGENT_QUESTION = "Add and multiply some numbers for me."
RAG_MODES = ["sync", "sync_stream", "async", "async_stream"]


def build_index(embed_model: BaseEmbedding) -> VectorStoreIndex:
    """An in-memory vector index (SimpleVectorStore); embeds every text through the model."""
    docs = [Document(text=t, id_=f"doc-{i}") for i, t in enumerate(TEXTS)]
    return VectorStoreIndex.from_documents(docs, embed_model=embed_model)


async def _text_of(response: Any) -> str:
    """The answer text of any query engine response, streamed or not (feature-detected)."""
    async_gen = getattr(response, "async_response_gen", None)
    if callable(async_gen):
        return "".join([t async for t in async_gen()])
    gen = getattr(response, "response_gen", None)
    if gen is not None:
        if hasattr(gen, "__aiter__"):
            return "".join([t async for t in gen])
        return "".join(gen)
    return str(response.response)


async def rag(llm: LLM, retriever: BaseRetriever, mode: str) -> dict[str, Any]:
    """One query through a RetrieverQueryEngine: answer text, source node ids and scores."""
    engine = RetrieverQueryEngine.from_args(retriever=retriever, llm=llm,
                                            streaming=mode.endswith("stream"))
    if mode.startswith("async"):
        response = await engine.aquery(QUESTION)
    else:
        response = engine.query(QUESTION)
    text = await _text_of(response)
    return {"text": text,
            "node_ids": [n.node.node_id for n in response.source_nodes],
            "node_texts": [n.node.get_content() for n in response.source_nodes],
            "scores": [n.score for n in response.source_nodes]}


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def agent_tools() -> list[BaseTool]:
    return [FunctionTool.from_defaults(fn=add), FunctionTool.from_defaults(fn=multiply)]


async def agent(llm: LLM, tools: Sequence[BaseTool], *, workflow: bool,
                user_msg: str = AGENT_QUESTION, chat_history: list[ChatMessage] | None = None
                ) -> dict[str, Any]:
    """A FunctionAgent (alone or in an AgentWorkflow) whose LLM calls both tools in parallel.

    The agent alone streams (astream_chat_with_tools); in the workflow it does not
    (achat_with_tools), so both LLM paths of an agent are exercised.
    """
    offered: list[BaseTool | Callable[..., Any]] = [*tools]
    function_agent = FunctionAgent(name="calculator", description="Does arithmetic.",
                                   tools=offered, llm=llm, system_prompt="Use the tools.",
                                   streaming=not workflow)
    runner: Any = AgentWorkflow(agents=[function_agent]) if workflow else function_agent
    output = await runner.run(user_msg=user_msg, chat_history=chat_history)
    return {"text": str(output.response.content)}


class Invoice(BaseModel):
    number: str
    total: int


def structured(llm: LLM) -> dict[str, Any]:
    """`structured_predict`: the LLM fills an Invoice through its tool-calling program."""
    invoice = llm.structured_predict(Invoice, PromptTemplate("Make an invoice for {who}."),
                                     who="ACME")
    dumped: dict[str, Any] = invoice.model_dump()
    return dumped
