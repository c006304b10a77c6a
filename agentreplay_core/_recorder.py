"""The Recorder: numbers steps, chains them and hands them to a writer (DESIGN section 4)."""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar, cast
from uuid import UUID

from agentreplay_core._codec import encode, unencodable_marker
from agentreplay_core._errors import SerializationError
from agentreplay_core._integrity import seal_checksum
from agentreplay_core._keys import (
    at_path,
    clean_key,
    clean_label,
    current_path,
    join_path,
)
from agentreplay_core._model import RunStatus, Step, check_kind
from agentreplay_core._plural import counted
from agentreplay_core._prepare import oversized_error
from agentreplay_core._recorded_errors import error_to_record, records_as_outcome
from agentreplay_core._redact import Redactor
from agentreplay_core._step_chain import Captured, StepChain
from agentreplay_core._vectors import embedding_output, step_vectors
from agentreplay_core._writer import BatchedWriter, Writer, step_counts
from agentreplay_core._writer_sync import SyncWriter
from agentreplay_core.stores._backend import RunFinish, SealLater, ThisProcess

log = logging.getLogger("agentreplay")
T = TypeVar("T")
#: default `Recorder.max_value_bytes`: 128 MiB of canonical JSON, half of what PostgreSQL's
#: jsonb holds, and a bound on what one step may cost the recording process in memory
MAX_VALUE_BYTES = 128 << 20


