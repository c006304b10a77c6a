"""instrument(): attach recording (or run-tree tracking for replay) to every LangChain run.

`instrument()` with no argument follows the active agentreplay `Session` (a `with Session(...)`
block, else `AGENTREPLAY_MODE`): it records for a recording session, tracks a replay, and
returns an inert handle when there is no session, so the same line runs in production with the
mode off. Importing this module also registers that attachment as a session hook: every
`with Session(...)` block instruments LangChain for its lifetime by itself.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, TypeVar
from uuid import UUID

from langchain_core.tracers.context import register_configure_hook

from agentreplay_core import Mode, Player, Recorder, Session, active_session, register_session_hook
from agentreplay_langchain._handler import RecordingCallbackHandler
from agentreplay_langchain._tree import BOUNDARY_TYPES, RunTreeTracker

H = TypeVar("H", bound=RunTreeTracker)
log = logging.getLogger("agentreplay.langchain")
_STARTS = ("on_chain_start", "on_chat_model_start", "on_llm_start", "on_tool_start",
           "on_retriever_start")


def _unless_closed(method: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(method)
    def start(self: Any, *args: Any, **kwargs: Any) -> None:
        if not self.closed:
            self.started = True
            method(self, *args, **kwargs)
    return start


def _ambient(base: type[H]) -> type[H]:
    """`base` that takes no new runs once its handle is closed. A ContextVar can only be reset
    in the context that set it; a handle closed elsewhere (another task or thread) must still
    stop recording everywhere. Runs already under way finish normally."""
    namespace: dict[str, Any] = {name: _unless_closed(getattr(base, name)) for name in _STARTS}
    namespace["closed"] = False
    namespace["started"] = False  # whether it saw a run at all
    namespace["__doc__"] = base.__doc__
    return type(base.__name__, (base,), namespace)


class _ReplayTracker(RunTreeTracker):
    """Tracks a replay's run tree and tells its player where models, tools and retrievers
    started: one that ran for real (not swapped for its replay backend) leaves its recorded
    step unasked, and the replay's end says why."""

    def __init__(self, player: Player) -> None:
        super().__init__()
        self._player = player
        # LangGraph tasks set the core's current path from here on, as they did recording
        player.track_paths()

    def _enter(self, run_type: str, serialized: dict[str, Any] | None, run_id: UUID,
               parent_run_id: UUID | None, tags: Sequence[str] | None,
               kwargs: dict[str, Any]) -> str:
        path = super()._enter(run_type, serialized, run_id, parent_run_id, tags, kwargs)
        if run_type in BOUNDARY_TYPES:
            self._player.started_at(path)
        return path


_AmbientRecorder = _ambient(RecordingCallbackHandler)
_AmbientTracker = _ambient(_ReplayTracker)

_recording: ContextVar[RecordingCallbackHandler | None] = ContextVar(
    "agentreplay_langchain_recording", default=None)
_tracking: ContextVar[RunTreeTracker | None] = ContextVar(
    "agentreplay_langchain_tracking", default=None)
_handles: ContextVar[Instrumentation | None] = ContextVar(
    "agentreplay_langchain_instrumentation", default=None)

# Registered once per process. With a handler class given, LangChain adds the context's handler
# only to runs that do not already carry one of that class: a handler the user also passed in
# `config["callbacks"]` is never attached twice.
register_configure_hook(_recording, True, RecordingCallbackHandler)
register_configure_hook(_tracking, True, RunTreeTracker)


@contextlib.contextmanager
def untracked() -> Iterator[None]:
    """A block whose LangChain runs the replay's tracker does not see: a live model called
    inside a replayed call (a fork) runs at the replayed call's own path, so what it draws
    with `entropy=True` is recorded inside that call's step of the forked run."""
    token = _tracking.set(None)
    try:
        yield
    finally:
        _tracking.reset(token)


