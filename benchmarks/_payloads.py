"""What the benchmarks record: chat steps of about 2 KB in and 1 KB out, made of English text
(the docstrings of the standard library), so that PostgreSQL's compression sees what it would
see in real prompts, not runs of one letter. Every step's text is different."""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from langchain_core.messages import AIMessage, BaseMessage
    from llama_index.core.base.llms.types import ChatMessage

MODEL = "gpt-4o-mini"
SYSTEM_CHARS, USER_CHARS, ANSWER_CHARS = 400, 1_550, 900
_MODULES = ("argparse", "asyncio", "collections", "email.message", "json", "logging",
            "pathlib", "subprocess", "typing", "unittest", "urllib.request", "http.client",
            "inspect", "textwrap", "datetime", "decimal", "functools", "itertools", "os", "re",
            "socket", "ssl", "threading", "shutil", "tarfile", "zipfile", "csv", "sqlite3",
            "statistics", "random")


@functools.cache
def corpus() -> str:
    """About 170 KB of English prose, the same on every run of one Python version."""
    parts = []
    for module_name in _MODULES:
        module = importlib.import_module(module_name)
        top = module_name.split(".")[0]
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            doc = inspect.getdoc(obj)
            if doc and str(getattr(obj, "__module__", "")).startswith(top):
                parts.append(doc)
    return " ".join(" ".join(parts).split())


def text(i: int, size: int) -> str:
    """`size` characters of prose; a different window for each `i`."""
    source = corpus()
    start = (i * 7_919) % (len(source) - size)
    return source[start:start + size]


def system_prompt() -> str:
    return text(0, SYSTEM_CHARS)


def chat_step(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(request, response) of chat step `i`, in the shape a chat API takes and returns."""
    request = {"model": MODEL, "temperature": 0.2, "messages": [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": text(2 * i + 1, USER_CHARS)}]}
    response = {"role": "assistant", "content": text(2 * i + 2, ANSWER_CHARS),
                "usage": {"input_tokens": 480, "output_tokens": 220}}
    return request, response


def chat_steps(count: int, start: int = 0) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [chat_step(i) for i in range(start, start + count)]


_next_fresh = [0]


def fresh(count: int) -> int:
    """The first of `count` step indexes that no earlier call in this process handed out.

    A workload recorded again in the same process costs less than new text: the redactor
    remembers text it has screened for secrets (bounded, ~16 M characters), and a string
    keeps its hash. An agent's new prompts and answers get neither, so a measured repeat
    records steps it has not recorded before (the system prompt stays the same, as an
    agent's does). Windows of the corpus come round again after ~80,000 steps, far beyond
    what the redactor remembers.
    """
    start = _next_fresh[0]
    _next_fresh[0] += count
    return start


def fresh_chat_steps(count: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """`count` chat steps that no earlier call in this process handed out (see `fresh`)."""
    return chat_steps(count, fresh(count))


def json_text(value: Any) -> str:
    """Canonical JSON text (sorted keys), what the baselines store."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def conversation(turns: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """A chat whose prompt grows each turn: turn t sends every earlier message again."""
    messages: list[dict[str, str]] = [{"role": "system", "content": text(0, 1_000)}]
    steps = []
    for t in range(turns):
        messages.append({"role": "user", "content": text(3 * t + 1, 300)})
        answer = {"role": "assistant", "content": text(3 * t + 2, 700)}
        steps.append(({"model": MODEL, "messages": list(messages)}, answer))
        messages.append(answer)
    return steps


def langchain_chat(count: int, start: int = 0
                   ) -> tuple[list[list[BaseMessage]], list[AIMessage]]:
    """LangChain prompts (system + user) and answers of the same sizes as `chat_step`."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    indexes = range(start, start + count)
    prompts: list[list[BaseMessage]] = [
        [SystemMessage(system_prompt()), HumanMessage(text(2 * i + 1, USER_CHARS))]
        for i in indexes]
    return prompts, [AIMessage(text(2 * i + 2, ANSWER_CHARS)) for i in indexes]


def llamaindex_chat(count: int, start: int = 0) -> list[list[ChatMessage]]:
    """LlamaIndex prompts (system + user) of the same sizes as `chat_step`."""
    from llama_index.core.base.llms.types import ChatMessage

    return [[ChatMessage(role="system", content=system_prompt()),
             ChatMessage(role="user", content=text(2 * i + 1, USER_CHARS))]
            for i in range(start, start + count)]
