"""agentreplay for LangChain and LangGraph: record any chain, agent or graph; replay it offline.

Record by adding `RecordingCallbackHandler(recorder)` to a run's callbacks (or everything at
once with `instrument(recorder)`); replay by swapping in `ReplayChatModel`, `ReplayTool`
(`replay_tools`), `ReplayRetriever` and `ReplayEmbeddings`, or `ReplayMiddleware` for a
`create_agent` agent. Or let the environment decide with no change to the code:
`instrument()` and the `replayable_*` factories follow `AGENTREPLAY_MODE=record|replay|off` (or
a `with Session(...)` block).

Example:
    >>> from langchain_core.language_models import GenericFakeChatModel
    >>> from langchain_core.messages import AIMessage
    >>> from agentreplay_core import open_store
    >>> from agentreplay_langchain import RecordingCallbackHandler, ReplayChatModel
    >>> store = open_store("memory:")
    >>> live = GenericFakeChatModel(messages=iter([AIMessage("Paris")]))
    >>> with store.record(name="capital") as rec:
    ...     answer = live.invoke("Capital of France?",
    ...                          config={"callbacks": [RecordingCallbackHandler(rec)]})
    >>> with store.replay(rec.run_id) as player:
    ...     replayed = ReplayChatModel(player=player).invoke("Capital of France?")
    >>> replayed.content, replayed.id == answer.id
    ('Paris', True)
"""

from __future__ import annotations

from typing import Any

try:
    import langchain_core  # noqa: F401 - the framework this adapter needs
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        'agentreplay_langchain needs langchain-core: pip install "agentreplay[langchain]"'
    ) from exc

from agentreplay_core import AbandonedStreamReplayed
from agentreplay_langchain import _batch_index
from agentreplay_langchain._chat_model import ReplayChatModel
from agentreplay_langchain._compat import SUPPORTED_LANGCHAIN_CORE
from agentreplay_langchain._embeddings import RecordingEmbeddings, ReplayEmbeddings
from agentreplay_langchain._handler import RecordingCallbackHandler
from agentreplay_langchain._instrument import Instrumentation, instrument
from agentreplay_langchain._llm import ReplayLLM
from agentreplay_langchain._replayable import (
    replayable_chat_model,
    replayable_embeddings,
    replayable_llm,
    replayable_retriever,
    replayable_tools,
)
from agentreplay_langchain._retriever import ReplayRetriever
from agentreplay_langchain._tools import (
    ReplayTool,
    areplay_tool_call,
    replay_tool_call,
    replay_tools,
)
from agentreplay_langchain._tree import RunTreeTracker

_batch_index.install()


def __getattr__(name: str) -> Any:
    # The middleware needs the `langchain` package (1.x), which the rest does not.
    if name == "ReplayMiddleware":
        try:
            from agentreplay_langchain._middleware import ReplayMiddleware
        except ImportError as exc:
            raise ImportError(
                "ReplayMiddleware needs langchain 1.x (create_agent): pip install 'langchain>=1'"
            ) from exc
        return ReplayMiddleware
    if name in ("ReplayDecisionModel", "replayable_decision_model"):
        # decision models (classifiers) are langchain-core 1.8's
        try:
            from agentreplay_langchain import _decision_model
        except ImportError as exc:
            raise ImportError(
                f"{name} needs langchain-core with decision models: pip install -U langchain-core"
            ) from exc
        return getattr(_decision_model, name)
    raise AttributeError(f"module 'agentreplay_langchain' has no attribute {name!r}")


__all__ = [
    "SUPPORTED_LANGCHAIN_CORE",
    "AbandonedStreamReplayed",
    "Instrumentation",
    "RecordingCallbackHandler",
    "RecordingEmbeddings",
    "ReplayChatModel",
    "ReplayDecisionModel",
    "ReplayEmbeddings",
    "ReplayLLM",
    "ReplayMiddleware",
    "ReplayRetriever",
    "ReplayTool",
    "RunTreeTracker",
    "areplay_tool_call",
    "instrument",
    "replay_tool_call",
    "replay_tools",
    "replayable_chat_model",
    "replayable_decision_model",
    "replayable_embeddings",
    "replayable_llm",
    "replayable_retriever",
    "replayable_tools",
]
