"""Record and replay the clock, randomness and ids of a run (DESIGN section 6).

While `record_entropy(recorder)` is active, `time.time`, `time.time_ns`, `time.sleep`,
`datetime.datetime.now` / `utcnow`, `uuid.uuid4` and `os.urandom` (also behind `secrets` and
`random.SystemRandom`) are recorded as steps, and the `random` module's functions draw from a
generator seeded from a recorded seed. `replay_entropy(player)` serves the recorded values
instead and seeds from the recording; `time.sleep` returns at once. See docs/entropy.md.

Usually switched on with `store.record(..., entropy=True)`; `store.replay` then replays it by
itself. By hand (calls made from `agentreplay_core` itself are never recorded, so this runs
in the agent's code, not in a doctest of this module)::

    with store.record(name="clock") as rec, record_entropy(rec):
        recorded = time.time()
    with store.replay(rec.run_id) as player, replay_entropy(player):
        assert time.time() == recorded
"""

from __future__ import annotations

import contextlib
import copyreg
import datetime as _datetime_module
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime as _RealDatetime
from datetime import timezone
from typing import Any, Protocol, TypeVar

from agentreplay_core import _entropy_patches as patches
from agentreplay_core._entropy_values import as_int
from agentreplay_core._errors import AgentReplayError
from agentreplay_core._metadata import hash_seed_difference
from agentreplay_core._model import Run

__all__ = [
    "DEFAULT_SKIP_MODULES",
    "EntropyPlayer",
    "EntropyRecorder",
    "record_entropy",
    "replay_entropy",
]

T = TypeVar("T")
log = logging.getLogger("agentreplay")

#: Calls made from these modules (and their submodules) are infrastructure: never recorded.
DEFAULT_SKIP_MODULES: tuple[str, ...] = (
    "logging", "asyncio", "threading", "concurrent", "queue", "selectors", "socket", "ssl",
    "subprocess", "multiprocessing", "tempfile", "importlib", "psycopg", "psycopg_pool",
    "tenacity", "pgserver", "urllib3", "httpx", "httpcore", "anyio",
    # frameworks' own bookkeeping ids (callback run ids, tracing, checkpoints): how many they
    # make depends on which callbacks are attached, not on the agent
    "langchain_core.callbacks", "langchain_core.tracers", "langchain_core.utils.uuid",
    "langsmith", "langgraph.checkpoint", "langgraph.pregel",
    "llama_index.core.callbacks", "llama_index.core.instrumentation",
    "llama_index_instrumentation", "llama_index.core.workflow", "workflows",
    # model providers' clients (idempotency keys, retry jitter): their answers are recorded
    "openai", "anthropic", "google.genai", "mistralai", "cohere", "groq", "ollama", "botocore",
    # agentreplay's own machinery (run ids, retries, spooling), but not `call()`'s target or
    # the demo agent, which are user code
    "agentreplay_core._store", "agentreplay_core._writer", "agentreplay_core._sink",
    "agentreplay_core._spool", "agentreplay_core._player", "agentreplay_core._entropy",
    "agentreplay_core._entropy_patches", "agentreplay_core._netguard",
    "agentreplay_core._metadata", "agentreplay_core.stores",
)

#: modules inside skipped ones whose calls belong to the agent all the same: LangGraph's
#: message streaming gives messages without an id (tool results) a uuid4 that then stays in
#: the graph's state, so it must replay (its own module in langgraph 1.x, before in
#: `langgraph.pregel.messages`)
_AGENT_DRAWS = frozenset({"langgraph.pregel._messages", "langgraph.pregel.messages"})


class EntropyRecorder(Protocol):
    """The part of `Recorder` that entropy recording uses."""

    def record(self, kind: str, name: str, input: Any, output: Any, /, *,
               started_at: _RealDatetime | None = ..., duration_ms: float = ...) -> object: ...