class Instrumentation:
    """The handle `instrument()` returns: `.close()` (or leaving the `with` block) detaches.

    Closing works from any thread or task: runs started after it are not recorded anywhere,
    runs under way finish recording. A handle attached by a `Session` (its hook) belongs to the
    session: closing it does nothing, the session detaches it when it ends.

    Attributes:
        target: the `Recorder` or `Player` attached; None for the inert handle of no session.
        handler: what runs get: a `RecordingCallbackHandler` when recording, a
            `RunTreeTracker` when tracking a replay, None when inert.
        session: the session that attached it, if a session did.
    """

    def __init__(self, target: Recorder | Player | None, handler: RunTreeTracker | None, *,
                 session: Session | None = None) -> None:
        self.target = target
        self.handler = handler
        self.session = session
        self._tokens: list[tuple[ContextVar[Any], Token[Any]]] = []
        if handler is not None:
            recording = handler if isinstance(handler, RecordingCallbackHandler) else None
            # both set: a session nested in another one shadows the outer attachment entirely
            self._tokens = [(_recording, _recording.set(recording)),
                            (_tracking, _tracking.set(None if recording else handler)),
                            (_handles, _handles.set(self))]

    @property
    def active(self) -> bool:
        """Whether runs started now get the handler (False once closed, and when inert)."""
        return self.handler is not None and not getattr(self.handler, "closed", True)

    def close(self) -> None:
        """Detach (idempotent); a no-op for a session's handle, which its session detaches."""
        if self.session is None:
            self._detach()

    def _detach(self) -> None:
        tokens, self._tokens = self._tokens, []
        if not tokens or self.handler is None:
            return
        self.handler.closed = True  # type: ignore[attr-defined]
        if isinstance(self.target, Recorder) and self.session is None \
                and not getattr(self.handler, "started", True):
            # the likely reason, and nothing else would say it: the live run succeeds, the
            # run is sealed empty, and only its replay finds that nothing was recorded
            log.warning(
                "agentreplay: instrument() recording run %s saw no LangChain run; LangChain "
                "calls made in threads of your own (a ThreadPoolExecutor) do not see it: start "
                "them with contextvars.copy_context().run, or LangChain's "
                "ContextThreadPoolExecutor, or pass RecordingCallbackHandler(rec) in their "
                "config", self.target.run_id)
        # Only the context that opened the handle can reset it; elsewhere the closed handler
        # stays set but takes no new runs (setting None there could detach another handle).
        for var, token in reversed(tokens):
            with contextlib.suppress(ValueError):
                var.reset(token)

    def __repr__(self) -> str:
        state = "active" if self.active else "inert" if self.handler is None else "closed"
        return f"<agentreplay_langchain.Instrumentation {_describe(self.target)} ({state})>"

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def active_instrumentation() -> Instrumentation | None:
    """The handle attached in this context, if any (closed ones do not count)."""
    found = _handles.get()
    return found if found is not None and found.active else None


def instrument(target: Recorder | Player | Session | None = None) -> Instrumentation:
    """Attach agentreplay to every LangChain run started in this context (and the threads and
    tasks LangChain starts from it), with no change to the agent's code.

    With a `Recorder`, runs are recorded through a `RecordingCallbackHandler`. With a `Player`,
    runs are only tracked, so that the replay backends know where in the run tree each call is
    and concurrent branches get their own recorded results. Attaching while already attached in
    this context raises, rather than recording everything twice.

    With no argument (or a `Session`), the active session decides: its recorder or player is
    attached as above, and with no session (or `AGENTREPLAY_MODE` off) the handle returned is
    inert. If the session's recorder or player is already attached here (a `with Session(...)`
    block attaches it by itself), that handle is returned.
    """
    if target is None or isinstance(target, Session):
        return _for_session(active_session() if target is None else target)
    if not isinstance(target, (Recorder, Player)):
        raise TypeError("instrument() takes a Session, a Recorder or a Player, not "
                        f"{type(target).__name__}")
    current = active_instrumentation()
    if current is not None:
        if current.target is target and current.session is not None:
            return current  # the session's own attachment, which the session will detach
        raise _already_active(current)
    return _attach(target)


def _for_session(session: Session | None) -> Instrumentation:
    if session is None or session.mode == Mode.OFF:
        return Instrumentation(None, None)
    target = session.target
    if target is None:
        raise RuntimeError(f"{session!r} is not open: call instrument() inside its `with` "
                           "block (or after session.open())")
    current = active_instrumentation()
    if current is not None:
        if current.target is target:
            return current
        raise _already_active(current)
    return _attach(target)


def _attach(target: Recorder | Player, session: Session | None = None) -> Instrumentation:
    if isinstance(target, Recorder):
        return Instrumentation(target, _AmbientRecorder(target), session=session)
    return Instrumentation(target, _AmbientTracker(target), session=session)


def _already_active(current: Instrumentation) -> RuntimeError:
    return RuntimeError(
        f"agentreplay_langchain.instrument() is already active in this context "
        f"({_describe(current.target)}); close the first handle (or leave its `with` block) "
        "before instrumenting again")


def _describe(target: Recorder | Player | None) -> str:
    if isinstance(target, Recorder):
        return f"recording run {target.run_id}"
    if isinstance(target, Player):
        return f"tracking the replay of run {target.run_id}"
    return "no session"


def _session_hook(session: Session) -> contextlib.AbstractContextManager[Any] | None:
    """Attach LangChain to a session opened with `with Session(...)`, for its lifetime."""
    target = session.target
    if target is None:
        return None
    current = active_instrumentation()
    if current is not None and current.target is target:
        return None  # already attached here; whoever attached it detaches it
    handle = _attach(target, session)
    detach = contextlib.ExitStack()
    detach.callback(handle._detach)
    return detach


register_session_hook(_session_hook)
