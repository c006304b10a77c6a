"""`replayable_*`: the live backend, or its replay, as the active agentreplay session asks.

The agent builds its backends through these factories once, and the same code records
(`AGENTREPLAY_MODE=record`, or a `with Session("record", ...)` block), replays
(`AGENTREPLAY_MODE=replay`) or runs untouched (no session, or mode off). Each factory decides
when it is called: build the backends after the session is active (inside the `with Session`
block; the environment's session opens at the first call that asks for it).

- no session: the live object itself.
- record: the live object, recorded through `instrument()` (call it first; a `with Session`
  block does it by itself); embeddings, which LangChain's callbacks do not see, are wrapped in
  `RecordingEmbeddings`.
- replay: the replay backend, with the live object as its `live=` counterpart when the replay
  goes live at a divergence (`on_divergence="live"`); the live object is never called
  otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel, BaseLLM
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool

from agentreplay_core import Player, Recorder, active_session
from agentreplay_core._session import replay_player
from agentreplay_langchain._chat_model import ReplayChatModel
from agentreplay_langchain._embeddings import EMBEDDINGS, RecordingEmbeddings, ReplayEmbeddings
from agentreplay_langchain._instrument import active_instrumentation
from agentreplay_langchain._llm import ReplayLLM
from agentreplay_langchain._retriever import ReplayRetriever
from agentreplay_langchain._tools import replay_tools


def _player(what: str) -> Player | None:
    return replay_player(what, "LangChain", "agentreplay_langchain", _instrumented_for)


def _instrumented_for() -> Recorder | Player | None:
    current = active_instrumentation()
    return current.target if current is not None else None


def replayable_chat_model(live: BaseChatModel) -> BaseChatModel:
    """`live`, or a `ReplayChatModel` answering from the replayed run (see module docs)."""
    player = _player("chat model")
    if player is None:
        return live
    return ReplayChatModel.standing_in_for(live, player, live=player.can_go_live)


def replayable_llm(live: BaseLLM) -> BaseLLM:
    """`live`, or a `ReplayLLM` answering from the replayed run (text completion)."""
    player = _player("LLM")
    if player is None:
        return live
    return ReplayLLM(player=player, live=live if player.can_go_live else None)


def replayable_tools(tools: Sequence[BaseTool]) -> list[BaseTool]:
    """`tools`, or `ReplayTool`s with their names and schemas that never run them (unless the
    replay goes live at a divergence)."""
    player = _player("tools")
    if player is None:
        return list(tools)
    return list(replay_tools(player, tools))


def replayable_retriever(live: BaseRetriever) -> BaseRetriever:
    """`live`, or a `ReplayRetriever` serving the recorded documents."""
    player = _player("retriever")
    if player is None:
        return live
    return ReplayRetriever(player=player, live=live if player.can_go_live else None)


def replayable_embeddings(live: Embeddings, *, name: str = EMBEDDINGS) -> Embeddings:
    """`live`; while recording, `RecordingEmbeddings` around it; in replay, `ReplayEmbeddings`
    serving the recorded vectors. `name` tells several embedding models apart."""
    session = active_session()
    if session is None:
        return live
    if session.recorder is not None:
        return RecordingEmbeddings(live, session.recorder, name=name)
    if session.player is not None:
        player = session.player
        return ReplayEmbeddings(player, name=name, live=live if player.can_go_live else None)
    return live
