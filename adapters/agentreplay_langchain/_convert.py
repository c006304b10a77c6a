"""Pure conversions between LangChain objects and what agentreplay stores.

Results are stored inside a versioned envelope and revived with an explicit allow-list.
Messages and generations of LangChain's own classes are stored from their fields (version 2:
a copy of each field, no LangChain serialisation on the agent's thread; a value plain JSON
cannot hold, a parsed pydantic object, left to the core codec); anything else goes through
`langchain_core.load.dumpd` (version 1, the same on langchain-core 0.3 and 1.x), which
recordings made before version 2 hold too.
Requests are in `_requests`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
from langchain_core.documents import Document
from langchain_core.load import dumpd
from langchain_core.load.serializable import Serializable
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    ChatMessageChunk,
    FunctionMessage,
    FunctionMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, Generation, GenerationChunk

from agentreplay_core import SerializationError, decode, encode
from agentreplay_core._codec import TAG
from agentreplay_core._key_order import (
    INNER,
    in_key_order,
    keep_key_order,
    key_order,
)
from agentreplay_core._stable_repr import stable_repr
from agentreplay_langchain._compat import make_loader
from agentreplay_langchain._construct import (
    ENVELOPE,
    ENVELOPE_VERSION,
    FIELDS_VERSION,
    NO_VALUE,
    SCALARS,
    built_message,
    chat_generation,
    shape,
)
from agentreplay_langchain._sends import SEND, revive_send, sends_revived, sends_tagged
from agentreplay_langchain._store_writes import STORE_WRITES

#: beside a message's fields: the key order of the dicts inside them (tool calls and their
#: arguments, response and usage metadata, additional kwargs, content blocks), where it is not
#: the sorted order (`agentreplay_core._key_order`): code that renders messages with `str()`
#: into a prompt (a summarizer) sends the model's order live
FIELDS_ORDER = "fields_order"
#: what recordings before it kept: the order of the tool calls alone
TOOL_CALLS_ORDER = "tool_calls_order"
#: beside a tool message's artifact: the key order of its dicts, also those of the pydantic
#: objects in it (a retriever tool's Documents: their metadata), where it is not the sorted
#: one; a node that puts the sources into its next prompt shows them in that order
ARTIFACT_ORDER = "artifact_order"
#: beside a generation's `generation_info`, and a model step's `llm_output`: their key order,
#: where it is not the sorted one (LangChain merges both into the message's
#: `response_metadata`, which code logs, hashes or prompts with)
INFO_ORDER, LLM_OUTPUT_ORDER = "generation_info_order", "llm_output_order"

_MESSAGE_CLASSES: dict[str, type[BaseMessage]] = {cls.__name__: cls for cls in (
    AIMessage, AIMessageChunk, HumanMessage, HumanMessageChunk, SystemMessage,
    SystemMessageChunk, ToolMessage, ToolMessageChunk, ChatMessage, ChatMessageChunk,
    FunctionMessage, FunctionMessageChunk)}
_GENERATION_CLASSES: dict[str, type[Generation]] = {cls.__name__: cls for cls in (
    ChatGeneration, ChatGenerationChunk, Generation, GenerationChunk)}
#: the only classes a recording may revive: results, never models, prompts or anything that
#: carries configuration (a tampered recording must not be able to build a client)
ALLOWED_CLASSES: tuple[type[Serializable], ...] = (
    *_MESSAGE_CLASSES.values(), *_GENERATION_CLASSES.values(), Document)
#: revives dumpd payloads of the allowed classes only
_load = make_loader(ALLOWED_CLASSES)
_MAX_DEPTH = 100  # deeper field values go through dumpd, which has its own limit
_NO_ARTIFACT = object()


class _NotPlain(Exception):
    """A field value that plain JSON cannot hold exactly: the object is stored with dumpd."""


def _plain_copy(value: Any, depth: int = 0) -> Any:
    """A deep copy of JSON-native data (exactly str, int, float, bool, None, and dicts with
    str keys and lists of those); raises `_NotPlain` for anything else, subclasses included."""
    kind = type(value)
    if kind in SCALARS:
        return value
    if depth > _MAX_DEPTH:
        raise _NotPlain
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            out[key] = item if type(item) in SCALARS else _plain_copy(item, depth + 1)
        return out
    if kind is list:
        return [item if type(item) in SCALARS else _plain_copy(item, depth + 1)
                for item in value]
    raise _NotPlain


def _same(value: Any) -> Any:
    return value


def _fresh(value: Any) -> Any:
    """A copy of the dicts and lists of a stored (decoded) value; other values as they are."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in SCALARS else _fresh(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in SCALARS else _fresh(v) for v in value]
    return value


