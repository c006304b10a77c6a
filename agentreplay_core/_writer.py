"""Writers hand a recorder's rows to the sink: in the caller's thread (`sync`) or in batches
from a background thread (`batched`, the default)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import threading
import weakref
from collections.abc import Sequence
from typing import Literal, Union
from uuid import UUID

from agentreplay_core._model import Run
from agentreplay_core._sink import Sink
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish

log = logging.getLogger("agentreplay")

Durability = Literal["batched", "sync"]
DURABILITY_MODES: tuple[str, ...] = ("batched", "sync")


def check_durability(value: str) -> Durability:
    if value not in DURABILITY_MODES:
        raise ValueError(f"durability must be one of {', '.join(DURABILITY_MODES)}, not {value!r}")
    return value  # type: ignore[return-value]


class SyncWriter:
    """Each call returns once its row is committed (or spooled)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def submit_run(self, run: Run) -> None:
        self.sink.write_run(run)

    def submit(self, step: PendingStep, embeddings: Sequence[EmbeddingRow]) -> None:
        self.sink.write_rows([step], embeddings)

    def submit_finish(self, finish: RunFinish) -> None:
        self.sink.write_finish(finish)

    def wait_durable(self, timeout: float | None = None) -> bool:
        return True

    def close(self, timeout: float | None = None) -> None:
        self.sink.flush_spooled()


_Item = Union[  # noqa: UP007 - a runtime alias; `|` between tuple types needs 3.10+ anyway
    tuple[Literal["run"], Run],
    tuple[Literal["step"], PendingStep, Sequence[EmbeddingRow]],
    tuple[Literal["finish"], RunFinish],
    tuple[Literal["barrier"], threading.Event],
    tuple[Literal["stop"], threading.Event],
]

_live_writers: weakref.WeakSet[BatchedWriter] = weakref.WeakSet()


@atexit.register
def _drain_all_at_exit() -> None:
    for writer in list(_live_writers):
        writer.close(timeout=10.0)


class BatchedWriter:
    """A background thread that writes rows in batches; the queue is bounded (backpressure).

    Rows are written as soon as the thread is free: a batch is whatever accumulated while the
    previous one was being written, so latency stays low when the load is light and batches
    grow when it is heavy.
    """

    def __init__(self, sink: Sink, *, max_queue: int = 10_000, max_batch: int = 1_000,
                 put_timeout: float = 10.0) -> None:
        self.sink = sink
        self.max_batch = max_batch
        #: how long a recording thread waits for room in a full queue before its row is
        #: spooled in its own thread instead (the database is stuck, not merely slow)
        self.put_timeout = put_timeout
        # After one put timed out the writer is stuck: later rows spool at once instead of
        # each waiting `put_timeout`, until the writer is seen making progress again.
        self._stalled_at: int | None = None
        self._progress = 0
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=max_queue)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="agentreplay-writer", daemon=True)
        self._thread.start()
        _live_writers.add(self)

    # Once closed (store closed, or interpreter exit) nothing drains the queue any more: rows
    # that still arrive are written in the caller's thread instead of blocking it forever.

    def _put(self, item: _Item) -> bool:
        """Queue an item, waiting at most `put_timeout` for room; False if it did not fit."""
        if self._closed:
            return False
        if self._stalled_at is not None and self._stalled_at != self._progress:
            self._stalled_at = None
        try:
            if self._stalled_at is not None:
                self._queue.put_nowait(item)
            else:
                self._queue.put(item, timeout=self.put_timeout)
            return True
        except queue.Full:
            if self._stalled_at is None:
                log.error("agentreplay: the writer's queue stayed full for %ss; spooling in "
                          "the recording thread until it catches up", self.put_timeout)
                self._stalled_at = self._progress
            return False

    def submit_run(self, run: Run) -> None:
        if not self._put(("run", run)):
            self.sink.write_run(run)

    def submit(self, step: PendingStep, embeddings: Sequence[EmbeddingRow]) -> None:
        if self._put(("step", step, embeddings)):
            return
        if self._closed:
            self.sink.write_rows([step], embeddings)
        else:
            self.sink.spool_rows([step], embeddings)

    def submit_finish(self, finish: RunFinish) -> None:
        if self._put(("finish", finish)):
            return
        if self._closed:
            self.sink.write_finish(finish)
        else:
            self.sink.spool_finish(finish)

    def wait_durable(self, timeout: float | None = None) -> bool:
        """Block until everything submitted so far is written (or spooled)."""
        if self._closed or not self._thread.is_alive():
            return self._queue.empty()
        if self._stalled_at is not None and self._stalled_at == self._progress:
            return False  # stuck: do not wait for it
        done = threading.Event()
        try:
            self._queue.put(("barrier", done), timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            done = threading.Event()
            with contextlib.suppress(queue.Full):  # then the wait below reports it
                self._queue.put(("stop", done), timeout=timeout)
            if not done.wait(timeout):
                log.error("agentreplay: writer did not drain within %ss; rows may be lost", timeout)
        self.sink.flush_spooled()

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            try:
                while len(items) < self.max_batch:
                    items.append(self._queue.get_nowait())
            except queue.Empty:
                pass
            stop = self._process(items)
            self._progress += 1
            if stop:
                return

    def _process(self, items: list[_Item]) -> bool:
        steps: list[PendingStep] = []
        vectors: list[EmbeddingRow] = []

        def flush_steps() -> None:
            if steps:
                try:
                    self.sink.write_rows(list(steps), list(vectors))
                except Exception:  # the sink never raises; this is a last line of defence
                    log.exception("agentreplay: writer failed to write %d step(s)", len(steps))
                steps.clear()
                vectors.clear()

        stop: threading.Event | None = None
        for item in items:
            if item[0] == "step":
                steps.append(item[1])
                vectors.extend(item[2])
                continue
            flush_steps()
            if item[0] == "run":
                self.sink.write_run(item[1])
            elif item[0] == "finish":
                self.sink.write_finish(item[1])
            elif item[0] == "barrier":
                item[1].set()
            else:
                stop = item[1]
        flush_steps()
        if stop is not None:
            stop.set()
            return True
        return False


Writer = Union[SyncWriter, BatchedWriter]  # noqa: UP007


def step_counts(writer: Writer, run_id: UUID) -> tuple[int, int, int]:
    """(steps written, spooled, lost) for a run, so far."""
    sink = writer.sink
    return (sink.written_steps.get(run_id, 0), sink.spooled_steps.get(run_id, 0),
            sink.lost_steps.get(run_id, 0))
