"""The batched writer: it hands a recorder's rows to the sink in batches from a background
thread (`batched`, the default durability; `sync` is `_writer_sync`)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import weakref
from collections import deque
from typing import Union
from uuid import UUID

from agentreplay_core._model import Run
from agentreplay_core._prepare_client import Prepare, PrepareClient, check_prepare
from agentreplay_core._sink import Sink
from agentreplay_core._writer_groups import Item as _Item
from agentreplay_core._writer_groups import write_batch
from agentreplay_core._writer_helper import run_with_helper
from agentreplay_core._writer_sync import Settleable, SyncWriter
from agentreplay_core.stores._backend import RunFinish, SealLater, ThisProcess, made

log = logging.getLogger("agentreplay")


_live_writers: weakref.WeakSet[BatchedWriter] = weakref.WeakSet()
#: default `linger`, seconds. While the writer has a batch in hand it waits for the GIL, and
#: every release of the GIL by the agent's thread (a system call, `uuid4`) then wakes it: the
#: agent's thread pays the wake-up, and the writer, slower to run, mostly sleeps again. Fewer,
#: larger batches leave it waiting less. Against 2 ms, 20 ms cut what recording added to a
#: LlamaIndex chat by 40% and to a call on a model that waits 2 ms by half; 50 ms saved
#: little more (`benchmarks/RESULTS.md`), and a row still waits well within the 50 ms the
#: benchmarks allow from `record` to durable.
LINGER = 0.02


def check_linger(value: float) -> float:
    """`value` as seconds to linger; ValueError unless a finite number from 0 to 60."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value <= 60:  # NaN fails both comparisons
        raise ValueError(f"linger must be seconds from 0 to 60, not {value!r}")
    return float(value)


@atexit.register
def _drain_all_at_exit() -> None:
    for writer in list(_live_writers):
        writer.close(timeout=10.0)