_CONTAINERS = (dict, list)


def _message_fields(message: BaseMessage) -> dict[str, Any] | None:
    """A message of an allowed class in the version-2 envelope, or None to use dumpd."""
    name = type(message).__name__
    if _MESSAGE_CLASSES.get(name) is not type(message):
        return None  # a subclass (only dumpd knows what it adds), or no message at all
    defaults = shape(type(message)).plain_defaults
    # fields left at their defaults are left out: smaller, and a recording made with another
    # langchain-core line (0.3 has `example`, 1.x `chunk_position`) still revives equal to its
    # own messages
    try:
        fields = _fields(message, defaults, _plain_copy)
    except _NotPlain:
        fields = _fields(message, defaults, _copy_for_the_codec)
    stored = {ENVELOPE: FIELDS_VERSION, "class": name, "fields": fields}
    inner = {key: spec for key, value in fields.items()
             if type(value) in _CONTAINERS and (spec := key_order(value)) is not None}
    if inner:  # (the order of the fields themselves means nothing)
        stored[FIELDS_ORDER] = {INNER: inner}
    artifact = message.__dict__.get("artifact")
    if artifact is not None:  # any value the core codec keeps, as in version 1
        keep_artifact(stored, artifact)
    return stored


def keep_artifact(stored: dict[str, Any], artifact: Any) -> None:
    stored["artifact"] = artifact  # any value the core codec keeps
    keep_key_order(stored, ARTIFACT_ORDER, artifact)


def revived_artifact(stored: dict[str, Any], artifact: Any,
                     copied: Callable[[Any], Any]) -> Any:
    """A tool message's artifact, its dicts in the recorded order (or sorted: recordings
    before the order was kept, dicts that were sorted)."""
    return in_key_order(copied(artifact), copied(stored.get(ARTIFACT_ORDER)))


def _fields(message: BaseMessage, defaults: dict[str, Any],
            copied: Callable[[Any], Any]) -> dict[str, Any]:
    """A message's fields that are not at their defaults (extra ones too), each `copied`."""
    fields = {key: value if type(value) in SCALARS else copied(value)
              for key, value in message.__dict__.items()
              if key != "type" and key != "artifact" and not _is_default(
                  value, defaults.get(key, NO_VALUE))}
    extra = message.__pydantic_extra__
    if extra:
        fields.update({key: copied(value) for key, value in extra.items()})
    return fields


def _copy_for_the_codec(value: Any) -> Any:
    """A field value that is not plain JSON (a parsed pydantic object in `additional_kwargs`,
    as structured output puts there): a copy the core codec keeps as it keeps any value, and
    revives as that object. One it cannot keep (a lock, a client) makes the step unencodable,
    counted in the run's stats, and its replay raise `SerializationError` naming it: dumpd,
    which stored such messages before, turned it into None without a word."""
    try:
        return _plain_copy(value)
    except _NotPlain:
        pass
    try:
        return copy.deepcopy(value)
    except Exception:  # a live resource: stored as unencodable, counted
        return value


def _is_default(value: Any, default: Any) -> bool:
    return type(value) is type(default) and value == default


def _fields_envelope(value: Any) -> dict[str, Any] | None:
    """`value` in the version-2 envelope, or None if it must go through dumpd."""
    name = type(value).__name__
    if _GENERATION_CLASSES.get(name) is not type(value):
        return _message_fields(value)
    try:
        info = _plain_copy(value.generation_info)
    except _NotPlain:
        info = _copy_for_the_codec(value.generation_info)
    if isinstance(value, ChatGeneration):  # or ChatGenerationChunk
        message = _message_fields(value.message)
        if message is None:
            return None
        stored = {ENVELOPE: FIELDS_VERSION, "class": name, "message": message,
                  "generation_info": info}
    elif type(value.text) is not str:
        return None
    else:
        stored = {ENVELOPE: FIELDS_VERSION, "class": name, "text": value.text,
                  "generation_info": info}
    keep_key_order(stored, INFO_ORDER, info)
    return stored


