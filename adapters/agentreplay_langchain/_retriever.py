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
from agentreplay_langchain._convert import retriever_request, revive
from agentreplay_langchain._tree import tracked_path


class ReplayRetriever(BaseRetriever):
    """A retriever that returns the recorded documents (ids, content, metadata incl. scores) as
    fresh copies. The calls recorded inside the original retriever (its embedding call) are not
    expected again."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    player: Player = Field(exclude=True)

    def _documents(self, query: str, run_manager: Any) -> list[Document]:
        path = tracked_path(run_manager.handlers, run_manager.run_id) if run_manager else None
        documents = revive(self.player.next("retriever", "retriever", retriever_request(query),
                                            path=path))
        return list(documents)

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self._documents(query, run_manager)

    async def _aget_relevant_documents(
            self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._documents(query, run_manager)
