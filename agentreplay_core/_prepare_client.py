"""`prepare="process"`: the batched writer hands the costly part of making rows (redaction,
canonical JSON, match keys, delta encoding: `prepare_step`) to a helper process, so that it runs
on another core instead of taking the agent's GIL.

The helper (`_prepare_helper`) is only a calculator: the writer still chains and writes every
row, in step order. Whatever goes wrong with it (it cannot start, dies, answers late or not at
all), the writer stops using it, says so once, and prepares the steps in this process as it
does without it; a step the helper did not prepare is prepared here. Nothing is lost and no
row differs: `prepare_step` gives the same bytes in either process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import subprocess
import time
import weakref
from collections.abc import Iterable
from typing import Literal

import orjson

from agentreplay_core._prepare import Prepared
from agentreplay_core._prepare_helper import HEADER, READY
from agentreplay_core._prepare_spawn import start_helper
from agentreplay_core._redact import Redactor
from agentreplay_core._step_chain import Captured

log = logging.getLogger("agentreplay")

Prepare = Literal["thread", "process"]
PREPARE_MODES: tuple[str, ...] = ("thread", "process")
#: the default of `open_store(prepare=...)`
PREPARE_ENV = "AGENTREPLAY_PREPARE"
#: how long the helper may take to start, or to answer one batch, before it is given up
TIMEOUT_SECONDS = 10.0


def check_prepare(value: str) -> Prepare:
    if value not in PREPARE_MODES:
        raise ValueError(f"prepare must be one of {', '.join(PREPARE_MODES)}, not {value!r}")
    return value  # type: ignore[return-value]


_clients: weakref.WeakSet[PrepareClient] = weakref.WeakSet()


def _forget_in_child() -> None:
    """In a forked child: drop the parent's pipes to its helpers. The child has no writer
    thread to use them, and a copy of a pipe left open would keep a helper running after the
    parent is gone (it exits when its input closes)."""
    for client in list(_clients):
        client.disown()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class PrepareClient:
    """The writer thread's handle on the helper process (used by that thread only)."""

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = TIMEOUT_SECONDS if timeout is None else timeout
        self._process = start_helper()
        self._started = time.monotonic()
        self._ready = False
        self._tokens: weakref.WeakKeyDictionary[Redactor, int] = weakref.WeakKeyDictionary()
        self._pending = bytearray()
        #: steps the helper prepared so far
        self.prepared = 0
        #: why the helper was given up (None while it is in use or starting)
        self.failure: str | None = None if self._process is not None else "not started"
        _clients.add(self)

    @property
    def alive(self) -> bool:
        return self._process is not None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def send(self, steps: Iterable[object]) -> list[Captured] | None:
        """Send the steps not prepared yet; the steps sent (for `receive`), or None."""
        if not self._usable():
            return None
        chosen: list[Captured] = []
        parts: list[bytes] = []
        for step in steps:
            if type(step) is not Captured or step.row is not None:
                continue
            chain = step.chain
            token = self._token(chain.redactor)
            if token is None:
                continue
            try:
                parts.append(orjson.dumps(
                    [chain.run_id.hex, token, chain.max_value_bytes, step.number, step.kind,
                     step.name, step.match_key, step.caller_key, step.encoded_in,
                     step.encoded_out]))
            except (TypeError, orjson.JSONEncodeError):
                continue  # prepared here, where its error is reported as usual
            chosen.append(step)
        if not chosen or not self._write(b"B[" + b",".join(parts) + b"]"):
            return None
        return chosen

    def receive(self, steps: list[Captured] | None) -> None:
        """Take the helper's answer for `steps` (what `send` returned), in sending order."""
        if steps is None or self._process is None:
            return
        frame = self._read_frame()
        if frame is None:
            return
        try:
            results = pickle.loads(frame)  # our own child process: trusted
        except Exception as exc:
            self._fail(f"an unreadable answer ({exc!r})")
            return
        if type(results) is not list or len(results) != len(steps):
            self._fail("an answer of the wrong length")
            return
        for step, result in zip(steps, results, strict=True):
            if type(result) is tuple and len(result) == len(Prepared._fields) \
                    and step.row is None:
                step.prepared = Prepared(*result)
                self.prepared += 1

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()  # the helper exits at the end of its input
        try:
            process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    def disown(self) -> None:
        """Close this process's ends of the pipes, leaving the helper to its parent."""
        process, self._process = self._process, None
        self.failure = "left to the parent process (forked)"
        if process is not None:
            assert process.stdin is not None and process.stdout is not None
            for pipe in (process.stdin, process.stdout):
                with contextlib.suppress(OSError, ValueError):
                    pipe.close()  # nothing buffered: every write goes through os.write

    # -- internals ---------------------------------------------------------------------------

    def _usable(self) -> bool:
        if self._process is None:
            return False
        if self._ready:
            return True
        if self._readable(0.0):
            frame = self._read_frame()
            if frame == READY:
                self._ready = True
            elif frame is not None:
                self._fail("an unexpected first answer")
        elif time.monotonic() - self._started > self.timeout:
            self._fail(f"not ready after {self.timeout:.0f} s")
        return self._ready

    def _token(self, redactor: Redactor | None) -> int | None:
        if redactor is None:
            return 0
        token = self._tokens.get(redactor)
        if token is not None:
            return token
        try:
            key = redactor.key  # resolved here: the helper must use the very same key
        except Exception:
            return None  # prepared here, where the failure is reported as usual
        token = len(self._tokens) + 1
        if not self._write(b"K" + pickle.dumps((token, redactor.rules, key))):
            return None
        self._tokens[redactor] = token
        return token

    def _fail(self, reason: str) -> None:
        log.warning("agentreplay: the prepare helper process failed (%s); steps are prepared "
                    "in this process from now on", reason)
        self.failure = reason
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            assert process.stdin is not None and process.stdout is not None
            process.stdin.close()
            process.stdout.close()

    def _readable(self, timeout: float) -> bool:
        assert self._process is not None and self._process.stdout is not None
        ready, _, _ = select.select([self._process.stdout.fileno()], [], [], timeout)
        return bool(ready)

    def _write(self, body: bytes) -> bool:
        assert self._process is not None and self._process.stdin is not None
        fd = self._process.stdin.fileno()
        view = memoryview(HEADER.pack(len(body)) + body)
        deadline = time.monotonic() + self.timeout
        try:
            while view:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._fail(f"not reading for {self.timeout:.0f} s")
                    return False
                if select.select([], [fd], [], remaining)[1]:
                    try:
                        view = view[os.write(fd, view):]
                    except BlockingIOError:  # the pipe filled up again since select()
                        continue
        except OSError as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
            return False
        return True

    def _read_exact(self, size: int, deadline: float) -> bytes | None:
        assert self._process is not None and self._process.stdout is not None
        fd = self._process.stdout.fileno()
        buffer = self._pending
        while len(buffer) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail(f"no answer for {self.timeout:.0f} s")
                return None
            if not self._readable(remaining):
                continue
            try:
                chunk = os.read(fd, max(size - len(buffer), 1 << 16))
            except BlockingIOError:
                continue
            except OSError as exc:
                self._fail(f"{type(exc).__name__}: {exc}")
                return None
            if not chunk:
                self._fail(f"it exited (code {self._process.poll()})")
                return None
            buffer += chunk
        data = bytes(buffer[:size])
        del buffer[:size]
        return data

    def _read_frame(self) -> bytes | None:
        deadline = time.monotonic() + self.timeout
        header = self._read_exact(HEADER.size, deadline)
        if header is None:
            return None
        return self._read_exact(HEADER.unpack(header)[0], deadline)

