"""Embeddings have no LangChain callback: a recording wrapper and a replay backend."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import Any, TypeVar

from langchain_core.embeddings import Embeddings

from agentreplay_core import Player, Recorder
from agentreplay_core._keys import at_path, clean_label, current_path, join_path
from agentreplay_core._player import checked_player
from agentreplay_core._recorded_errors import FAILURES, FAILURES_AND_CANCELLATION, error_to_record
from agentreplay_langchain._requests import embedding_request

T = TypeVar("T")

#: the step name of embedding calls unless a name is given (use one per embedding model when
#: an agent uses several)
EMBEDDINGS = "embeddings"


def _floats(vectors: Any) -> list[list[float]]:
    """Vectors as exact float64 lists (a numpy float32 array becomes the same values)."""
    # map runs float() in C: half the time of a comprehension on 768-dimension vectors
    return [list(map(float, vector)) for vector in vectors]


class RecordingEmbeddings(Embeddings):
    """Wraps an `Embeddings` and records every call with its exact vectors (also stored as
    pgvector rows). Calls made while a recorded retriever or tool runs are recorded inside it,
    so that replaying the retriever does not expect them again."""

    def __init__(self, inner: Embeddings, recorder: Recorder, *, name: str = EMBEDDINGS) -> None:
        self.inner = inner
        self.recorder = recorder
        self.name = name

    def _path(self) -> str:
        """The path the call's step gets (the recorder's default), under which the call runs:
        what it records itself (an id it draws with `entropy=True`) is then inside it, and
        not expected again when `ReplayEmbeddings` serves the call."""
        return clean_label(join_path(current_path(), f"embedding:{self.name}"))

    def _record(self, mode: str, texts: Sequence[str], call: Callable[[], T]) -> T:
        request = embedding_request(mode, texts)
        started, t0, path = datetime.now(timezone.utc), time.perf_counter(), self._path()
        try:
            with at_path(path):
                result = call()
        except FAILURES as exc:
            self._store_error(request, exc, started, t0, path)
            raise
        self._store(request, mode, result, started, t0, path)
        return result

    async def _arecord(self, mode: str, texts: Sequence[str],
                       call: Callable[[], Awaitable[T]]) -> T:
        request = embedding_request(mode, texts)
        started, t0, path = datetime.now(timezone.utc), time.perf_counter(), self._path()
        try:
            with at_path(path):
                result = await call()
        except FAILURES_AND_CANCELLATION as exc:
            # a cancelled call (a timeout) is recorded too, so that replay does not hand the
            # result of the retry that followed to the call that never finished
            self._store_error(request, exc, started, t0, path)
            raise
        self._store(request, mode, result, started, t0, path)
        return result

    def _store_error(self, request: dict[str, Any], exc: BaseException, started: datetime,
                     t0: float, path: str) -> None:
        self.recorder.record("embedding", self.name, request, error_to_record(exc),
                             is_error=True, path=path, started_at=started,
                             duration_ms=(time.perf_counter() - t0) * 1000)

    def _store(self, request: dict[str, Any], mode: str, result: Any, started: datetime,
               t0: float, path: str) -> None:
        try:
            output: Any = _floats(result) if mode == "documents" else _floats([result])[0]
        except Exception:
            output = result  # not vectors of numbers: stored as it is (or marked unencodable)
        self.recorder.record("embedding", self.name, request, output, path=path,
                             started_at=started, duration_ms=(time.perf_counter() - t0) * 1000)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._record("documents", texts, lambda: self.inner.embed_documents(texts))

    def embed_query(self, text: str) -> list[float]:
        return self._record("query", [text], lambda: self.inner.embed_query(text))

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await self._arecord("documents", texts,
                                   lambda: self.inner.aembed_documents(texts))

    async def aembed_query(self, text: str) -> list[float]:
        return await self._arecord("query", [text], lambda: self.inner.aembed_query(text))


class ReplayEmbeddings(Embeddings):
    """Returns the recorded vectors, bit for bit, for the same texts in the same mode.

    With `live=` (the real embeddings) and a replay opened with `on_divergence="live"`, texts
    the recording does not hold are embedded live from the first divergence on, and recorded
    into the forked run.
    """

    def __init__(self, player: Player, *, name: str = EMBEDDINGS,
                 live: Embeddings | None = None) -> None:
        self.player = checked_player(player, "ReplayEmbeddings")
        self.name = name
        self.live = live

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        live = self.live
        result: list[list[float]] = self.player.next(
            "embedding", self.name, embedding_request("documents", texts),
            live=(lambda: _floats(live.embed_documents(texts))) if live else None)
        return result

    def embed_query(self, text: str) -> list[float]:
        live = self.live
        result: list[float] = self.player.next(
            "embedding", self.name, embedding_request("query", [text]),
            live=(lambda: _floats([live.embed_query(text)])[0]) if live else None)
        return result

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        live = self.live

        async def embed() -> list[list[float]]:
            assert live is not None
            return _floats(await live.aembed_documents(texts))

        result: list[list[float]] = await self.player.anext(
            "embedding", self.name, embedding_request("documents", texts),
            live=embed if live else None)
        return result

    async def aembed_query(self, text: str) -> list[float]:
        live = self.live

        async def embed() -> list[float]:
            assert live is not None
            return _floats([await live.aembed_query(text)])[0]

        result: list[float] = await self.player.anext(
            "embedding", self.name, embedding_request("query", [text]),
            live=embed if live else None)
        return result