class BatchedWriter:
    """A background thread that writes rows in batches; the queue is bounded (backpressure).

    Recording threads only append to a deque. The writer is woken once per burst, not once per
    row: while rows keep coming it takes a batch every `linger` seconds, so that a burst
    becomes one batch and the recording thread does not pay a thread switch per step. Control
    items (a flush barrier, a seal, stop) and a full batch wake it at once. A row waits for its
    batch to start at most `linger`, or the write of the batch before it where that took
    longer; when the load is heavy batches grow up to `max_batch`.
    """

    def __init__(self, sink: Sink, *, max_queue: int = 10_000, max_batch: int = 1_000,
                 put_timeout: float = 10.0, linger: float = LINGER,
                 prepare: Prepare = "thread") -> None:
        self.sink = sink
        #: the helper process that prepares steps (`prepare="process"`), else None
        self.helper = PrepareClient() if check_prepare(prepare) == "process" else None
        self.max_batch = max_batch
        self.max_queue = max_queue
        #: how long a recording thread waits for room in a full queue before its row is
        #: spooled in its own thread instead (the database is stuck, not merely slow)
        self.put_timeout = put_timeout
        self.linger = linger  # checked by `Store`, which takes it from the user
        # After one put timed out the writer is stuck: later rows spool at once instead of
        # each waiting `put_timeout`, until the writer is seen making progress again.
        self._stalled_at: int | None = None
        self._progress = 0
        # deque.append and popleft are atomic: no lock on the recording path
        self._items: deque[_Item] = deque()
        self._wake = threading.Event()
        self._room = threading.Condition()
        self._idle = False
        #: a flush, seal or stop is queued: write without lingering
        self._urgent = False
        #: when the rows now queued started to queue at the earliest: the last batch was
        #: taken then, or the first row of a burst came to an idle writer
        self._since = time.monotonic()
        self._closed = False
        self._pid = ThisProcess.pid
        self._thread = threading.Thread(target=self._run, name="agentreplay-writer", daemon=True)
        self._thread.start()
        _live_writers.add(self)

    # Once closed (store closed, or interpreter exit) nothing drains the queue any more: rows
    # that still arrive are written in the caller's thread instead of blocking it forever.

    def _put(self, item: _Item) -> bool:
        """Queue an item, waiting at most `put_timeout` for room; False if it did not fit.

        Only rows count against `max_queue`: a barrier or a seal always fits."""
        if self._closed:
            return False
        if item[0] != "step":
            self._items.append(item)
            if item[0] != "run":  # a new run's row waits for its first steps: one commit
                self._urgent = True
                self._wake.set()
            elif self._idle:
                self._wake.set()
            return True
        if self._stalled_at is not None and self._stalled_at != self._progress:
            self._stalled_at = None
        if len(self._items) >= self.max_queue and not self._wait_for_room():
            if self._stalled_at is None:
                log.error("agentreplay: the writer's queue stayed full for %ss; spooling in "
                          "the recording thread until it catches up", self.put_timeout)
                self._stalled_at = self._progress
            return False
        items = self._items
        items.append(item)
        # asleep, or lingering with a full batch waiting: wake it. Otherwise it comes back by
        # itself (only the row that fills a batch sets the event: once, not once per row)
        if self._idle or len(items) == self.max_batch:
            self._wake.set()
        return True

    def _wait_for_room(self) -> bool:
        if self._stalled_at is not None:
            return False
        deadline = time.monotonic() + self.put_timeout
        with self._room:
            while len(self._items) >= self.max_queue:
                self._wake.set()
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._room.wait(min(remaining, 0.1))
        return True

    def behind(self) -> bool:
        """Whether a full batch waits already: the writer is not keeping up. (Not with a
        helper process: preparing steps in the recording thread would take the work off the
        helper's core and put it back on the agent's.)"""
        return len(self._items) >= self.max_batch and (self.helper is None
                                                        or not self.helper.alive)

    def submit_run(self, run: Run) -> None:
        if not self._put(("run", run)):
            self.sink.write_run(run)

    def submit(self, step: Settleable) -> None:
        if self._put(("step", step)):
            return
        row, embeddings = step.settle()
        if self._closed:
            self.sink.write_rows([row], embeddings)
        else:
            self.sink.spool_rows([row], embeddings)

    @property
    def seals_later(self) -> bool:
        """Whether a seal should be a `SealLater`, made when this writer reaches it: then
        this thread makes the run's last rows while it sends the first of them (a short
        run's server work overlaps their making), or the helper process has made them. Not
        with more than a batch queued: the sealing thread, which would only wait, makes
        those rows meanwhile."""
        return (self.helper is not None and self.helper.alive) \
            or len(self._items) <= self.max_batch

    def submit_finish(self, seal: RunFinish | SealLater) -> None:
        if self._put(("finish", seal)):
            return
        finish = made(seal)
        if finish is None:
            return
        if self._closed:
            self.sink.write_finish(finish)
        else:
            self.sink.spool_finish(finish)

    def wait_durable(self, timeout: float | None = None) -> bool:
        """Block until everything submitted so far is written (or spooled)."""
        if self._closed or not self._thread.is_alive():
            return not self._items
        if self._stalled_at is not None and self._stalled_at == self._progress:
            return False  # stuck: do not wait for it
        done = threading.Event()
        self._put(("barrier", done))
        return done.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if self._pid != ThisProcess.pid:
            # a forked child's copy (at exit, or the store closed there): its queue and spool
            # are the parent's to write, its thread and helper stayed in the parent
            return
        if self._thread.is_alive():
            done = threading.Event()
            self._urgent = True
            self._items.append(("stop", done))
            self._wake.set()
            if not done.wait(timeout):
                log.error("agentreplay: writer did not drain within %ss; rows may be lost", timeout)
            else:  # it stops right after: with its helper process, which it closes itself
                self._thread.join(5.0)
        elif self.helper is not None:  # else the writer thread closes it when it stops
            self.helper.close()
        self.sink.flush_spooled()

    def take_batch(self, wait: bool = True) -> list[_Item]:
        """The next batch; sleeps while there is nothing to do (unless told not to wait)."""
        items = self._items
        if wait and not items:
            self._idle = True
            if not items:  # checked again after `_idle` is visible: no wake-up can be missed
                self._wake.wait()
            self._idle = False
            self._since = time.monotonic()  # a burst's first row came just now
        self._wake.clear()
        if wait and not self._urgent and len(items) < self.max_batch and self.linger > 0:
            # the first rows of a burst: let the rest join them in one batch (a flush, a
            # seal or stop cuts the wait short). Rows that came while the last batch was
            # written have waited since it was taken: the linger counts from then, so that
            # no row waits more than one linger and a write
            remaining = self._since + self.linger - time.monotonic()
            if remaining > 0:
                self._wake.wait(remaining)
                self._wake.clear()
        self._since = time.monotonic()  # rows queued from now on go in the next batch
        batch: list[_Item] = []
        with contextlib.suppress(IndexError):
            while len(batch) < self.max_batch:
                batch.append(items.popleft())
        if not items:  # else a flush or seal may still wait behind this batch: no lingering
            self._urgent = False
        with self._room:
            self._room.notify_all()
        return batch

    def _run(self) -> None:
        if self.helper is not None:
            try:
                run_with_helper(self, self.helper)
            finally:
                self.helper.close()
            return
        while True:
            items = self.take_batch()
            if not items:
                continue
            if self.write_items(items):
                return

    @property
    def queued(self) -> int:
        """Items in the queue (rows, and the odd seal or barrier)."""
        return len(self._items)

    def write_items(self, items: list[_Item]) -> bool:
        """Write a batch taken from the queue; True if it ends with the writer's stop."""
        stop = write_batch(self.sink, items, self._queued_seal)
        self._progress += 1
        return stop

    def _queued_seal(self, run_id: UUID) -> RunFinish | None:
        """The seal at the head of the queue, if it seals `run_id` (whose rows are made)."""
        with contextlib.suppress(IndexError):  # only this thread takes items
            first = self._items[0]
            if first[0] == "finish" and first[1].run_id == run_id:
                self._items.popleft()
                return made(first[1])
        return None


Writer = Union[SyncWriter, BatchedWriter]  # noqa: UP007


def step_counts(writer: Writer, run_id: UUID) -> tuple[int, int, int]:
    """(steps written, spooled, lost) for a run, so far."""
    sink = writer.sink
    return (sink.written_steps.get(run_id, 0), sink.spooled_steps.get(run_id, 0),
            sink.lost_steps.get(run_id, 0))
