"""`replayable_*`: the live LlamaIndex object, or its replay stand-in, as the active agentreplay
session asks.

The program builds its LLM, embedding model, retriever and tools through these factories, and
the same code records (`AGENTREPLAY_MODE=record`, or a `with Session("record", ...)` block),
replays (`AGENTREPLAY_MODE=replay`) or runs untouched (no session, or mode off). Each factory
decides when it is called: build them after the session is active (inside the `with Session`
block; the environment's session opens at the first call that asks for it).

- no session, or recording: the live object itself; a recording records it through
  `instrument()` (call it first; a `with Session` block does it by itself).
- replay: the stand-in (`ReplayLLM`, `ReplayEmbedding`, `ReplayRetriever`, `replay_tools`),
  with the live object as its `live=` counterpart when the replay goes live at a divergence
  (`on_divergence="live"`); the live object is never called otherwise.

The stand-in replays what the live object was recorded as (its model name, or the retriever's
class); when the run recorded only one of its kind, that one. `name=` overrides it.
"""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms.llm import LLM
from llama_index.core.tools.types import BaseTool

from agentreplay_core import Player, Recorder
from agentreplay_core._session import replay_player
from agentreplay_llamaindex import _routing
from agentreplay_llamaindex._llm_calls import llm_step_name
from agentreplay_llamaindex._recorded import recorded_names
from agentreplay_llamaindex._replay_embedding import ReplayEmbedding
from agentreplay_llamaindex._replay_llm import ReplayLLM
from agentreplay_llamaindex._replay_retriever import ReplayRetriever
from agentreplay_llamaindex._replay_tools import replay_tools


def _player(what: str) -> Player | None:
    return replay_player(what, "LlamaIndex", "agentreplay_llamaindex", _instrumented_for)


def _instrumented_for() -> Recorder | Player | None:
    current = _routing.active()
    return current.target if current is not None else None


def _recorded_as(player: Player, kind: str, name: str | None, own: str | None) -> str | None:
    """`name`, else the live object's own name if the run recorded it, else None (the only
    recorded one; the stand-in says which names exist when there are several)."""
    if name is not None:
        return name
    return own if own is not None and own in recorded_names(player, kind) else None


def _model_name(live: LLM) -> str | None:
    """The name the recording gave `live`'s steps."""
    try:
        return llm_step_name(live.metadata.model_name, live)
    except Exception:  # an integration whose metadata needs a connection or a key
        return None


def replayable_llm(live: LLM, *, name: str | None = None) -> LLM:
    """`live`, or a `ReplayLLM` serving the recorded responses (see module docs)."""
    player = _player("LLM")
    if player is None:
        return live
    return ReplayLLM(player, name=_recorded_as(player, "llm", name, _model_name(live)),
                     live=live if player.can_go_live else None)


def replayable_embedding(live: BaseEmbedding, *, name: str | None = None) -> BaseEmbedding:
    """`live`, or a `ReplayEmbedding` serving the recorded vectors, bit for bit."""
    player = _player("embedding model")
    if player is None:
        return live
    own = getattr(live, "model_name", None) or type(live).__name__
    return ReplayEmbedding(player, name=_recorded_as(player, "embedding", name, str(own)),
                           live=live if player.can_go_live else None)


def replayable_retriever(live: BaseRetriever, *, name: str | None = None) -> BaseRetriever:
    """`live`, or a `ReplayRetriever` serving the recorded nodes (the embedding calls recorded
    inside the retriever count as replayed with it)."""
    player = _player("retriever")
    if player is None:
        return live
    return ReplayRetriever(player, name=_recorded_as(player, "retriever", name,
                                                     type(live).__name__),
                           live=live if player.can_go_live else None)


def replayable_tools(tools: Sequence[BaseTool]) -> list[BaseTool]:
    """`tools`, or `ReplayTool`s with their metadata that never run them (unless the replay
    goes live at a divergence)."""
    player = _player("tools")
    if player is None:
        return list(tools)
    return list(replay_tools(player, tools, live=player.can_go_live))
