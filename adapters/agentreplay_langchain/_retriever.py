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
from agentreplay_core._recorded_errors import FAILURES, recorded_error
from agentreplay_langchain._convert import DOCUMENTS, dump, retriever_output, revive
from agentreplay_langchain._custom_events import adispatch_again, dispatch_again, error_events
from agentreplay_langchain._instrument import untracked
from agentreplay_langchain._live_effects import LiveEffects
from agentreplay_langchain._requests import retriever_request
from agentreplay_langchain._stream_writes import write_again as stream_again
from agentreplay_langchain._tree import tracked_path


def _documents(stored: Any) -> list[Document]:
    held = stored.get(DOCUMENTS) if isinstance(stored, dict) else stored
    return list(revive(held))


class ReplayRetriever(BaseRetriever):
    """A retriever that returns the recorded documents (ids, content, metadata incl. scores) as
    fresh copies, after dispatching the custom events (and writing the LangGraph stream
    chunks) the retriever made. The calls recorded inside the original retriever (its
    embedding call) are not expected again."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    player: Player = Field(exclude=True)
    #: the real retriever, asked from the first divergence on (`on_divergence="live"` only)
    live: BaseRetriever | None = Field(default=None, exclude=True)

    def _path(self, run_manager: Any) -> str | None:
        return tracked_path(run_manager.handlers, run_manager.run_id) if run_manager else None

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        live, went_live = self.live, []

        def retrieve() -> Any:
            assert live is not None
            went_live.append(True)
            effects = LiveEffects()
            # untracked, with a collector of its custom events as its only callbacks: this
            # stand-in's run reports the documents (and dispatches the events) to the caller
            with untracked(), effects.collecting():
                found = live.invoke(query, config={"callbacks": [effects.events]})
            return retriever_output(dump(found), effects.into({}))

        try:
            stored = self.player.next(
                "retriever", "retriever", retriever_request(query),
                path=self._path(run_manager), live=retrieve if live else None)
        except FAILURES as replayed:  # an interrupt replayed too
            dispatch_again(run_manager, error_events(replayed))
            stream_again(recorded_error(replayed))
            raise
        dispatch_again(run_manager, stored)
        if not went_live:  # (a live retriever wrote to the stream itself)
            stream_again(stored)
        return _documents(stored)

    async def _aget_relevant_documents(
            self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        live, went_live = self.live, []

        async def retrieve() -> Any:
            assert live is not None
            went_live.append(True)
            effects = LiveEffects()
            with untracked(), effects.collecting():
                found = await live.ainvoke(query, config={"callbacks": [effects.events]})
            return retriever_output(dump(found), effects.into({}))

        try:
            stored = await self.player.anext(
                "retriever", "retriever", retriever_request(query),
                path=self._path(run_manager), live=retrieve if live else None)
        except FAILURES as replayed:  # an interrupt replayed too
            await adispatch_again(run_manager, error_events(replayed))
            stream_again(recorded_error(replayed))
            raise
        await adispatch_again(run_manager, stored)
        if not went_live:
            stream_again(stored)
        return _documents(stored)
