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

from typing import TYPE_CHECKING, Any

# Names are imported on first use (PEP 562): the pytest plugin loads this package in every
# pytest run of an environment where agentreplay is installed, and importing everything (pydantic
# models, the codec, the stores) would add about 0.4 s to each of them.
if TYPE_CHECKING:
    from agentreplay_core._codec import canonical_bytes, decode, encode, register_type
    from agentreplay_core._env_session import session_from_env
    from agentreplay_core._errors import (
        AbandonedStreamReplayed,
        AgentReplayError,
        IntegrityError,
        NetworkAccessDuringReplay,
        ReplayDivergence,
        ReplayedCancellation,
        ReplayedError,
        ReplayedInterruption,
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
    from agentreplay_core._redact import Redactor
    from agentreplay_core._redact_rules import DEFAULT_RULES as DEFAULT_REDACTION_RULES
    from agentreplay_core._redact_rules import RedactionRule
    from agentreplay_core._session import Mode, Session, active_session, register_session_hook
    from agentreplay_core._spool import SpoolFlushError
    from agentreplay_core._store import Store
    from agentreplay_core.stores._open import open_store

#: public name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    "AgentReplayError": ("agentreplay_core._errors", "AgentReplayError"),
    "DEFAULT_REDACTION_RULES": ("agentreplay_core._redact_rules", "DEFAULT_RULES"),
    "EmbeddingMatch": ("agentreplay_core._model", "EmbeddingMatch"),
    "IntegrityError": ("agentreplay_core._errors", "IntegrityError"),
    "AbandonedStreamReplayed": ("agentreplay_core._errors", "AbandonedStreamReplayed"),
    "Mode": ("agentreplay_core._session", "Mode"),
    "NetworkAccessDuringReplay": ("agentreplay_core._errors", "NetworkAccessDuringReplay"),
    "Player": ("agentreplay_core._player", "Player"),
    "Problem": ("agentreplay_core._integrity", "Problem"),
    "Recorder": ("agentreplay_core._recorder", "Recorder"),
    "RecordingStats": ("agentreplay_core._recorder", "RecordingStats"),
    "RedactionRule": ("agentreplay_core._redact_rules", "RedactionRule"),
    "Redactor": ("agentreplay_core._redact", "Redactor"),
    "ReplayDivergence": ("agentreplay_core._errors", "ReplayDivergence"),
    "ReplayedCancellation": ("agentreplay_core._errors", "ReplayedCancellation"),
    "ReplayedError": ("agentreplay_core._errors", "ReplayedError"),
    "ReplayedInterruption": ("agentreplay_core._errors", "ReplayedInterruption"),
    "Run": ("agentreplay_core._model", "Run"),
    "RunNotFound": ("agentreplay_core._errors", "RunNotFound"),
    "RunStatus": ("agentreplay_core._model", "RunStatus"),
    "RunStore": ("agentreplay_core._protocol", "RunStore"),
    "SerializationError": ("agentreplay_core._errors", "SerializationError"),
    "Session": ("agentreplay_core._session", "Session"),
    "SpoolFlushError": ("agentreplay_core._spool", "SpoolFlushError"),
    "Step": ("agentreplay_core._model", "Step"),
    "StepKind": ("agentreplay_core._model", "StepKind"),
    "Store": ("agentreplay_core._store", "Store"),
    "StoreError": ("agentreplay_core._errors", "StoreError"),
    "VerifyReport": ("agentreplay_core._integrity", "VerifyReport"),
    "active_session": ("agentreplay_core._session", "active_session"),
    "canonical_bytes": ("agentreplay_core._codec", "canonical_bytes"),
    "current_path": ("agentreplay_core._keys", "current_path"),
    "decode": ("agentreplay_core._codec", "decode"),
    "encode": ("agentreplay_core._codec", "encode"),
    "match_key": ("agentreplay_core._keys", "match_key"),
    "network_guard": ("agentreplay_core._netguard", "network_guard"),
    "open_store": ("agentreplay_core.stores._open", "open_store"),
    "path_scope": ("agentreplay_core._keys", "path_scope"),
    "register_session_hook": ("agentreplay_core._session", "register_session_hook"),
    "register_type": ("agentreplay_core._codec", "register_type"),
    "session_from_env": ("agentreplay_core._env_session", "session_from_env"),
    "strip_volatile": ("agentreplay_core._keys", "strip_volatile"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'agentreplay_core' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "DEFAULT_REDACTION_RULES",
    "AbandonedStreamReplayed",
    "AgentReplayError",
    "EmbeddingMatch",
    "IntegrityError",
    "Mode",
    "NetworkAccessDuringReplay",
    "Player",
    "Problem",
    "Recorder",
    "RecordingStats",
    "RedactionRule",
    "Redactor",
    "ReplayDivergence",
    "ReplayedCancellation",
    "ReplayedError",
    "ReplayedInterruption",
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
