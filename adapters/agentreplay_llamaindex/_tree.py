"""The span tree of a recording: who called whom, and each call's deterministic path.

LlamaIndex span ids carry a random uuid, so they cannot be paths. A span's path is its parent's
path plus `Class.method#n`, n counting the same segment under the same parent. Replay
boundaries rely on it: the embedding call inside a retriever gets a path below the
retriever's, so replaying the retriever consumes it.

Spans of models, embeddings, retrievers, postprocessors and tools are named by their role
(`llm.chat`, `retriever.retrieve`, `tool:add`), not their class: the replay stand-ins have
other classes, and a replay tracked with `instrument(player)` must find the recorded paths.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from datetime import datetime, timezone
from typing import Any, NamedTuple

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms.llm import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.tools.types import BaseTool
from llama_index.core.types import BasePydanticProgram

from agentreplay_core import current_path
from agentreplay_core._keys import join_path

#: spans remembered after they exit, the most recent ones: an event can still come after its
#: span exits (a stream's chunks and end come as the host consumes it) and must find the span's
#: path, but a long session must not keep every span it saw (~860 bytes a chat otherwise,
#: the span ids included)
KEEP_EXITED = 10_000

#: a retriever's public methods: the span its nodes (or its error) are recorded at
RETRIEVER_ENTRY_POINTS = frozenset({"retrieve", "aretrieve"})
#: the BaseEmbedding entry points that fire embedding events (recorded vectors sit below them)
EMBEDDING_ENTRY_POINTS = frozenset({
    "get_query_embedding", "aget_query_embedding", "get_text_embedding",
    "aget_text_embedding", "get_text_embedding_batch", "aget_text_embedding_batch"})


class SpanInfo:
    """What the recording needs to know about one span (slots: one is made per span)."""

    __slots__ = ("children", "exited", "inner", "instance", "instance_id", "method", "name",
                 "nested", "owner", "parent", "path", "started", "structured", "t0")

    def __init__(self, parent: str | None, path: str, method: str, owner: str = "",
                 name: str = "", instance_id: int = 0) -> None:
        self.parent = parent
        self.path = path
        self.method = method
        #: "llm", "embedding", "retriever", "tool" or "" for any other span
        self.owner = owner
        self.name = name
        self.instance_id = instance_id
        #: the LLM itself while its span is open (tool calls are read through it)
        self.instance: Any = None
        #: a tool span inside a span of the same tool (FunctionTool.acall -> call), or a tool
        #: of the framework's own (`handoff`): not recorded
        self.nested = False
        #: an LLM span opened by a call of the same LLM being recorded (CustomLLM.chat ->
        #: complete): its events are not recorded
        self.inner = False
        #: inside structured_predict or a pydantic program: its tool only builds the output
        #: object, locally, and runs again in replay, so it is not recorded
        self.structured = False
        #: the span has ended (`SpanTree.exited`)
        self.exited = False
        #: path segment -> how many children of this span used it (made at the first child)
        self.children: dict[str, int] | None = None
        #: when a tool, embedding or retriever span started (its steps' timing)
        self.started: datetime | None = None
        self.t0 = 0.0

    def timing(self) -> dict[str, Any]:
        """`started_at` and `duration_ms` for `Recorder.record`: the span's start and the time
        since (nothing known for other spans)."""
        if self.started is None:
            return {}
        return {"started_at": self.started,
                "duration_ms": (time.perf_counter() - self.t0) * 1000.0}


class _Shape(NamedTuple):
    """What a span's class and method say about it, worked out once per pair."""

    owner: str
    #: the path segment, escaped for `join_path`; None for a tool (named per instance)
    segment: str | None
    structured: bool


_SHAPES: dict[tuple[type, str], _Shape] = {}


def _shape_of(cls: type, method: str) -> _Shape:
    owner = ("llm" if issubclass(cls, LLM) else "embedding" if issubclass(cls, BaseEmbedding)
             else "retriever" if issubclass(cls, BaseRetriever)
             else "tool" if issubclass(cls, BaseTool) else "")
    # by role for the parts replay swaps, else `Class.method`
    role = owner or ("postprocessor" if issubclass(cls, BaseNodePostprocessor) else "")
    segment = None if owner == "tool" else \
        f"{role}.{method.rsplit('.', 1)[-1]}" if role else method
    shape = _Shape(owner, None if segment is None else segment.replace("/", "%2F"),
                   issubclass(cls, BasePydanticProgram) or "structured_predict" in method)
    _SHAPES[(cls, method)] = shape
    return shape


def _name(owner: str, instance: Any) -> str:
    """The step name of the object a span runs on (LLMs are named at their start event)."""
    if owner == "embedding":
        return str(getattr(instance, "model_name", "") or type(instance).__name__)
    if owner == "retriever":
        return type(instance).__name__
    if owner == "tool":
        try:
            return str(instance.metadata.get_name())
        except Exception:  # a tool without a usable name is still a tool call
            return type(instance).__name__
    return ""