#: beside a Document's dumpd: the key order of its metadata, where it is not the sorted one
METADATA_ORDER = "metadata_order"


#: orjson refuses what it would otherwise turn into a string (dataclasses, datetimes, str/int/
#: dict subclasses) instead of converting it
_NATIVE_ONLY = (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
                | orjson.OPT_PASSTHROUGH_SUBCLASS)


def storable(value: Any) -> Any:
    """`value` if the core can store it, else its repr: side information (model parameters,
    the events a tool reported) must never make the result it travels with unstorable."""
    try:  # what orjson takes natively the core encodes too: usually no trial encode at all
        orjson.dumps(value, option=_NATIVE_ONLY)
        return value
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        encode(value)
    except SerializationError:
        return stable_repr(value)
    return value


def dump(value: Any) -> Any:
    """A LangChain result as stored: allow-listed objects in an envelope, anything else (a
    LangGraph Command, a plain tool result) as is, for the core codec, but for the LangGraph
    Sends in it (a Command's `goto`), which are in an envelope of their own."""
    stored = _fields_envelope(value)
    if stored is not None:
        return stored
    if isinstance(value, ToolMessage) and value.artifact is not None:
        # dumpd cannot keep arbitrary artifacts; the core codec keeps far more of them
        bare = value.model_copy(update={"artifact": None})
        stored = {ENVELOPE: ENVELOPE_VERSION, "dumpd": dumpd(bare)}
        keep_artifact(stored, value.artifact)
        return stored
    if isinstance(value, ALLOWED_CLASSES):
        envelope = {ENVELOPE: ENVELOPE_VERSION, "dumpd": dumpd(value)}
        if isinstance(value, Document):
            # a prompt that renders the metadata shows its keys in their order, which the
            # store does not keep (`agentreplay_core._key_order`)
            keep_key_order(envelope, METADATA_ORDER, value.metadata)
        return envelope
    if isinstance(value, list) and value and all(isinstance(v, ALLOWED_CLASSES) for v in value):
        return [dump(v) for v in value]
    try:
        copied = copy.deepcopy(value)
    except Exception:  # a live resource (a lock, a connection): stored as unencodable, counted
        return value
    return sends_tagged(copied)


#: a model step's protocol events (langchain-core 1.8's `on_stream_event`), and their key order
#: where it is not the sorted one
EVENTS, EVENTS_ORDER = "events", "events_order"

#: beside a tool's stored result: the key order of a dict or list it returned as it is (a
#: tool invoked without a tool call), where it is not the sorted one
RESULT_ORDER = "result_order"


#: a retriever step's output that holds more than the documents (what the retriever reported
#: while it ran: custom events, LangGraph stream writes) keeps them under this key
DOCUMENTS = "documents"


def retriever_output(documents: list[Any], effects: dict[str, Any]) -> Any:
    """A retriever step's output: the dumped documents, alone (as always when the retriever
    reported nothing) or with its effects."""
    return {DOCUMENTS: documents, **effects} if effects else documents


def tool_output(result: Any, tool_call_id: str | None,
                store_writes: list[list[Any]] | None = None) -> dict[str, Any]:
    """What a tool's step stores: its result, the tool call it answered, and what it wrote
    to LangGraph's store (`_store_writes`)."""
    output = {"result": dump(result), "tool_call_id": tool_call_id}
    keep_key_order(output, RESULT_ORDER, result)  # a dict a chain may str() into a prompt
    if store_writes:
        output[STORE_WRITES] = store_writes
    return output


def tool_result(output: Any) -> Any:
    """The inverse of `tool_output`: the result a tool returned (new objects each call)."""
    if not isinstance(output, dict):
        return output
    return in_key_order(revive(output["result"]), output.get(RESULT_ORDER))


def revive(stored: Any, *, fresh: bool = False) -> Any:
    """The inverse of `dump`, over any list or dict holding envelopes: new objects each call.

    Reads envelope versions 1 and 2 and builds objects of the allowed classes only.
    `fresh=True` says that `stored` was decoded for this call alone: its dicts and lists then
    go into the revived objects without being copied first.
    """
    return _revive(stored, _same if fresh else _fresh)


def revive_encoded(stored: Any) -> Any:
    """`revive` of a value still in the core codec's encoded form (a part of a step's stored
    output, which stays unchanged): each part is decoded once, on the way."""
    return _revive(stored, _decoded)