@dataclass
class _Encoded:
    """A call's input encoded before the call ran (`_calling`)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Outcome:
    value: Any = None


@dataclass
class RecordingStats:
    """What happened while recording; reported at run end and never raised."""

    steps: int = 0
    unencodable: int = 0
    internal_errors: int = 0
    spooled: int = 0
    lost: int = 0
    #: steps neither written, spooled nor lost when the run was sealed: still queued behind a
    #: stuck writer (written if it recovers before the process exits, else lost)
    pending: int = 0
    #: calls recorded in a forked child process, which cannot write into this run: not
    #: recorded (also counted in `lost`). In the child, its own; in the process that
    #: started the run, at the seal, those its children reported
    forked_lost: int = 0


#: what a forked child tells the process that started a run: the run, the child's pid and
#: how many of the run's steps that child could not record so far (a running total, so a
#: message that did not fit in the pipe is made good by the next)
_REPORT = struct.Struct("=16sII")


class _ForkedChildren:
    """How the steps that forked children could not record reach the recorder that started
    the run: a pipe per process, made at its first fork while it records, that children write
    to without blocking and the recorder reads when it seals."""

    def __init__(self) -> None:
        #: the recorders of this process not sealed yet (a fork then needs the pipe)
        self.recording: weakref.WeakSet[Recorder] = weakref.WeakSet()
        #: the pipe this process reads, and the write ends to it and its ancestors' pipes
        self.read_fd: int | None = None
        self.write_fds: dict[int, int] = {}
        #: per run: per child pid, steps it could not record
        self.counts: dict[UUID, dict[int, int]] = {}
        self.lock = threading.Lock()

    def before_fork(self) -> None:
        if self.read_fd is not None \
                or not any(r.started_in == ThisProcess.pid for r in list(self.recording)):
            return
        try:
            read_fd, write_fd = os.pipe()
            os.set_blocking(read_fd, False)
            os.set_blocking(write_fd, False)  # a child never waits for its parent
        except OSError:  # out of descriptors: the children still warn and count
            return
        self.read_fd, self.write_fds[ThisProcess.pid] = read_fd, write_fd

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()  # the parent's may have been held at the fork
        self.counts = {}
        if self.read_fd is not None:  # the parent's to read
            with contextlib.suppress(OSError):
                os.close(self.read_fd)
            self.read_fd = None

    def report(self, run_id: UUID, started_in: int, lost: int) -> None:
        """In a child: tell the recording process `lost` steps of `run_id` were lost here."""
        write_fd = self.write_fds.get(started_in)
        if write_fd is not None:
            with contextlib.suppress(OSError):  # pipe full or its reader gone: warned anyway
                os.write(write_fd, _REPORT.pack(run_id.bytes, ThisProcess.pid, lost))

    def lost_in_children(self, run_id: UUID) -> int:
        """In the recording process: the steps of `run_id` its children could not record."""
        with self.lock:
            if self.read_fd is not None:
                self._read(self.read_fd)
            lost = sum(self.counts.pop(run_id, {}).values())
            # what children report of runs sealed already comes too late to count: drop it
            recording = {r.run_id for r in list(self.recording)}
            for stale in [run for run in self.counts if run not in recording]:
                del self.counts[stale]
            return lost

    def _read(self, read_fd: int) -> None:
        data = b""
        with contextlib.suppress(OSError):  # nothing more to read now (BlockingIOError)
            while chunk := os.read(read_fd, _REPORT.size * 1024):
                data += chunk
        # whole messages only: each was written at once (far below PIPE_BUF)
        for offset in range(0, len(data) - _REPORT.size + 1, _REPORT.size):
            run, child, lost = _REPORT.unpack_from(data, offset)
            per_child = self.counts.setdefault(UUID(bytes=run), {})
            per_child[child] = max(per_child.get(child, 0), lost)


_forked = _ForkedChildren()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_forked.before_fork,
                        after_in_child=_forked.after_fork_in_child)


class Recorder:
    """Records the steps of one run. Thread-safe and asyncio-safe; never raises into the agent.

    Obtain one from `store.record(...)`; `record()` stores a call you made yourself, `call()`
    and `acall()` make the call and record its result or error.
    """

    def __init__(self, run_id: UUID, writer: Writer, *, hmac_key: bytes | None,
                 redactor: Redactor | None = None) -> None:
        self.run_id = run_id
        self._writer = writer
        self._key = hmac_key
        #: replaces secrets in every step before it is chained and stored
        self.redactor = redactor
        self._lock = threading.Lock()
        self._next_step = 1
        self._chain = StepChain(self, hmac_key)
        self._closed = False
        # sync rows are committed outside the lock, so threads do not queue behind each commit
        self._sync = isinstance(writer, SyncWriter)
        self.stats = RecordingStats()
        #: larger inputs/outputs (as canonical JSON) are stored as unencodable markers
        self.max_value_bytes = MAX_VALUE_BYTES
        #: kinds already checked (a run uses a handful)
        self._kinds: set[str] = set()
        #: called before the run is sealed (`before_seal`)
        self._before_seal: dict[Callable[[], None], None] = {}
        #: the process recording the run: in a forked child (another pid) steps are not
        #: recorded, since the child has neither the writer thread nor connections of its own
        self.started_in = ThisProcess.pid
        #: the forked child that lost steps of this run last, and how many it lost
        self._lost_in: int | None = None
        self._lost_here = 0
        _forked.recording.add(self)

    def _new_kind(self, kind: str) -> str:
        checked = check_kind(kind)
        if type(kind) is str and len(self._kinds) < 256:
            self._kinds.add(kind)
        return checked

    @property
    def step_count(self) -> int:
        return self._next_step - 1

    def _encode(self, value: Any, where: str) -> Any:
        try:
            return encode(value, path=where)
        except SerializationError as exc:
            self.stats.unencodable += 1
            log.warning("agentreplay: run %s: %s; stored as unencodable", self.run_id, exc)
            return unencodable_marker(value, exc)

    def note_oversized(self, where: str, size: int, type_name: str) -> None:
        """Count and report an input or output stored as a marker for its size."""
        self.stats.unencodable += 1
        log.warning("agentreplay: run %s: %s; stored as unencodable", self.run_id,
                    oversized_error(size, self.max_value_bytes, where, type_name))

    def record(
        self,
        kind: str,
        name: str,
        input: Any,
        output: Any,
        *,
        is_error: bool = False,
        path: str | None = None,
        match_key: str | None = None,
        started_at: datetime | None = None,
        duration_ms: float = 0.0,
    ) -> int | None:
        """Store one step; returns its number, or None if it could not be recorded."""
        if self.started_in != ThisProcess.pid:
            self._lost_in_forked_child()
            return None
        try:
            return self._record(kind, name, input, output, is_error, path, match_key,
                                started_at, duration_ms)
        except Exception:
            self.stats.internal_errors += 1
            log.exception("agentreplay: run %s: failed to record a %s step", self.run_id, kind)
            return None

    def _record(
        self, kind: str, name: str, input: Any, output: Any, is_error: bool,
        path: str | None, match_key: str | None, started_at: datetime | None,
        duration_ms: float,
    ) -> int | None:
        encoded_in = input.value if type(input) is _Encoded else self._encode(input, "input")
        embedded = embedding_output(output) if kind == "embedding" and not is_error else None
        encoded_out, vectors = embedded or (self._encode(output, "output"), ())
        return self._append(kind, name, encoded_in, encoded_out, is_error, path, match_key,
                            started_at, duration_ms, vectors, caller_key=True)

    def copy_step(self, step: Step) -> int | None:
        """Store a recorded step again, as stored (into a forked run): values that cannot be
        rebuilt here still copy exactly. Never raises, like `record`."""
        if self.started_in != ThisProcess.pid:
            self._lost_in_forked_child()
            return None
        try:
            # redacted again when chained: a replay given secrets= holds them again
            return self._append(step.kind, step.name, step.input, step.output, step.is_error,
                                step.path, step.match_key, None, 0.0, step_vectors(step))
        except Exception:
            self.stats.internal_errors += 1
            log.exception("agentreplay: run %s: failed to copy step %s", self.run_id, step.step)
            return None

    def _append(
        self, kind: str, name: str, encoded_in: Any, encoded_out: Any, is_error: bool,
        path: str | None, match_key: str | None, started_at: datetime | None,
        duration_ms: float, vectors: Sequence[list[float]], *, caller_key: bool = False,
    ) -> int | None:
        """Number the step and queue it; its row is made by `StepChain`, in step order."""
        kind = kind if kind in self._kinds else self._new_kind(kind)
        # the path is the caller's context: it must be read here, on the caller's thread
        where = clean_label(join_path(current_path(), f"{kind}:{name}") if path is None
                            else path)
        if match_key is not None:
            match_key = clean_key(match_key)
        with self._lock:
            if self._closed:
                self.stats.internal_errors += 1
                log.error("agentreplay: run %s is sealed; a late %s step was dropped",
                          self.run_id, kind)
                return None
            number = self._next_step
            self._next_step = number + 1
            self.stats.steps += 1
            step = Captured(self._chain, number, kind, clean_label(name), where, encoded_in,
                            encoded_out, is_error, match_key, caller_key,
                            started_at or datetime.now(timezone.utc), float(duration_ms),
                            vectors)
            self._chain.add(step)
            if not self._sync:  # queued in step order
                self._writer.submit(step)
        if self._sync:  # committed outside the lock: threads do not queue behind each commit
            self._writer.submit(step)
        elif self._writer.behind():
            # The writer is a batch behind: this thread prepares its own step (and any before
            # it) instead of piling up more work. A thread that records faster than the
            # database takes rows would soon wait on backpressure anyway; this way its work
            # overlaps the writer's wait on the database.
            step.settle()
        return number

    def _lost_in_forked_child(self) -> None:
        """Count a step recorded in a forked child, and tell the parent. The child cannot
        record it: the writer thread was not forked with it, the parent's connections are
        not the child's to use, and numbering steps apart from the parent would break the
        run's chain. The recorder's lock is not taken: a parent thread may have held it."""
        with _forked.lock:
            first = self._lost_in != ThisProcess.pid
            if first:
                self._lost_in, self._lost_here = ThisProcess.pid, 0
            self._lost_here += 1
            lost = self._lost_here
            self.stats.lost += 1
            self.stats.forked_lost += 1
        _forked.report(self.run_id, self.started_in, lost)
        if first:
            self._warn_forked("its steps are not recorded in")

    def _warn_forked(self, what: str) -> None:
        log.warning("agentreplay: recording in a forked child process (pid %s) is not "
                    "supported: %s run %s (recorded by process %s). Record in the child "
                    "with a store of its own (open_store(...) there), or start workers with "
                    "the 'spawn' start method", ThisProcess.pid, what, self.run_id,
                    self.started_in)

    @property
    def closed(self) -> bool:
        """True once the run is sealed: later steps are dropped (and counted)."""
        return self._closed

    @contextlib.contextmanager
    def _calling(self, kind: str, name: str, input: Any, path: str | None,
                 match_key: str | None = None) -> Iterator[_Outcome]:
        """Time the block one level deeper in the run tree; record its outcome or error."""
        where = path if path is not None else join_path(current_path(), f"{kind}:{name}")
        outcome = _Outcome()
        # the request as it is sent: a callee that changes it in place (a chat client that
        # appends its answer to the history it was given) must not change what is recorded.
        # Should encoding fail here, `record` takes the input as it is after the call.
        if self.started_in == ThisProcess.pid:  # in a forked child it is not recorded
            with contextlib.suppress(Exception):
                input = _Encoded(self._encode(input, "input"))
        started = datetime.now(timezone.utc)
        t0 = time.perf_counter()
        try:
            with at_path(where):
                yield outcome
        except BaseException as exc:
            # A cancelled call (timeout, task cancelled) is recorded too: replay must not serve
            # the result of the retry that followed it to the call that never finished. So is
            # one a Ctrl-C, `sys.exit()` or another BaseException (pytest's skip, gevent's
            # Timeout) ended: replay raises it again there, and the program stops where it
            # did, instead of asking for a call the run never made.
            if records_as_outcome(exc):
                self.record(kind, name, input, error_to_record(exc), is_error=True, path=where,
                            match_key=match_key, started_at=started,
                            duration_ms=(time.perf_counter() - t0) * 1000)
            raise
        self.record(kind, name, input, outcome.value, path=where, match_key=match_key,
                    started_at=started, duration_ms=(time.perf_counter() - t0) * 1000)

    def call(self, kind: str, name: str, input: Any, fn: Callable[..., T], *args: Any,
             path: str | None = None, match_key: str | None = None, **kwargs: Any) -> T:
        """Call `fn(*args, **kwargs)` and record its result, or its error (re-raised as is).

        The call runs one level deeper in the run tree (`kind:name`), so what it records itself
        (the clock, an embedding) is known to be inside it and is not expected again when the
        call is replayed as a whole. `match_key` is stored as with `record`.
        """
        with self._calling(kind, name, input, path, match_key) as outcome:
            outcome.value = fn(*args, **kwargs)
        return cast(T, outcome.value)

    async def acall(self, kind: str, name: str, input: Any, fn: Callable[..., Awaitable[T]],
                    *args: Any, path: str | None = None, match_key: str | None = None,
                    **kwargs: Any) -> T:
        """Await `fn(*args, **kwargs)` and record its result or error, like `call`."""
        with self._calling(kind, name, input, path, match_key) as outcome:
            outcome.value = await fn(*args, **kwargs)
        return cast(T, outcome.value)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every step recorded so far is written; False on timeout."""
        if self.started_in != ThisProcess.pid:  # the parent's writer is not this process's
            return self._lost_in != ThisProcess.pid or not self._lost_here
        return self._writer.wait_durable(timeout)

    def before_seal(self, callback: Callable[[], None]) -> None:
        """Have `callback` called when the run ends, before it is sealed (once, however often
        it is given): an adapter records there the calls its framework started and never
        ended (a stream nobody finished reading). Its errors are counted, never raised."""
        if self.started_in != ThisProcess.pid:  # a forked child does not seal the run
            return
        with self._lock:
            self._before_seal[callback] = None

    def forget_before_seal(self, callback: Callable[[], None]) -> None:
        """Undo `before_seal(callback)` (an equal bound method will do)."""
        if self.started_in != ThisProcess.pid:
            return
        with self._lock:
            self._before_seal.pop(callback, None)

    def _seal(self, status: RunStatus, timeout: float | None = 30.0) -> None:
        if self.started_in != ThisProcess.pid:
            # a child leaving the record block it inherited: the run goes on in the parent
            if self._lost_in != ThisProcess.pid:
                self._lost_in, self._lost_here = ThisProcess.pid, 0
                self._warn_forked("it neither seals nor records into")
            return
        _forked.recording.discard(self)
        with self._lock:
            callbacks, self._before_seal = list(self._before_seal), {}
        for callback in callbacks:
            try:
                callback()
            except Exception:  # never into the host; the run is sealed all the same
                self.stats.internal_errors += 1
                log.exception("agentreplay: run %s: a before-seal callback failed", self.run_id)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            count = self._next_step - 1
        finished_at = datetime.now(timezone.utc)

        def finish() -> RunFinish:
            head = seal_checksum(self.run_id, status, count, self._chain.settle_all(), self._key)
            return RunFinish(self.run_id, status, count, head, finished_at)

        writer = self._writer
        if isinstance(writer, BatchedWriter) and writer.seals_later:
            writer.submit_finish(SealLater(self.run_id, finish))
        else:
            # More than a batch is queued: this thread would only wait for the writer now, so
            # it makes the rows still queued while the writer sends the batches already made
            # (its waits on the database hold no GIL).
            writer.submit_finish(finish())
        if not self._writer.wait_durable(timeout):
            log.error("agentreplay: run %s not fully written after %ss", self.run_id, timeout)
        written, self.stats.spooled, self.stats.lost = step_counts(self._writer, self.run_id)
        self.stats.pending = max(0, count - written - self.stats.spooled - self.stats.lost)
        self._count_lost_in_children()
        if self.stats.spooled or self.stats.lost or self.stats.unencodable \
                or self.stats.internal_errors or self.stats.pending:
            level = logging.ERROR if self.stats.lost else logging.WARNING  # lost: loudly
            log.log(level, "agentreplay: run %s recorded with problems: %s", self.run_id,
                    self.stats)

    def _count_lost_in_children(self) -> None:
        forked = _forked.lost_in_children(self.run_id)
        if forked:
            self.stats.forked_lost += forked
            self.stats.lost += forked
            log.error("agentreplay: run %s: %s that forked child processes tried to record "
                      "were not recorded: recording in a forked child is not supported "
                      "(record there with a store of its own, or use the 'spawn' start method)",
                      self.run_id, counted(forked, "step"))
