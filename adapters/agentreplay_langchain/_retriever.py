"""ReplayRetriever: serves the documents a retriever returned while recording."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from agentreplay_core import Player
from agentreplay_langchain._convert import dump, revive
from agentreplay_langchain._requests import retriever_request
from agentreplay_langchain._tree import tracked_path


class ReplayRetriever(BaseRetriever):
    """A retriever that returns the recorded documents (ids, content, metadata incl. scores) as
    fresh copies. The calls recorded inside the original retriever (its embedding call) are not
    expected again."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    player: Player = Field(exclude=True)
    #: the real retriever, asked from the first divergence on (`on_divergence="live"` only)
    live: BaseRetriever | None = Field(default=None, exclude=True)

    def _path(self, run_manager: Any) -> str | None:
        return tracked_path(run_manager.handlers, run_manager.run_id) if run_manager else None

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        live = self.live
        stored = self.player.next(
            "retriever", "retriever", retriever_request(query), path=self._path(run_manager),
            live=(lambda: dump(live.invoke(query))) if live else None)
        return list(revive(stored))

    async def _aget_relevant_documents(
            self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        live = self.live

        async def retrieve() -> Any:
            assert live is not None
            return dump(await live.ainvoke(query))

        stored = await self.player.anext(
            "retriever", "retriever", retriever_request(query), path=self._path(run_manager),
            live=retrieve if live else None)
        return list(revive(stored))