class EntropyPlayer(Protocol):
    """The part of `Player` that entropy replay uses."""

    def next(self, kind: str, name: str, request: Any, /, *, path: str | None = ...,
             live: Callable[[], Any] | None = ...) -> Any: ...


class _Session:
    """One active entropy session; the replacements call `intercept`."""

    mode = ""

    def __init__(self, owner: object, skip_modules: Iterable[str]) -> None:
        skip = tuple(skip_modules)
        self._skip_exact = frozenset(skip)
        self._skip_prefixes = tuple(f"{m}." for m in skip)
        self._local = threading.local()
        self.open = True
        self.run_id = getattr(owner, "run_id", None)
        self.thread = ""

    def describe(self) -> str:
        run = f" of run {self.run_id}" if self.run_id is not None else ""
        return f"entropy {self.mode}{run} (started in thread {self.thread!r})"

    def _skipped(self, caller: str | None) -> bool:
        return caller is not None and (caller in self._skip_exact
                                       or caller.startswith(self._skip_prefixes)) \
            and caller not in _AGENT_DRAWS

    def owns(self, caller: str | None) -> bool:
        return self.open and not getattr(self._local, "busy", False) \
            and not self._skipped(caller)

    def intercept(self, caller: str | None, kind: str, name: str, args: dict[str, Any],
                  live: Callable[[], T], restore: Callable[[Any], T]) -> T:
        local = self._local
        if not self.open or getattr(local, "busy", False):
            return live()  # nested (uuid4 -> os.urandom) or the recorder's own calls
        local.busy = True  # also while a skipped caller runs: its nested calls are skipped too
        try:
            if self._skipped(caller):
                return live()
            return self.handle(kind, name, args, live, restore)
        finally:
            local.busy = False

    def seed(self) -> int:
        """The seed of the `random` module for this run."""
        raise NotImplementedError

    def handle(self, kind: str, name: str, args: dict[str, Any], live: Callable[[], T],
               restore: Callable[[Any], T]) -> T:
        raise NotImplementedError


class _Recording(_Session):
    mode = "recording"

    def __init__(self, recorder: EntropyRecorder, skip_modules: Iterable[str]) -> None:
        super().__init__(recorder, skip_modules)
        self._recorder = recorder

    def seed(self) -> int:
        # 63 bits: a plain JSON integer in every store, and plenty to make runs differ
        value = int.from_bytes(os.urandom(8), "big") >> 1
        self._recorder.record("random", "random.seed", {}, value,
                              started_at=_RealDatetime.now(timezone.utc))
        return value

    def handle(self, kind: str, name: str, args: dict[str, Any], live: Callable[[], T],
               restore: Callable[[Any], T]) -> T:
        started = _RealDatetime.now(timezone.utc)
        t0 = time.perf_counter()
        value = live()  # a call that raises is not recorded; its error propagates
        self._recorder.record(kind, name, args, value, started_at=started,
                              duration_ms=(time.perf_counter() - t0) * 1000.0)
        return value


class _Replaying(_Session):
    mode = "replay"

    def __init__(self, player: EntropyPlayer, skip_modules: Iterable[str]) -> None:
        super().__init__(player, skip_modules)
        self._player = player
        run = getattr(player, "run", None)
        # a random.choice over a set draws the same index from another order: the replay
        # silently differs, so say why before it does
        difference = hash_seed_difference(run) if isinstance(run, Run) else None
        if difference is not None:
            log.warning("%s", difference)

    def seed(self) -> int:
        return self._restore("random.seed", self._player.next("random", "random.seed", {}),
                             as_int)

    def handle(self, kind: str, name: str, args: dict[str, Any], live: Callable[[], T],
               restore: Callable[[Any], T]) -> T:
        # `live` serves a replay opened with on_divergence="live" once it has forked
        value = self._player.next(kind, name, args, live=live)
        return self._restore(name, value, restore)

    def _restore(self, name: str, value: Any, restore: Callable[[Any], T]) -> T:
        try:
            return restore(value)
        except (TypeError, ValueError) as exc:
            run = f" of run {self.run_id}" if self.run_id is not None else ""
            raise AgentReplayError(
                f"the recorded {name} step{run} {exc}; the recording was edited or made by an "
                "incompatible version of agentreplay: record the run again"
            ) from exc


