"""Where a LangChain run sits in the run tree, as a path that is the same on every run.

LangChain's run ids are random, so a step's path is built from the names of its ancestors and
their positional tags (`seq:step:2`, `map:key:context`, `graph:step:3`, `retry:attempt:1`),
plus an occurrence number among identical siblings. While a model, tool or retriever runs, the
core's current path is set to its path, so what is recorded inside it (an embedding call, the clock)
is known to be inside it and is not expected again when it is replayed as a whole. LangGraph tasks
and the branches of a RunnableParallel set it too, so that what concurrent ones draw is told apart.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from agentreplay_core._keys import _current_path, join_path
from agentreplay_langchain._decisions import DECISION_MODEL, is_decision_run

#: tags LangChain and LangGraph add to say where a child runs: `seq:step:N`, `map:key:K`, ...
_POSITIONAL = re.compile(r"^[a-z_]+:[a-z_]+:")
#: runs inside which the core's current path follows the run tree: what is recorded inside
#: them (an embedding call, a model's own clock or random reads) is replayed with them
BOUNDARY_TYPES = frozenset({"tool", "retriever", "chat_model", "llm", DECISION_MODEL})
_NO_TAGS: frozenset[str] = frozenset()
#: the tool call id a tool run's segment carries (`tool:weather[seq:step:1,call:ID]`)
_CALL_ID = re.compile(r"[\[,]call:([^,\]]+)[,\]]")


def call_id_of(path: str) -> str | None:
    """The tool call id in the last segment of `path`, as `_enter` put it there; else None."""
    match = _CALL_ID.search(path.rpartition("/")[2]) if "call:" in path else None
    return match.group(1) if match else None


class _Node:
    """A run seen starting: its path, tags, children's counts and the path it replaced."""

    __slots__ = ("counts", "path", "previous", "tags")

    def __init__(self, path: str, tags: frozenset[str]) -> None:
        self.path = path
        self.tags = tags
        self.counts: dict[str, int] = {}
        #: the core's current path before this run set it (boundary runs only)
        self.previous: str | None = None


def run_name(run_type: str, serialized: dict[str, Any] | None, kwargs: dict[str, Any]) -> str:
    """The name a run's path segment uses: one that replay backends share with the originals
    (a model is `chat_model` unless given a run name, since the replay model's class differs)."""
    explicit = kwargs.get("name")
    if run_type == "tool":
        return str((serialized or {}).get("name") or explicit or "tool")
    if run_type in ("retriever", DECISION_MODEL):  # the replay backends' classes differ
        return run_type
    if run_type in ("chat_model", "llm"):
        return str(explicit or run_type)
    if explicit:
        return str(explicit)
    ident = (serialized or {}).get("id")
    return str((serialized or {}).get("name")
               or (ident[-1] if isinstance(ident, list) and ident else "chain"))


def _langgraph_task(positional: list[str], metadata: Any) -> str | None:
    """For the run of a LangGraph task (it carries its own `graph:step:N` tag): "" for a node
    the graph pulled, `push:I` for the I-th `Send` of its step, so that parallel sends of the
    same node get their own paths whatever order their threads start in; else None."""
    if not any(t.startswith("graph:step:") for t in positional):
        return None
    where = metadata.get("langgraph_path") if isinstance(metadata, dict) else None
    if isinstance(where, (list, tuple)) and where and where[0] == "__pregel_push":
        return "push:" + ",".join(str(part) for part in where[1:])
    return ""


def _branch(positional: list[str]) -> bool:
    """Whether a run is a branch of a RunnableParallel (its own `map:key:K` tag)."""
    return any(t.startswith("map:key:") for t in positional)


