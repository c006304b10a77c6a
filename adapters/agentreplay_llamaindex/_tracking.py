"""Where a replayed call sits in the run tree, while `instrument(player)` tracks the spans
of this context (each concurrent replay, tracked in its own thread or task, has its own tree).

The replay stand-ins ask for the path the recording gave the same call, so that calls with
equal requests running concurrently (two branches of a workflow asking the same thing) each
get their own recorded result. Without tracking they get no path and equal calls are served
in recorded order.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from llama_index.core.instrumentation.span import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from pydantic import PrivateAttr

from agentreplay_core import Player, current_path
from agentreplay_core._keys import join_path
from agentreplay_llamaindex._compat import active_span_id
from agentreplay_llamaindex._routing import tracked_tree
from agentreplay_llamaindex._tree import SpanTree

log = logging.getLogger("agentreplay.llamaindex")


def replay_path(entry_points: frozenset[str] | None = None) -> str | None:
    """The recorded path of the call running now, or None when no replay is tracked.

    `entry_points`: the public methods whose span the recording named the call after (the
    stand-in answers in a private method spanned below it).
    """
    tree = tracked_tree()
    if tree is None:
        return None
    span_id = active_span_id()
    info = tree.enclosing(span_id, entry_points) if entry_points else tree.get(span_id)
    return info.path if info is not None else None


def live_path(kind: str, name: str, entry_points: frozenset[str] | None = None) -> str:
    """The path a live call made during a replay is recorded at in the forked run."""
    return replay_path(entry_points) or join_path(current_path(), f"{kind}:{name}")


class TreeSpans:
    """Builds the span tree during a replay, as the recording does; `instrument(player)`
    routes the spans of its own context here (see `_routing`)."""

    def __init__(self, tree: SpanTree, player: Player | None = None) -> None:
        self.tree = tree
        #: told where models, tools, retrievers and rerankers start: one that ran for real
        #: (not swapped for its stand-in) leaves its recorded step unasked, and the replay's
        #: end says why
        self.player = player

    def enter(self, span_id: str, parent_id: str | None, instance: Any,
              bound: inspect.BoundArguments) -> None:
        try:
            info = self.tree.enter(span_id, parent_id, instance)
            if self.player is not None and (
                    info.owner or info.path.rpartition("/")[2].startswith("postprocessor.")):
                self.player.started_at(info.path)
        except Exception:  # LlamaIndex would swallow it: say so, and replay goes on pathless
            log.exception("agentreplay: could not track LlamaIndex span %s", span_id)

    def exit(self, span_id: str, bound: inspect.BoundArguments, result: Any) -> None:
        self.tree.exited(span_id)

    def drop(self, span_id: str, bound: inspect.BoundArguments, err: BaseException | None
             ) -> None:
        self.tree.exited(span_id)


class TrackingSpanHandler(BaseSpanHandler[SimpleSpan]):
    """`TreeSpans` as a span handler (for attaching by hand to a dispatcher)."""

    _spans: TreeSpans = PrivateAttr()

    def __init__(self, tree: SpanTree, player: Player | None = None) -> None:
        super().__init__(open_spans={}, completed_spans=[], dropped_spans=[],
                         current_span_ids={})
        self._spans = TreeSpans(tree, player)

    @property
    def spans(self) -> TreeSpans:
        return self._spans

    @classmethod
    def class_name(cls) -> str:
        return "AgentReplayTrackingSpanHandler"

    def new_span(self, id_: str, bound_args: inspect.BoundArguments,
                 instance: Any | None = None, parent_span_id: str | None = None,
                 tags: dict[str, Any] | None = None, **kwargs: Any) -> SimpleSpan | None:
        self._spans.enter(id_, parent_span_id, instance, bound_args)
        return None

    def prepare_to_exit_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, result: Any | None = None,
                             **kwargs: Any) -> SimpleSpan | None:
        self._spans.exit(id_, bound_args, result)
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, err: BaseException | None = None,
                             **kwargs: Any) -> SimpleSpan | None:
        self._spans.drop(id_, bound_args, err)
        return None
