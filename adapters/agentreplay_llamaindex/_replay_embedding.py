"""`ReplayEmbedding`: serves recorded vectors, one per text, bit-identical float64."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import PrivateAttr

from agentreplay_core import Player, Recorder, ReplayDivergence
from agentreplay_core._keys import at_path, join_path
from agentreplay_core._recorded_errors import FAILURES, error_to_record
from agentreplay_llamaindex._recorded import recorded_name
from agentreplay_llamaindex._routing import tracked_tree
from agentreplay_llamaindex._tracking import live_path, replay_path
from agentreplay_llamaindex._tree import EMBEDDING_ENTRY_POINTS


class ReplayEmbedding(BaseEmbedding):
    """An embedding model that returns the vectors recorded for each (mode, text).

    Vectors were recorded one step per text, so batch sizes need not match the recording.

    Args:
        player: the `Player` of `store.replay(run_id)`.
        name: the recorded model name; needed only when the run used several models.
        live: the real model to continue with after a divergence, in a replay opened with
            `on_divergence="live"`: the diverging text and all later ones are embedded by it
            (the rest of a batch in one call) and recorded into the forked run.
    """

    _player: Player = PrivateAttr()
    _live: BaseEmbedding | None = PrivateAttr()

    def __init__(self, player: Player, *, name: str | None = None,
                 live: BaseEmbedding | None = None, **kwargs: Any) -> None:
        super().__init__(model_name=recorded_name(player, "embedding", name), **kwargs)
        self._player = player
        self._live = live

    @classmethod
    def class_name(cls) -> str:
        return "ReplayEmbedding"

    def _path(self) -> str | None:
        """The recorded path of the next text: the embedding span's path plus its index."""
        base = replay_path(EMBEDDING_ENTRY_POINTS)
        tree = tracked_tree()
        return None if base is None or tree is None else join_path(base, str(tree.count(base)))

    def _fork(self) -> Recorder | None:
        return self._player.fork if self._live is not None else None

    def _vectors(self, mode: str, texts: list[str]) -> list[Embedding]:
        out: list[Embedding] = []
        for i, text in enumerate(texts):
            fork, path = self._fork(), self._path()
            if fork is None:
                try:
                    out.append(self._player.next("embedding", self.model_name,
                                                 {"mode": mode, "text": text},
                                                 path=path))
                    continue
                except ReplayDivergence as diverged:
                    if self._live is None:
                        raise
                    fork = self._player.go_live(diverged)  # raises unless on_divergence="live"
            return out + self._live_vectors(fork, mode, texts[i:], path)
        return out

    async def _avectors(self, mode: str, texts: list[str]) -> list[Embedding]:
        out: list[Embedding] = []
        for i, text in enumerate(texts):
            fork, path = self._fork(), self._path()
            if fork is None:
                try:
                    out.append(await self._player.anext("embedding", self.model_name,
                                                        {"mode": mode, "text": text},
                                                        path=path))
                    continue
                except ReplayDivergence as diverged:
                    if self._live is None:
                        raise
                    fork = self._player.go_live(diverged)
            return out + await self._alive_vectors(fork, mode, texts[i:], path)
        return out

    def _live_vectors(self, fork: Recorder, mode: str, texts: list[str], path: str | None
                      ) -> list[Embedding]:
        assert self._live is not None
        started, t0 = datetime.now(timezone.utc), time.perf_counter()
        try:
            # what the client draws sits inside the step of the batch's first text, as recorded
            with at_path(self._live_path(path)):
                got = [self._live._get_query_embedding(texts[0])] if mode == "query" \
                    else self._live._get_text_embeddings(texts)
        except FAILURES as err:  # a Ctrl-C too, as a recording does
            self._record_error(fork, mode, texts[0], err, path, started, t0)
            raise
        return self._record(fork, mode, texts, got, path, started, t0)

    async def _alive_vectors(self, fork: Recorder, mode: str, texts: list[str],
                             path: str | None) -> list[Embedding]:
        assert self._live is not None
        started, t0 = datetime.now(timezone.utc), time.perf_counter()
        try:
            with at_path(self._live_path(path)):
                got = [await self._live._aget_query_embedding(texts[0])] if mode == "query" \
                    else await self._live._aget_text_embeddings(texts)
        except FAILURES as err:  # a Ctrl-C too, as a recording does
            self._record_error(fork, mode, texts[0], err, path, started, t0)
            raise
        return self._record(fork, mode, texts, got, path, started, t0)

    def _live_path(self, path: str | None) -> str:
        return path or live_path("embedding", self.model_name)

    def _record(self, fork: Recorder, mode: str, texts: list[str], got: list[Embedding],
                path: str | None, started: datetime, t0: float) -> list[Embedding]:
        # as the recording stores them: one step per text, the vector as float64s; `path` is
        # the first text's (taken when it was asked for), the others count on from it
        vectors = [list(map(float, vector)) for vector in got]
        ms = (time.perf_counter() - t0) * 1000
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=False)):
            fork.record("embedding", self.model_name, {"mode": mode, "text": text}, vector,
                        path=self._live_path(path if i == 0 else self._path()),
                        started_at=started, duration_ms=ms)
        return vectors

    def _record_error(self, fork: Recorder, mode: str, text: str, err: BaseException,
                      path: str | None, started: datetime, t0: float) -> None:
        # the recording puts a failed batch's error on its first text not yet embedded
        fork.record("embedding", self.model_name, {"mode": mode, "text": text},
                    error_to_record(err), is_error=True, path=self._live_path(path),
                    started_at=started, duration_ms=(time.perf_counter() - t0) * 1000)

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._vectors("query", [query])[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return (await self._avectors("query", [query]))[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._vectors("text", [text])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await self._avectors("text", [text]))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._vectors("text", texts)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await self._avectors("text", texts)
