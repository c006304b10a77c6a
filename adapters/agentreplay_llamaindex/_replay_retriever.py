"""`ReplayRetriever` and `ReplayReranker`: serve recorded nodes (ids, text, metadata, scores)."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from pydantic import Field, PrivateAttr

from agentreplay_core import Player
from agentreplay_llamaindex._convert import nodes_from_json, nodes_json
from agentreplay_llamaindex._live import aserve, serve
from agentreplay_llamaindex._recorded import recorded_name
from agentreplay_llamaindex._tracking import replay_path
from agentreplay_llamaindex._tree import RETRIEVER_ENTRY_POINTS as _RETRIEVE


class ReplayRetriever(BaseRetriever):
    """A retriever returning the nodes recorded for each query.

    The embedding calls recorded inside the original retriever count as replayed with it.

    Args:
        player: the `Player` of `store.replay(run_id)`.
        name: the recorded retriever (its class name, e.g. `VectorIndexRetriever`); needed
            only when the run used several kinds of retriever.
        live: the real retriever to continue with after a divergence, in a replay opened
            with `on_divergence="live"`; its results are recorded into the forked run.
    """

    def __init__(self, player: Player, *, name: str | None = None,
                 live: BaseRetriever | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.player = player
        self.name = recorded_name(player, "retriever", name)
        self.live = live

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        live = self.live
        return serve(self.player, "retriever", self.name, {"query": query_bundle.query_str},
                     live=None if live is None else lambda: live.retrieve(query_bundle),
                     to_step=nodes_json, from_step=nodes_from_json,
                     path=replay_path(_RETRIEVE))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        live = self.live
        return await aserve(self.player, "retriever", self.name,
                            {"query": query_bundle.query_str},
                            live=None if live is None else lambda: live.aretrieve(query_bundle),
                            to_step=nodes_json, from_step=nodes_from_json,
                            path=replay_path(_RETRIEVE))


class ReplayReranker(BaseNodePostprocessor):
    """A node postprocessor returning the recorded result of a rerank step.

    Args:
        player: the `Player` of `store.replay(run_id)`.
        name: the recorded reranker model name; needed only when the run used several.
        top_n: the `top_n` the recorded reranker was called with.
        live: the real reranker to continue with after a divergence (`on_divergence="live"`).
    """

    recorded_name: str = Field(description="The recorded reranker model name.")
    top_n: int = Field(default=2)
    _player: Player = PrivateAttr()
    _live: BaseNodePostprocessor | None = PrivateAttr()

    def __init__(self, player: Player, *, name: str | None = None, top_n: int = 2,
                 live: BaseNodePostprocessor | None = None) -> None:
        super().__init__(recorded_name=recorded_name(player, "rerank", name),  # type: ignore[call-arg]
                         top_n=top_n)
        self._player = player
        self._live = live

    @classmethod
    def class_name(cls) -> str:
        return "ReplayReranker"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        request = {"query": query_bundle.query_str if query_bundle else None,
                   "node_ids": [n.node.node_id for n in nodes], "top_n": self.top_n}
        live = self._live
        return serve(self._player, "rerank", self.recorded_name, request,
                     live=None if live is None
                     else lambda: live.postprocess_nodes(nodes, query_bundle=query_bundle),
                     to_step=nodes_json, from_step=nodes_from_json, path=replay_path())
