"""agentreplay core: record an agent's nondeterministic inputs, replay them offline.

Example:
    >>> from agentreplay_core import open_store
    >>> store = open_store("memory:")
    >>> with store.record(name="hello") as rec:
    ...     answer = rec.call("tool", "add", {"a": 1, "b": 2}, lambda: 3)
    >>> with store.replay(rec.run_id) as player:
    ...     player.next("tool", "add", {"a": 1, "b": 2})
    3
    >>> store.verify(rec.run_id).ok
    True
"""

from agentreplay_core._codec import canonical_bytes, decode, encode, register_type
from agentreplay_core._env_session import session_from_env
from agentreplay_core._errors import (
    AgentReplayError,
    IntegrityError,
    NetworkAccessDuringReplay,
    ReplayDivergence,
    ReplayedCancellation,
    ReplayedError,
    RunNotFound,
    SerializationError,
    StoreError,
)
from agentreplay_core._integrity import Problem, VerifyReport
from agentreplay_core._keys import current_path, match_key, path_scope, strip_volatile
from agentreplay_core._model import EmbeddingMatch, Run, RunStatus, Step, StepKind
from agentreplay_core._netguard import network_guard
from agentreplay_core._player import Player
from agentreplay_core._protocol import RunStore
from agentreplay_core._recorder import Recorder, RecordingStats
from agentreplay_core._session import Mode, Session, active_session, register_session_hook
from agentreplay_core._spool import SpoolFlushError
from agentreplay_core._store import Store
from agentreplay_core.stores._open import open_store

__version__ = "0.1.0"

__all__ = [
    "AgentReplayError",
    "EmbeddingMatch",
    "IntegrityError",
    "Mode",
    "NetworkAccessDuringReplay",
    "Player",
    "Problem",
    "Recorder",
    "RecordingStats",
    "ReplayDivergence",
    "ReplayedCancellation",
    "ReplayedError",
    "Run",
    "RunNotFound",
    "RunStatus",
    "RunStore",
    "SerializationError",
    "Session",
    "SpoolFlushError",
    "Step",
    "StepKind",
    "Store",
    "StoreError",
    "VerifyReport",
    "__version__",
    "active_session",
    "canonical_bytes",
    "current_path",
    "decode",
    "encode",
    "match_key",
    "network_guard",
    "open_store",
    "path_scope",
    "register_session_hook",
    "register_type",
    "session_from_env",
    "strip_volatile",
]
