"""agentreplay for LlamaIndex: record query engines and agents, replay them offline.

Example (record a run, then replay it with no model behind it):

    >>> from llama_index.core.llms import MockLLM
    >>> from agentreplay_core import open_store
    >>> from agentreplay_llamaindex import ReplayLLM, instrument
    >>> store = open_store("memory:")
    >>> with store.record(name="hello") as rec, instrument(rec):
    ...     live = MockLLM(max_tokens=3).complete("Say hello").text
    >>> with store.replay(rec.run_id) as player:
    ...     ReplayLLM(player=player).complete("Say hello").text == live
    True

`instrument()` is per context: concurrent requests, each instrumented in its own thread or
asyncio task, record into their own runs (here two tasks under one event loop):

    >>> import asyncio
    >>> async def handle(prompt):
    ...     with store.record(name=prompt) as run, instrument(run):
    ...         await MockLLM(max_tokens=3).acomplete(prompt)
    ...     return run.run_id
    >>> async def serve():
    ...     return await asyncio.gather(handle("first"), handle("second"))
    >>> [[s.input["prompt"] for s in store.load_steps(r)] for r in asyncio.run(serve())]
    [['first'], ['second']]

Fork and continue: a changed call, and every call after it, goes to the live model and is
recorded into a new run that points back at the recording:

    >>> with store.replay(rec.run_id, on_divergence="live") as player:
    ...     llm = ReplayLLM(player=player, live=MockLLM(max_tokens=3))
    ...     _ = llm.complete("Say goodbye")
    >>> store.get_run(player.fork.run_id).parent_run_id == rec.run_id
    True

With no change to the code, the environment can decide instead: `instrument()` with no argument
and the `replayable_*` factories follow `AGENTREPLAY_MODE=record|replay|off` (or a
`with Session(...)` block); with no session they leave everything live:

    >>> from agentreplay_llamaindex import replayable_llm
    >>> live = MockLLM(max_tokens=3)
    >>> with instrument() as handle:  # no session: an inert handle
    ...     replayable_llm(live) is live, handle.active
    (True, False)

Importing it without llama-index-core installed raises an ImportError naming the extra.
"""

from __future__ import annotations

try:
    import llama_index.core  # noqa: F401 - the framework this adapter needs
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        'agentreplay_llamaindex needs llama-index-core: pip install "agentreplay[llamaindex]"'
    ) from exc

from agentreplay_core import AbandonedStreamReplayed
from agentreplay_llamaindex import _loop_threads, _parallel_jobs
from agentreplay_llamaindex._compat import SUPPORTED_VERSIONS
from agentreplay_llamaindex._handlers import RecordingEventHandler, RecordingSpanHandler
from agentreplay_llamaindex._instrument import Instrumentation, instrument
from agentreplay_llamaindex._recording_tool import RecordingTool, recording_tools
from agentreplay_llamaindex._replay_embedding import ReplayEmbedding
from agentreplay_llamaindex._replay_llm import ReplayLLM
from agentreplay_llamaindex._replay_retriever import ReplayReranker, ReplayRetriever
from agentreplay_llamaindex._replay_tools import ReplayTool, replay_tools
from agentreplay_llamaindex._replayable import (
    replayable_embedding,
    replayable_llm,
    replayable_retriever,
    replayable_tools,
)

__all__ = [
    "SUPPORTED_VERSIONS",
    "AbandonedStreamReplayed",
    "Instrumentation",
    "RecordingEventHandler",
    "RecordingSpanHandler",
    "RecordingTool",
    "ReplayEmbedding",
    "ReplayLLM",
    "ReplayReranker",
    "ReplayRetriever",
    "ReplayTool",
    "instrument",
    "recording_tools",
    "replay_tools",
    "replayable_embedding",
    "replayable_llm",
    "replayable_retriever",
    "replayable_tools",
]

_loop_threads.install()
_parallel_jobs.install()
