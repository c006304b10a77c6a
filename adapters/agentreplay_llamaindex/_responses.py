"""LLM responses as a step stores them: plain JSON wherever LlamaIndex's own types are.

A `ChatResponse` or `CompletionResponse` is stored as a dict of its fields (`"type": "chat"` or
`"completion"`), its message as role, additional kwargs and blocks, each text block as
`{"block_type": "text", "text": ...}`. What is not LlamaIndex's own (the provider's `raw`
payload, other content blocks, logprobs, objects in additional kwargs) stays as it is, for
the codec to store exactly. Plain JSON is what the recorder stores cheapest: the codec's
walk over three nested pydantic objects and an enum cost more than the rest of the step.

Replay rebuilds the objects (`response_from_json`); responses of other classes (an
integration's own subclass) and runs recorded before this format hold the objects
themselves, which the codec restores, and pass through unchanged.
"""

from __future__ import annotations

import copy
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    MessageRole,
    TextBlock,
)
from pydantic import BaseModel

from agentreplay_llamaindex._convert import encodable

#: the fields this module stores; with other fields (another llama-index-core line) the
#: objects are stored as they are, which is always exact
_KNOWN = (tuple(ChatResponse.model_fields) == ("message", "raw", "delta", "logprobs",
                                               "additional_kwargs")
          and tuple(CompletionResponse.model_fields) == ("text", "additional_kwargs", "raw",
                                                         "logprobs", "delta")
          and tuple(ChatMessage.model_fields) == ("role", "additional_kwargs", "blocks")
          and tuple(TextBlock.model_fields) == ("block_type", "text"))


def response_json(response: Any, *, snapshot: bool = False) -> Any:
    """`response` as stored (None stays None). `snapshot`: copy what the integration may
    still change (a streamed chunk is stored when the stream ends; streaming integrations
    reuse and mutate the message object); a finished call's response is encoded at once."""
    if response is None:
        return None
    kind = type(response)
    if _KNOWN and kind is ChatResponse:
        message = _message_json(response.message, snapshot)
        if message is not None:
            return {"type": "chat", "message": message, "raw": encodable_raw(response.raw),
                    "delta": response.delta, "logprobs": response.logprobs,
                    "additional_kwargs": _kwargs(response.additional_kwargs, snapshot)}
    elif _KNOWN and kind is CompletionResponse:
        return {"type": "completion", "text": response.text,
                "raw": encodable_raw(response.raw), "delta": response.delta,
                "logprobs": response.logprobs,
                "additional_kwargs": _kwargs(response.additional_kwargs, snapshot)}
    return _object(response, snapshot)


def encodable_raw(raw: Any) -> Any:
    """The provider payload, or the marker of one the codec cannot store."""
    return raw if raw is None else encodable(raw)


def _kwargs(kwargs: Any, snapshot: bool) -> Any:
    return copy.deepcopy(kwargs) if snapshot and kwargs else kwargs


def _message_json(message: Any, snapshot: bool) -> dict[str, Any] | None:
    if type(message) is not ChatMessage or type(message.role) is not MessageRole:
        return None
    blocks: list[Any] = []
    block: Any
    for block in message.blocks:
        if type(block) is TextBlock and type(block.text) is str:
            blocks.append({"block_type": "text", "text": block.text})
        elif isinstance(block, BaseModel):  # image, tool call, ...: the codec stores it
            blocks.append(copy.deepcopy(block) if snapshot else block)
        else:  # not a content block (model_construct lets anything in): keep the message
            return None
    return {"role": message.role.value,
            "additional_kwargs": _kwargs(message.additional_kwargs, snapshot),
            "blocks": blocks}


def _object(response: Any, snapshot: bool) -> Any:
    """A response of another class, stored as the object (its `raw` only if storable)."""
    if not isinstance(response, BaseModel):
        return response
    update: dict[str, Any] = {}
    if "raw" in type(response).model_fields:
        update["raw"] = encodable_raw(getattr(response, "raw", None))
    message = getattr(response, "message", None)
    if snapshot and isinstance(message, BaseModel):
        update["message"] = copy.deepcopy(message)
    return response.model_copy(update=update) if update else response


def response_from_json(stored: Any) -> Any:
    """The response object a stored response stands for (objects pass through)."""
    if not isinstance(stored, dict):
        return stored
    kind = stored.get("type")
    if kind == "chat":
        held = stored["message"]
        blocks = [TextBlock(text=b["text"]) if isinstance(b, dict) else b
                  for b in held["blocks"]]
        # model_construct: the recorded state as it was, without the validators running
        # again (one turns an `images` kwarg into blocks, which the recording holds already)
        message = ChatMessage.model_construct(role=MessageRole(held["role"]),
                                              additional_kwargs=held["additional_kwargs"],
                                              blocks=blocks)
        return ChatResponse.model_construct(
            message=message, raw=stored["raw"], delta=stored["delta"],
            logprobs=stored["logprobs"], additional_kwargs=stored["additional_kwargs"])
    if kind == "completion":
        return CompletionResponse.model_construct(
            text=stored["text"], raw=stored["raw"], delta=stored["delta"],
            logprobs=stored["logprobs"], additional_kwargs=stored["additional_kwargs"])
    return stored