_slot_lock = threading.Lock()
_active: _Session | None = None


def record_entropy(
    recorder: EntropyRecorder, *, skip_modules: Iterable[str] = DEFAULT_SKIP_MODULES
) -> contextlib.AbstractContextManager[None]:
    """Record time, randomness and ids as steps of `recorder`'s run while the block runs.

    Args:
        recorder: the run's `Recorder`.
        skip_modules: calls made from these modules (or their submodules) are not recorded
            (the caller is the nearest frame outside `uuid`, `random` and `secrets`); replay
            must use the same tuple.

    Raises:
        AgentReplayError: another entropy session is active in this process.
    """
    return _activate(_Recording(recorder, skip_modules))


def replay_entropy(
    player: EntropyPlayer, *, skip_modules: Iterable[str] = DEFAULT_SKIP_MODULES
) -> contextlib.AbstractContextManager[None]:
    """Serve recorded time, randomness and ids from `player` while the block runs.

    A call the recording does not hold raises `ReplayDivergence` from the player.

    Raises:
        AgentReplayError: another entropy session is active in this process.
    """
    return _activate(_Replaying(player, skip_modules))


@contextlib.contextmanager
def _activate(session: _Session) -> Iterator[None]:
    global _active
    with _slot_lock:
        if _active is not None:
            raise AgentReplayError(
                f"cannot start entropy {session.mode}: {_active.describe()} is still active. "
                "Time, random and id patches are process-wide, so only one run per process "
                "can record or replay them at a time: finish the other run first, or record "
                "this one with entropy=False."
            )
        session.thread = threading.current_thread().name
        _active = session
    try:
        seed = session.seed()  # before patching: a replay that cannot start changes nothing
        undo = _install(session, seed)
        try:
            yield
        finally:
            session.open = False
            undo()
    finally:
        with _slot_lock:
            _active = None


def _install(session: _Session, seed: int) -> Callable[[], None]:
    """Install the replacements; returns the function that puts every original back."""
    proxy = patches.datetime_proxy(session, _datetime_module.datetime)
    shared: random.Random = vars(random)["_inst"]
    shared_state = shared.getstate()
    targets: list[tuple[object, str, object]] = [
        (time, "time", patches.time_time(session, time.time)),
        (time, "time_ns", patches.time_time_ns(session, time.time_ns)),
        (time, "sleep", patches.time_sleep(session, time.sleep)),
        (uuid, "uuid4", patches.uuid_uuid4(session, uuid.uuid4)),
        (os, "urandom", patches.os_urandom(session, os.urandom)),
        (random, "_urandom", patches.os_urandom(session, random._urandom)),  # type: ignore[attr-defined]
        (_datetime_module, "datetime", proxy),
        *((random, name, function) for name, function
          in patches.random_functions(session, random, random.Random(seed))),
    ]
    saved = [(target, attr, getattr(target, attr)) for target, attr, _ in targets]
    previous_reducer = copyreg.dispatch_table.get(_RealDatetime)

    def undo() -> None:
        for target, attr, original in reversed(saved):
            setattr(target, attr, original)
        if previous_reducer is None:
            copyreg.dispatch_table.pop(_RealDatetime, None)
        else:
            copyreg.dispatch_table[_RealDatetime] = previous_reducer
        shared.setstate(shared_state)

    try:
        for target, attr, replacement in targets:
            setattr(target, attr, replacement)
        copyreg.dispatch_table[_RealDatetime] = patches.datetime_reducer(proxy)
        # `from random import choice` bound before the run still draws from the shared
        # generator: seed it too, so such calls replay as long as nothing else draws between
        shared.seed(f"{seed}/shared")
    except BaseException:
        undo()
        raise
    return undo
