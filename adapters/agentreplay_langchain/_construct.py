"""Building LangChain's result objects from what agentreplay stored, without running pydantic's
validation again.

The stored values were validated when the agent's model made the objects, and `dump` stored
exact copies of them; validating them again costs more than the rest of a replayed call.
Values of another shape (an older or edited recording, a newer langchain-core) are validated
as usual, so a damaged recording still fails with LangChain's own error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from agentreplay_core._model import constructed

SCALARS = frozenset({str, int, float, bool, type(None)})

#: marks a stored LangChain object; the number is the envelope's format version
ENVELOPE = "agentreplay.langchain"
#: version 1: `{ENVELOPE: 1, "dumpd": ..., "artifact"?: ...}`, the object as `dumpd` makes it
ENVELOPE_VERSION = 1
#: version 2: `{ENVELOPE: 2, "class": "AIMessage", "fields": {...}, "artifact"?: ...}` for a
#: message; `{ENVELOPE: 2, "class": "ChatGeneration", "message": <message envelope>,
#: "generation_info": ...}` or `{..., "class": "Generation", "text": ..., ...}` for a generation
FIELDS_VERSION = 2
#: a field with no value yet (in a template), or a stored field that is absent
NO_VALUE: Any = object()
#: the Python types a stored value of each message field may have (None: any); a field not
#: listed has none, so that a message with it is validated (fields of a newer langchain-core)
_FIELD_TYPES: dict[str, tuple[type, ...] | None] = {
    "content": (str, list), "additional_kwargs": (dict,), "response_metadata": (dict,),
    "name": (str, type(None)), "id": (str, type(None)), "tool_calls": (list,),
    "invalid_tool_calls": (list,), "usage_metadata": (dict, type(None)),
    "tool_call_chunks": (list,), "chunk_position": (str, type(None)), "tool_call_id": (str,),
    "status": (str,), "role": (str,), "example": (bool,), "artifact": None,
}


class Shape(NamedTuple):
    """What storing and building a message of one class needs to know of its fields."""

    types: dict[str, tuple[type, ...] | None]  # each field but `type`
    template: dict[str, Any]  # every field in order: its scalar default, or NO_VALUE
    fresh: tuple[tuple[str, Callable[[], Any]], ...]  # defaults made anew each time ([], {})
    required: tuple[str, ...]  # fields a message cannot be built without
    plain_defaults: dict[str, Any]  # the default of each field that has one, to compare with


_SHAPES: dict[type[BaseMessage], Shape] = {}


def shape(cls: type[BaseMessage]) -> Shape:
    found = _SHAPES.get(cls)
    if found is not None:
        return found
    types: dict[str, tuple[type, ...] | None] = {}
    template: dict[str, Any] = {}
    fresh: list[tuple[str, Callable[[], Any]]] = []
    required: list[str] = []
    for name, info in cls.model_fields.items():
        template[name] = NO_VALUE
        if name == "type":
            template[name] = str(info.default)
            continue
        types[name] = _FIELD_TYPES.get(name, ())
        factory = info.default_factory
        default = info.default
        if factory is not None and not getattr(info, "default_factory_takes_data", False):
            fresh.append((name, factory))  # type: ignore[arg-type]
        elif factory is None and not info.is_required() and type(default) in SCALARS:
            template[name] = default
        elif factory is None and not info.is_required() and default in ([], {}):
            fresh.append((name, list if type(default) is list else dict))  # 0.3: `= []`
        else:
            required.append(name)
    plain = {name: value for name, value in template.items()
             if value is not NO_VALUE and name != "type"}
    plain.update((name, make()) for name, make in fresh)
    built = _SHAPES[cls] = Shape(types, template, tuple(fresh), tuple(required), plain)
    return built


def _validated(cls: type[BaseMessage], fields: dict[str, Any]) -> BaseMessage:
    try:
        return cls(**fields)
    except (TypeError, KeyError, ValueError) as exc:  # ValueError: pydantic's errors too
        raise ValueError(
            f"a recorded {cls.__name__} cannot be built from its stored fields ({exc!r}): the "
            "recording is damaged or comes from an incompatible langchain-core") from exc


def built_message(cls: type[BaseMessage], fields: dict[str, Any]) -> BaseMessage:
    """`cls(**fields)` for fields as `dump` stored them (owned by the new message): equal to
    it, with the same fields in the same order."""
    found = shape(cls)
    types = found.types
    extra: dict[str, Any] = {}
    for name, value in fields.items():
        allowed = types.get(name, NO_VALUE)
        if allowed is NO_VALUE:  # not a field of this class: kept as pydantic keeps extras
            extra[name] = value
        elif allowed is not None and type(value) not in allowed:
            return _validated(cls, fields)
    for name in found.required:
        if name not in fields:
            return _validated(cls, fields)
    values = found.template.copy()
    for name, make in found.fresh:
        if name not in fields:
            values[name] = make()
    if extra:
        values.update((k, v) for k, v in fields.items() if k not in extra)
    else:
        values.update(fields)
    # the fields set are the stored ones, extras included (as validation has them, less the
    # fields its validators assign, such as `invalid_tool_calls` of a chunk with tool calls)
    return constructed(cls, values, set(fields), extra)


#: ChatGeneration and ChatResult have the fields these builders set (else they validate)
_GENERATION_TYPE = ChatGeneration.model_fields["type"].default
_KNOWN_GENERATION = tuple(ChatGeneration.model_fields) == ("text", "generation_info", "type",
                                                            "message")
_KNOWN_RESULT = tuple(ChatResult.model_fields) == ("generations", "llm_output")


def chat_generation(message: BaseMessage, generation_info: Any) -> ChatGeneration:
    """`ChatGeneration(message=..., generation_info=...)`: its text is the content, when the
    content is a string (the one case where every langchain-core version agrees on it)."""
    if _KNOWN_GENERATION and type(message.content) is str and (
            generation_info is None or type(generation_info) is dict):
        return constructed(ChatGeneration, {"text": message.content,
                                            "generation_info": generation_info,
                                            "type": _GENERATION_TYPE, "message": message},
                           {"text", "generation_info", "message"})
    return ChatGeneration(message=message, generation_info=generation_info)


def chat_result(generations: list[ChatGeneration], llm_output: Any) -> ChatResult:
    """`ChatResult(generations=..., llm_output=...)` for generations built here."""
    if _KNOWN_RESULT and (llm_output is None or type(llm_output) is dict) and all(
            isinstance(g, ChatGeneration) for g in generations):
        return constructed(ChatResult, {"generations": generations, "llm_output": llm_output},
                           {"generations", "llm_output"})
    return ChatResult(generations=generations, llm_output=llm_output)
