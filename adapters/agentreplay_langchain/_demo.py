"""The agent `agentreplay demo` runs: a small LangChain RAG agent with a clock-and-dice tool.

Every part is a real LangChain object: an `InMemoryVectorStore` retriever over local
deterministic embeddings, a `@tool` that reads the clock and draws random numbers and ids, and
a chat model bound to the tool. Only the model is scripted: it samples its wording, which
forecasts it asks for and its token counts, as a remote LLM at temperature > 0 does, so two
live runs differ. `run_agent` is the same code for recording and replay; only the backends it
is given change (`live_backends` or `replay_backends`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import random
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_core.vectorstores import InMemoryVectorStore

from agentreplay_core import Player, Recorder
from agentreplay_langchain._chat_model import ReplayChatModel
from agentreplay_langchain._embeddings import RecordingEmbeddings
from agentreplay_langchain._retriever import ReplayRetriever
from agentreplay_langchain._tools import replay_tools

QUESTION = "What should I pack for a weekend in Paris?"
SYSTEM_PROMPT = ("You are a travel assistant. Answer in two sentences, from the notes and the "
                 "weekend_forecast tool.\nNotes:\n{notes}")
NOTES = [Document(id=f"note-{i}", page_content=text) for i, text in enumerate([
    "Paris weekends in spring: showers come and go, pack a small umbrella.",
    "Paris museums are free on the first Sunday of the month; queues start early.",
    "Lyon is the capital of French cooking: book a bouchon a day ahead.",
    "Rome in summer: hot afternoons, visit museums in the morning.",
    "Oslo evenings stay cool even in June: pack a warm layer.",
])]
_STOPWORDS = frozenset({"a", "an", "the", "i", "is", "in", "of", "on", "to", "and", "for", "what",
                        "should", "this", "be", "before"})


class WordHashEmbeddings(Embeddings):
    """Bag-of-words vectors by feature hashing: a deterministic, local stand-in for an
    embedding API (texts sharing words are close)."""

    size = 256

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.size
        for word in re.findall(r"[a-z]+", text.lower()):
            if word not in _STOPWORDS:
                word = word.removesuffix("s")  # "weekends" is about a "weekend"
                bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "big")
                vector[bucket % self.size] += 1.0
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


@tool
def weekend_forecast(city: str, day: str) -> str:
    """The weather forecast for a city on a day of the coming weekend."""
    time.sleep(0.1)  # a weather API takes its time (a replay never calls it)
    issued = dt.datetime.now(dt.timezone.utc)
    celsius, rain = random.randint(8, 24), random.random()
    return (f"{city} {day}: {celsius} C, {rain:.0%} rain "
            f"(report {uuid.uuid4().hex[:8]}, {issued:%H:%M:%S} UTC)")


class SampledChatModel(BaseChatModel):
    """A scripted chat model that samples like a remote one: from a generator of its own,
    which no recording of the local clock or randomness can see (as on a provider's server).
    First turn: asks for the forecast of one or both weekend days; then answers from the notes
    in the system prompt and the forecasts."""

    latency: float = 0.2

    @property
    def _llm_type(self) -> str:
        return "demo-sampled"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        time.sleep(self.latency)  # the network round trip a replay saves
        rng = random.Random()  # seeded by the OS, like sampling on the provider's side
        if kwargs.get("tools") and not isinstance(messages[-1], ToolMessage):
            content, calls = _ask_forecasts(messages, rng)
        else:
            content, calls = _answer(messages, rng), []
        tokens_in, tokens_out = rng.randint(180, 260), rng.randint(20, 60)
        reply = AIMessage(content=content, tool_calls=calls, usage_metadata={
            "input_tokens": tokens_in, "output_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out})
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _ask_forecasts(messages: list[BaseMessage], rng: random.Random
                   ) -> tuple[str, list[dict[str, Any]]]:
    question = str(messages[-1].content)
    city = next((c for c in ("Paris", "Lyon", "Rome", "Oslo") if c in question), "Paris")
    days = rng.choice([["Saturday"], ["Sunday"], ["Saturday", "Sunday"]])
    calls = [{"name": "weekend_forecast", "args": {"city": city, "day": day},
              "id": f"call_{rng.getrandbits(48):012x}"} for day in days]
    return rng.choice(["", "Checking the forecast.", "One moment."]), calls


def _answer(messages: list[BaseMessage], rng: random.Random) -> str:
    notes = re.findall(r"^\[[^\]]+\] (.*)$", str(messages[0].content), flags=re.MULTILINE)
    forecasts = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
    rainy = any(int(p) >= 50 for f in forecasts for p in re.findall(r"(\d+)% rain", f))
    weather = "; ".join(re.sub(r" \(report.*", "", f) for f in forecasts)
    advice = rng.choice(["take the umbrella", "an umbrella is a must"] if rainy
                        else ["sunglasses will do", "leave the umbrella at home"])
    opening = rng.choice(["Good question!", "Here is my advice.", "Happy to help."])
    note = notes[0] if notes else "I have no notes on that."
    return f"{opening} {weather}: {advice}. {note}"


@dataclass
class Backends:
    """What the agent talks to: live parts while recording, replay backends in a replay."""

    model: BaseChatModel
    retriever: BaseRetriever
    tools: list[BaseTool]


@dataclass
class AgentResult:
    """What a user of the agent sees of one run."""

    conversation: str
    retrieved: list[str]
    tool_calls: list[str]
    answer: str


def run_agent(question: str, backends: Backends,
              system_prompt: str = SYSTEM_PROMPT) -> AgentResult:
    """Retrieve notes, let the model call tools until it answers: a plain tool-calling loop."""
    conversation = f"{uuid.uuid4().hex[:8]} at {dt.datetime.now(dt.timezone.utc):%H:%M:%S.%f}"
    docs = backends.retriever.invoke(question)
    notes = "\n".join(f"[{doc.id}] {doc.page_content}" for doc in docs)
    messages: list[BaseMessage] = [SystemMessage(system_prompt.format(notes=notes)),
                                   HumanMessage(question)]
    model = backends.model.bind_tools(backends.tools)
    tools = {t.name: t for t in backends.tools}
    calls: list[str] = []
    for _ in range(4):
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            result = tools[call["name"]].invoke(call)  # a ToolMessage answering the call
            messages.append(result)
            calls.append(str(result.content))
    return AgentResult(conversation, [str(doc.id) for doc in docs], calls, str(reply.content))


def live_backends(recorder: Recorder | None = None) -> Backends:
    """The live parts. With a recorder, the query embeddings are recorded exactly (embeddings
    have no LangChain callback); models, tools and the retriever are recorded by `instrument`."""
    embeddings = WordHashEmbeddings()
    vectors = InMemoryVectorStore(embedding=embeddings)
    vectors.add_documents(NOTES)  # indexing is setup: not recorded, not replayed
    if recorder is not None:
        vectors.embedding = RecordingEmbeddings(embeddings, recorder)
    return Backends(SampledChatModel(), vectors.as_retriever(search_kwargs={"k": 2}),
                    [weekend_forecast])


def replay_backends(player: Player) -> Backends:
    """Replay backends answering from the recorded run: nothing runs, nothing is sampled."""
    return Backends(ReplayChatModel(player=player), ReplayRetriever(player=player),
                    list(replay_tools(player, [weekend_forecast])))
