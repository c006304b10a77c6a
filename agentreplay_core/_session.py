"""Sessions: one agent run under agentreplay, recording it, replaying it, or neither.

A `Session` is what lets agent code stay unchanged between record and replay: the adapters'
`instrument()` and `replayable_*` factories ask `active_session()` what to do, and that answer
comes from a `with Session(...)` block (the pytest plugin opens one per test) or, with no block
open, from the environment (`AGENTREPLAY_MODE`, `AGENTREPLAY_RUN_ID`, `AGENTREPLAY_DSN`; the
`agentreplay replay RUN -- CMD` command sets them), so `AGENTREPLAY_MODE=record python agent.py`
records a run and `AGENTREPLAY_MODE=replay AGENTREPLAY_RUN_ID=... python agent.py` replays it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, TypeVar
from uuid import UUID

from agentreplay_core._errors import AgentReplayError
from agentreplay_core._named_mode import NamedMode
from agentreplay_core._player import Player
from agentreplay_core._recorder import Recorder
from agentreplay_core._store import Store

T = TypeVar("T")


class Mode(NamedMode):
    """What a session does with the calls it sees."""

    RECORD = "record"
    REPLAY = "replay"
    OFF = "off"


_active: ContextVar[Session | None] = ContextVar("agentreplay_session", default=None)

#: what adapters attach to every session opened with `with Session(...)` (their `instrument`)
SessionHook = Callable[["Session"], "contextlib.AbstractContextManager[Any] | None"]
_hooks: list[SessionHook] = []


def register_session_hook(hook: SessionHook) -> None:
    """Run `hook(session)` whenever a session opens in a `with` block; a context manager it
    returns is entered for the session's lifetime (in the opener's context). Adapters register
    their `instrument` here, so a session records or tracks their framework's calls with no
    further code. Registering the same hook twice has no effect."""
    if hook not in _hooks:
        _hooks.append(hook)


class Session:
    """One agent run: recorded (`mode="record"`), replayed (`"replay"`) or left alone (`"off"`).

    Used as a context manager. Inside the block, `active_session()` returns it, so the adapters'
    `instrument()` and `replayable_*` factories know whether to record around the live backends
    or to serve the recording. `recorder` / `player` are the core objects while it is open.

    Args:
        mode: "record", "replay" or "off".
        store: the run store (required unless the mode is "off").
        run_id: the run to replay (required for replay); for record, the id to give the new run.
        name, metadata, tags, durability, entropy: passed to `Store.record`.
        replay_options: keyword arguments for `Store.replay` (`match`, `allow_unused`,
            `on_divergence`, ...).
        close_store: close `store` when the session ends.
        instrument: attach the imported adapters (`register_session_hook`) while open.
    """

    def __init__(
        self,
        mode: Mode | str,
        store: Store | None = None,
        *,
        run_id: UUID | str | None = None,
        name: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        tags: Iterable[str] = (),
        durability: str = "batched",
        entropy: bool = False,
        replay_options: Mapping[str, Any] | None = None,
        close_store: bool = False,
        instrument: bool = True,
    ) -> None:
        self.mode = Mode.parse(mode)
        if self.mode != Mode.OFF and store is None:
            raise ValueError(f"a {self.mode.value} session needs a run store")
        if self.mode == Mode.REPLAY and not run_id:
            raise ValueError("a replay session needs the id of the run to replay")
        self.store = store
        #: a replay may name its run by a unique prefix, resolved when the session opens
        self._asked_run = run_id
        self.run_id = _whole_run_id(run_id, self.mode)
        self.name = name
        self.metadata = dict(metadata or {})
        self.tags = list(tags)
        self.durability = durability
        self.entropy = entropy
        self.replay_options = dict(replay_options or {})
        self.close_store = close_store
        self.instrument = instrument
        self.recorder: Recorder | None = None
        self.player: Player | None = None
        self._stack: contextlib.ExitStack | None = None
        self._token: Token[Session | None] | None = None

    def __repr__(self) -> str:
        return f"<Session {self.mode.value} run={self.run_id or self._asked_run}>"

    @property
    def target(self) -> Recorder | Player | None:
        """The recorder or player of the open session (None when off or closed)."""
        return self.recorder if self.recorder is not None else self.player

    @property
    def goes_live_on_divergence(self) -> bool:
        """Whether a replay forks into a live run at the first divergence."""
        return self.mode == Mode.REPLAY and self.replay_options.get("on_divergence") == "live"

    def open(self) -> Session:
        """Start recording or replaying; prefer `with session:`, which also closes it."""
        if self._stack is not None:
            raise RuntimeError(f"{self!r} is already open")
        stack = contextlib.ExitStack()
        try:
            if self.close_store and self.store is not None:
                stack.callback(self.store.close)
            if self.mode == Mode.RECORD:
                assert self.store is not None
                self.recorder = stack.enter_context(self.store.record(
                    self.name, metadata=self.metadata, tags=self.tags,
                    durability=self.durability, entropy=self.entropy, run_id=self.run_id))
                self.run_id = self.recorder.run_id
            elif self.mode == Mode.REPLAY:
                assert self.store is not None and self._asked_run
                self.player = stack.enter_context(
                    self.store.replay(self.run_id or self._asked_run, **self.replay_options))
                self.run_id = self.player.run_id
            if self.instrument and self.mode != Mode.OFF:
                for hook in list(_hooks):
                    attached = hook(self)
                    if attached is not None:
                        stack.enter_context(attached)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def close(self, exc: BaseException | None = None) -> None:
        """Seal the recording or end the replay (raising what the replay found, e.g. recorded
        steps never asked for); `exc` is the exception that ended the run, if any."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        try:
            if exc is None:
                stack.close()
            else:
                stack.__exit__(type(exc), exc, exc.__traceback__)
        finally:
            self.recorder = None
            self.player = None

    def __enter__(self) -> Session:
        # Active before the hooks run, so what they build already sees this session.
        token = _active.set(self)
        try:
            self.open()
        except BaseException:
            _active.reset(token)
            raise
        self._token = token
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.close(exc)  # still active, so hooks see it as they detach (as they attached)
        finally:
            if self._token is not None:
                with contextlib.suppress(ValueError):  # closed in another context
                    _active.reset(self._token)
                self._token = None

    # -- calls without a framework ---------------------------------------------------------

    def _check_open(self) -> None:
        # A closed replay must not quietly call live, nor a closed recording drop calls.
        if self.mode != Mode.OFF and self._stack is None:
            raise AgentReplayError(f"{self!r} is not open: call it inside `with session:` "
                                   "(or after session.open())")

    def call(self, kind: str, name: str, request: Any, fn: Callable[..., T], *args: Any,
             path: str | None = None, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` recorded, replayed from the run, or simply called (off)."""
        self._check_open()
        if self.recorder is not None:
            return self.recorder.call(kind, name, request, fn, *args, path=path, **kwargs)
        if self.player is not None:
            live = (lambda: fn(*args, **kwargs)) if self.goes_live_on_divergence else None
            result: T = self.player.next(kind, name, request, path=path, live=live)
            return result
        return fn(*args, **kwargs)

    async def acall(self, kind: str, name: str, request: Any,
                    fn: Callable[..., Awaitable[T]], *args: Any, path: str | None = None,
                    **kwargs: Any) -> T:
        """`call` for coroutine functions."""
        self._check_open()
        if self.recorder is not None:
            return await self.recorder.acall(kind, name, request, fn, *args, path=path,
                                             **kwargs)
        if self.player is not None:
            live = (lambda: fn(*args, **kwargs)) if self.goes_live_on_divergence else None
            result: T = await self.player.anext(kind, name, request, path=path, live=live)
            return result
        return await fn(*args, **kwargs)


def replay_player(what: str, framework: str, package: str,
                  instrumented: Callable[[], Recorder | Player | None]) -> Player | None:
    """The player an adapter's `replayable_*` factory swaps in: the active replay session's,
    else None. While recording, warns when the adapter is not instrumented for the session's
    recorder in this context (`instrumented()` says for what it is), since the `what`'s calls
    would then go unrecorded."""
    session = active_session()
    if session is None:
        return None
    recorder = session.recorder
    if recorder is not None and instrumented() is not recorder:
        warnings.warn(
            f"agentreplay is recording run {recorder.run_id}, but {framework} is not "
            f"instrumented for it in this context: the {what}'s calls will not be recorded. "
            f"Call {package}.instrument() before building the backends",
            RuntimeWarning, stacklevel=4)  # the caller of the adapter's factory
    return session.player


def active_session() -> Session | None:
    """The innermost open `with Session(...)` of this context, else the session the environment
    asks for (`AGENTREPLAY_MODE`), else None. A session that is off counts as none."""
    session = _active.get()
    if session is None:
        from agentreplay_core._env_session import env_session

        session = env_session()
    if session is None or session.mode == Mode.OFF:
        return None
    return session


def _whole_run_id(run_id: UUID | str | None, mode: Mode) -> UUID | None:
    """`run_id` as a UUID; None for none, or for a replay's prefix (resolved at open)."""
    if not run_id:
        return None
    try:
        return UUID(str(run_id))
    except ValueError:
        if mode == Mode.REPLAY:
            return None
        raise ValueError(f"run id {str(run_id)!r} is not a UUID: a new run needs a whole "
                         "one (only a replay can name its run by a prefix)") from None