def _revive(stored: Any, copied: Callable[[Any], Any]) -> Any:
    if isinstance(stored, dict):
        if ENVELOPE in stored:
            return _revive_envelope(stored, copied)
        if copied is _decoded and TAG in stored:  # an encoded value: a tuple, bytes, ...
            return _revive(decode(stored), _same)
        return {k: _revive(v, copied) for k, v in stored.items()}
    if isinstance(stored, list):
        return [_revive(v, copied) for v in stored]
    # (a tuple, a dataclass: a tool's `Command`, with the Sends of its `goto`)
    return stored if type(stored) in SCALARS else sends_revived(stored, copied, _revive)


def _decoded(value: Any) -> Any:
    """`decode(value)`, with the empty and scalar values of message fields handled inline."""
    kind = type(value)
    if kind in SCALARS:
        return value
    if kind is dict:
        if not value:
            return {}
        if TAG in value:
            return decode(value)
        return {k: v if type(v) in SCALARS else _decoded(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in SCALARS else _decoded(v) for v in value] if value else []
    return decode(value)


def _revive_envelope(stored: dict[str, Any], copied: Callable[[Any], Any]) -> Any:
    version = stored[ENVELOPE]
    if version == FIELDS_VERSION and type(version) is int:
        return _revive_fields(stored, copied)
    if version == ENVELOPE_VERSION and type(version) is int:
        value = _load(stored["dumpd"] if copied is not _decoded else decode(stored["dumpd"]))
        artifact = stored.get("artifact", _NO_ARTIFACT)
        if artifact is not _NO_ARTIFACT and isinstance(value, ToolMessage):
            value.artifact = revived_artifact(stored, artifact, copied)
        if isinstance(value, Document) and type(value.metadata) is dict:
            value.metadata = in_key_order(value.metadata, stored.get(METADATA_ORDER))
        return value
    raise ValueError(
        f"recorded LangChain object has envelope version {version!r}; this agentreplay reads "
        f"versions {ENVELOPE_VERSION} and {FIELDS_VERSION}: upgrade agentreplay to replay it")


def _refused(name: Any) -> ValueError:
    return ValueError(
        f"recorded LangChain object of class {name!r} is not allowed: a replay revives only "
        f"messages and generations ({', '.join([*_MESSAGE_CLASSES, *_GENERATION_CLASSES])}); "
        "the recording was edited or made by another tool")


def _revive_fields(stored: dict[str, Any], copied: Callable[[Any], Any]) -> Any:
    name = stored.get("class")
    if name == SEND:
        return revive_send(stored, copied, _revive)
    message_class = _MESSAGE_CLASSES.get(name) if type(name) is str else None
    if message_class is not None:
        fields = copied(stored.get("fields"))
        if type(fields) is not dict:
            raise ValueError(f"recorded {name} has no fields dict; the recording is damaged")
        order = stored.get(FIELDS_ORDER)
        if order is None and TOOL_CALLS_ORDER in stored:
            order = {INNER: {"tool_calls": stored[TOOL_CALLS_ORDER]}}
        # every dict in the recorded order, or sorted (not in the order the store gave)
        fields = in_key_order(fields, copied(order))
        artifact = stored.get("artifact", _NO_ARTIFACT)
        if artifact is not _NO_ARTIFACT and "artifact" in message_class.model_fields:
            fields["artifact"] = revived_artifact(stored, artifact, copied)
        return built_message(message_class, fields)
    generation_class = _GENERATION_CLASSES.get(name) if type(name) is str else None
    if generation_class is None:
        raise _refused(name)
    info = in_key_order(copied(stored.get("generation_info")), copied(stored.get(INFO_ORDER)))
    if issubclass(generation_class, ChatGeneration):
        inner = stored.get("message")
        message = _revive_envelope(inner, copied) if isinstance(inner, dict) and \
            ENVELOPE in inner else None
        if not isinstance(message, BaseMessage):
            raise ValueError(f"recorded {name} holds no message envelope; the recording is "
                             "damaged")
        if generation_class is ChatGeneration:
            return chat_generation(message, info)
        return generation_class(message=message, generation_info=info)
    text = copied(stored.get("text"))
    if type(text) is not str:
        raise ValueError(f"recorded {name} has no text; the recording is damaged")
    return generation_class(text=text, generation_info=info)
