"""Live models for the tests, built on llama-index-core's own bases.

Both LLMs draw from `os.urandom`: two live runs differ, so a replay that secretly called the
live model could never reproduce the recorded text.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import AsyncGenerator, Generator, Sequence
from typing import Any, TypeVar

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.tools import ToolSelection
from llama_index.core.tools.types import BaseTool


def sample(n: int = 4) -> str:
    """A token no run can predict."""
    return os.urandom(n).hex()


class SampledLLM(CustomLLM):
    """A completion model: answers with a random token and the prompt's length."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="sampled-llm", context_window=3900, num_output=256)

    def _text(self, prompt: str) -> str:
        return f"answer {sample()} to a prompt of {len(prompt)} chars"

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        return CompletionResponse(text=self._text(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        words = self._text(prompt).split(" ")

        def gen() -> Generator[CompletionResponse, None, None]:
            text = ""
            for i, word in enumerate(words):
                delta = word if i == 0 else " " + word
                text += delta
                yield CompletionResponse(text=text, delta=delta)

        return gen()


class HashEmbedding(BaseEmbedding):
    """Float64 vectors from SHA-256: full 53-bit mantissas, which float32 cannot hold."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(model_name="hash-embedding", **kwargs)

    @staticmethod
    def vector(text: str, mode: str) -> list[float]:
        digest = hashlib.sha256(f"{mode}:{text}".encode()).digest() * 2
        return [struct.unpack(">Q", digest[i:i + 8])[0] / 2**64 for i in range(0, 64, 8)]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self.vector(query, "query")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self.vector(query, "query")

    def _get_text_embedding(self, text: str) -> list[float]:
        return self.vector(text, "text")


def _last_turn(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The tool results after the last assistant message (empty on a new user turn)."""
    out: list[ChatMessage] = []
    for message in reversed(messages):
        if message.role != MessageRole.TOOL:
            break
        out.append(message)
    return out


T = TypeVar("T")


async def aiterate(items: list[T]) -> AsyncGenerator[T, None]:
    """`items` as an async stream (an integration's `astream_*` result)."""
    for item in items:
        yield item


class ToolCallingLLM(FunctionCallingLLM):
    """A scripted function-calling model with sampled output.

    A user turn gets parallel calls of every offered tool (random ids and arguments); tool
    results get a final answer quoting them. Tool calls live in `additional_kwargs`.
    """

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="tool-caller", is_chat_model=True,
                           is_function_calling_model=True, context_window=8000)

    def _reply(self, messages: Sequence[ChatMessage], tools: list[Any]) -> ChatMessage:
        results = _last_turn(messages)
        if results or not tools:
            quoted = sorted(str(m.content) for m in results)
            return ChatMessage(role=MessageRole.ASSISTANT,
                               content=f"done {sample()} with {quoted}")
        calls = []
        for spec in tools:  # OpenAI-style specs, as `_prepare_chat_with_tools` built them
            function = spec["function"]
            props = function["parameters"].get("properties", {})
            args = {k: (int.from_bytes(os.urandom(1), "big") if v.get("type") == "integer"
                        else sample(2)) for k, v in props.items()}
            calls.append({"id": f"call_{sample()}", "name": function["name"],
                          "arguments": json.dumps(args)})
        return ChatMessage(role=MessageRole.ASSISTANT, content="",
                           additional_kwargs={"tool_calls": calls})

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return ChatResponse(message=self._reply(messages, list(kwargs.get("tools") or [])))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return ChatResponse(message=self._reply(messages, list(kwargs.get("tools") or [])))

    def _chunks(self, message: ChatMessage) -> Generator[ChatResponse, None, None]:
        text = message.content or ""
        pieces = [text[i:i + 5] for i in range(0, len(text), 5)] or [""]
        so_far = ""
        for i, piece in enumerate(pieces):
            so_far += piece
            last = i == len(pieces) - 1
            yield ChatResponse(
                message=ChatMessage(role=MessageRole.ASSISTANT, content=so_far,
                                    additional_kwargs=message.additional_kwargs if last else {}),
                delta=piece)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self._chunks(self._reply(messages, list(kwargs.get("tools") or [])))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any
                           ) -> ChatResponseAsyncGen:
        return aiterate(list(self._chunks(self._reply(messages,
                                                      list(kwargs.get("tools") or [])))))

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        return CompletionResponse(text=f"completion {sample()}")

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponse:
        return CompletionResponse(text=f"completion {sample()}")

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        def gen() -> Generator[CompletionResponse, None, None]:
            yield CompletionResponse(text=f"completion {sample()}")

        return gen()

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                               ) -> CompletionResponseAsyncGen:
        async def gen() -> AsyncGenerator[CompletionResponse, None]:
            yield CompletionResponse(text=f"completion {sample()}")

        return gen()

    def _prepare_chat_with_tools(
        self, tools: Sequence[BaseTool], user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None, verbose: bool = False,
        allow_parallel_tool_calls: bool = False, tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(user_msg if isinstance(user_msg, ChatMessage)
                            else ChatMessage(role=MessageRole.USER, content=user_msg))
        # an integration's own wire format: JSON tool specs, not tool objects
        return {"messages": messages, "tools": [t.metadata.to_openai_tool() for t in tools],
                "tool_choice": "auto", **kwargs}

    def get_tool_calls_from_response(self, response: ChatResponse,
                                     error_on_no_tool_call: bool = True, **kwargs: Any
                                     ) -> list[ToolSelection]:
        calls = response.message.additional_kwargs.get("tool_calls") or []
        if not calls and error_on_no_tool_call:
            raise ValueError("Expected at least one tool call, but got 0 tool calls.")
        return [ToolSelection(tool_id=c["id"], tool_name=c["name"],
                              tool_kwargs=json.loads(c["arguments"])) for c in calls]