def _framework_tool(tool: Any) -> bool:
    """A tool LlamaIndex's agents make for their own control flow (`AgentWorkflow`'s
    `handoff`, which moves the workflow's state to the next agent): deterministic given the
    model's tool call, and it must run again in replay for the state it sets, so it is no
    recorded input."""
    for attr in ("_async_fn", "_fn"):
        module = getattr(getattr(tool, attr, None), "__module__", None)
        if isinstance(module, str) and module.startswith(_AGENT_PACKAGE):
            return True
    return False


_AGENT_PACKAGE = "llama_index.core.agent."


def method_of(span_id: str) -> str:
    """`Class.method` from a LlamaIndex span id (`Class.method-<uuid>`)."""
    return span_id.split("-", 1)[0]


class SpanTree:
    """Spans seen since recording started; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: dict[str, SpanInfo] = {}
        self._roots: dict[tuple[str, str], int] = {}
        self._counts: dict[str, int] = {}
        #: ids of exited spans, oldest first (see `KEEP_EXITED`)
        self._exited: deque[str] = deque()

    def enter(self, span_id: str, parent_id: str | None, instance: Any) -> SpanInfo:
        method = span_id.split("-", 1)[0]
        shape = _SHAPES.get((type(instance), method)) or _shape_of(type(instance), method)
        owner = shape.owner
        name = "" if owner in ("", "llm") else _name(owner, instance)
        segment = shape.segment
        if segment is None:
            segment = f"tool:{name}".replace("/", "%2F")
        with self._lock:
            parent = self._spans.get(parent_id) if parent_id else None
            info = SpanInfo(parent_id if parent else None, "", method, owner, name,
                            id(instance))
            if parent is not None:
                children = parent.children
                if children is None:
                    children = parent.children = {}
                n = children.get(segment, 0)
                children[segment] = n + 1
                info.path = f"{parent.path}/{segment}#{n}" if parent.path else f"{segment}#{n}"
            else:
                info.path = self._root_path(segment)
            if owner == "llm":
                info.instance = instance
            elif owner:  # the LLM's calls are timed by their own start and end events
                info.started = datetime.now(timezone.utc)
                info.t0 = time.perf_counter()
            if shape.structured or (parent is not None and parent.structured):
                info.structured = True
            if owner == "tool":
                info.nested = info.structured or _framework_tool(instance) or any(
                    a.owner == "tool" and a.name == name for a in self._ancestors(info))
            self._spans[span_id] = info
        return info

    def _root_path(self, segment: str) -> str:
        """A root span's path: under whatever path the host code runs at (`path_scope`)."""
        base = current_path()
        n = self._roots.get((base, segment), 0)
        self._roots[(base, segment)] = n + 1
        return join_path(base, f"{segment}#{n}")

    def _ancestors(self, info: SpanInfo) -> list[SpanInfo]:
        out = []
        seen = 0
        while info.parent is not None and seen < 10_000:  # a cycle would be a bug; stop
            parent = self._spans.get(info.parent)
            if parent is None:
                break
            out.append(parent)
            info = parent
            seen += 1
        return out

    def get(self, span_id: str | None) -> SpanInfo | None:
        if span_id is None:
            return None
        with self._lock:
            return self._spans.get(span_id)

    def ancestor_ids(self, span_id: str) -> list[str]:
        with self._lock:
            ids: list[str] = []
            info = self._spans.get(span_id)
            while info is not None and info.parent is not None and len(ids) < 10_000:
                ids.append(info.parent)
                info = self._spans.get(info.parent)
            return ids

    def exited(self, span_id: str) -> SpanInfo | None:
        """The span has ended: forget its object, and the oldest exited span beyond
        `KEEP_EXITED`; returns what is known about it."""
        with self._lock:
            info = self._spans.get(span_id)
            if info is not None and not info.exited:
                info.exited = True
                info.instance = None  # do not keep the LLM alive for the whole run
                exited = self._exited
                exited.append(span_id)
                if len(exited) > KEEP_EXITED:
                    forgotten = self._spans.pop(exited.popleft(), None)
                    if forgotten is not None:  # its texts' counter (`count`) goes with it
                        self._counts.pop(forgotten.path, None)
            return info

    def count(self, base: str) -> int:
        """0, 1, 2, ... on successive calls with the same `base` (texts of one embedding span)."""
        with self._lock:
            n = self._counts.get(base, 0)
            self._counts[base] = n + 1
            return n

    def counted(self, base: str) -> int:
        """How many times `count(base)` was called."""
        with self._lock:
            return self._counts.get(base, 0)

    def enclosing(self, span_id: str | None, methods: frozenset[str]) -> SpanInfo | None:
        """The span itself or its nearest ancestor running one of `methods` (bare names)."""
        with self._lock:
            info = self._spans.get(span_id) if span_id else None
            for _ in range(10_000):
                if info is None or info.method.rsplit(".", 1)[-1] in methods:
                    return info
                info = self._spans.get(info.parent) if info.parent else None
            return None

    def loose_path(self, segment: str) -> str:
        """A path for an event outside any known span."""
        with self._lock:
            return self._root_path(segment.replace("/", "%2F"))

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()
            self._roots.clear()
            self._counts.clear()
            self._exited.clear()