class RunTreeTracker(BaseCallbackHandler):
    """A callback handler that knows the stable path of every run it has seen start.

    Attach it (or `RecordingCallbackHandler`, which is one) at the top of a chain; replay
    backends find it among their run manager's handlers and ask it for their path.
    """

    # Called inline in the caller's thread and context, so that setting the core's current
    # path reaches the code of the run (LangChain would otherwise call it in an executor).
    run_inline = True

    def __init__(self, *, root_path: str = "") -> None:
        super().__init__()
        #: the path runs without a known parent sit under (a live call made during a replay
        #: is recorded where the replayed call was)
        self.root_path = root_path
        self._tree_lock = threading.Lock()
        self._nodes: dict[UUID, _Node] = {}
        self._root_counts: dict[str, int] = {}

    def path_of(self, run_id: UUID) -> str | None:
        with self._tree_lock:
            node = self._nodes.get(run_id)
            return node.path if node else None

    def _enter(self, run_type: str, serialized: dict[str, Any] | None, run_id: UUID,
               parent_run_id: UUID | None, tags: Sequence[str] | None,
               kwargs: dict[str, Any]) -> str:
        own_tags = frozenset(tags) if tags else _NO_TAGS
        with self._tree_lock:
            parent = self._nodes.get(parent_run_id) if parent_run_id else None
            inherited = parent.tags if parent else _NO_TAGS
            positional = sorted(t for t in own_tags - inherited if _POSITIONAL.match(t)) \
                if own_tags else []
            segment = f"{run_type}:{run_name(run_type, serialized, kwargs)}"
            call_id = kwargs.get("tool_call_id") if run_type == "tool" else None
            if call_id:  # given to on_tool_start from langchain-core 1.2; stable under replay
                positional.append(f"call:{call_id}")
            task = _langgraph_task(positional, kwargs.get("metadata"))
            if task:
                positional.append(task)
            if positional:
                segment += "[" + ",".join(positional) + "]"
            counts = parent.counts if parent else self._root_counts
            seen = counts.get(segment, 0)
            counts[segment] = seen + 1
            if seen:
                segment += f"#{seen}"
            node = _Node(join_path(parent.path if parent else self.root_path, segment), own_tags)
            # LangGraph tasks and the branches of a RunnableParallel (`map:key:K`) run in
            # threads of their own; what they record (the message ids the reducer draws
            # there, a branch's request id) is told apart by the task's or branch's path
            # `generate()` of several prompts starts all their runs in one context before any
            # ends: they cannot each own the current path (nor be told apart inside)
            overlapping = int(kwargs.get("batch_size") or 1) > 1
            if (run_type in BOUNDARY_TYPES or task is not None or _branch(positional)) \
                    and not overlapping:
                node.previous = _current_path.get()
                _current_path.set(node.path)
            self._nodes[run_id] = node
        return node.path

    def _leave(self, run_id: UUID) -> str | None:
        with self._tree_lock:
            node = self._nodes.pop(run_id, None)
        if node is None:
            return None
        if node.previous is not None and _current_path.get() == node.path:
            _current_path.set(node.previous)
        return node.path

    # -- run starts and ends ---------------------------------------------------------------

    def on_chain_start(self, serialized: dict[str, Any], inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: list[str] | None = None,
                       **kwargs: Any) -> None:
        self._enter(DECISION_MODEL if is_decision_run(kwargs) else "chain", serialized, run_id,
                    parent_run_id, tags, kwargs)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_chat_model_start(self, serialized: dict[str, Any], messages: Any, *, run_id: UUID,
                            parent_run_id: UUID | None = None, tags: list[str] | None = None,
                            **kwargs: Any) -> None:
        self._enter("chat_model", serialized, run_id, parent_run_id, tags, kwargs)

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID,
                     parent_run_id: UUID | None = None, tags: list[str] | None = None,
                     **kwargs: Any) -> None:
        self._enter("llm", serialized, run_id, parent_run_id, tags, kwargs)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, *, run_id: UUID,
                      parent_run_id: UUID | None = None, tags: list[str] | None = None,
                      **kwargs: Any) -> None:
        self._enter("tool", serialized, run_id, parent_run_id, tags, kwargs)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_retriever_start(self, serialized: dict[str, Any], query: str, *, run_id: UUID,
                           parent_run_id: UUID | None = None, tags: list[str] | None = None,
                           **kwargs: Any) -> None:
        self._enter("retriever", serialized, run_id, parent_run_id, tags, kwargs)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._leave(run_id)


def tracked_path(handlers: Sequence[BaseCallbackHandler], run_id: UUID | None) -> str | None:
    """The path of a run according to the first tracker among `handlers` that knows it."""
    if run_id is None:
        return None
    for handler in handlers:
        if isinstance(handler, RunTreeTracker):
            path = handler.path_of(run_id)
            if path is not None:
                return path
    return None
