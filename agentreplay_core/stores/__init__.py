"""Run store backends. Open one with `agentreplay_core.open_store`."""

from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish, StoreBackend
from agentreplay_core.stores._file import FileBackend
from agentreplay_core.stores._memory import MemoryBackend

__all__ = [
    "EmbeddingRow",
    "FileBackend",
    "MemoryBackend",
    "PendingStep",
    "RunFinish",
    "StoreBackend",
]
