"""Run store backends. Open one with `agentreplay_core.open_store`."""

from __future__ import annotations

from typing import Any

from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish, StoreBackend
from agentreplay_core.stores._file import FileBackend
from agentreplay_core.stores._memory import MemoryBackend

__all__ = [
    "EmbeddingRow",
    "FileBackend",
    "MemoryBackend",
    "PendingStep",
    "PostgresBackend",
    "RunFinish",
    "StoreBackend",
]


def __getattr__(name: str) -> Any:
    # psycopg is an optional extra: import the PostgreSQL backend only when asked for.
    if name == "PostgresBackend":
        from agentreplay_core.stores._postgres import PostgresBackend

        return PostgresBackend
    raise AttributeError(name)
