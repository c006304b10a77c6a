"""instrument(): attach recording (or run-tree tracking for replay) to every LangChain run."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, TypeVar

from langchain_core.tracers.context import register_configure_hook

from agentreplay_core import Player, Recorder
from agentreplay_langchain._handler import RecordingCallbackHandler
from agentreplay_langchain._tree import RunTreeTracker

H = TypeVar("H", bound=RunTreeTracker)
_STARTS = ("on_chain_start", "on_chat_model_start", "on_llm_start", "on_tool_start",
           "on_retriever_start")


def _unless_closed(method: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(method)
    def start(self: Any, *args: Any, **kwargs: Any) -> None:
        if not self.closed:
            method(self, *args, **kwargs)
    return start


def _ambient(base: type[H]) -> type[H]:
    """`base` that takes no new runs once its handle is closed. A ContextVar can only be reset
    in the context that set it; a handle closed elsewhere (another task or thread) must still
    stop recording everywhere. Runs already under way finish normally."""
    namespace: dict[str, Any] = {name: _unless_closed(getattr(base, name)) for name in _STARTS}
    namespace["closed"] = False
    namespace["__doc__"] = base.__doc__
    return type(base.__name__, (base,), namespace)


_AmbientRecorder = _ambient(RecordingCallbackHandler)
_AmbientTracker = _ambient(RunTreeTracker)

_recording: ContextVar[RecordingCallbackHandler | None] = ContextVar(
    "agentreplay_langchain_recording", default=None)
_tracking: ContextVar[RunTreeTracker | None] = ContextVar(
    "agentreplay_langchain_tracking", default=None)

# Registered once per process. With a handler class given, LangChain adds the context's handler
# only to runs that do not already carry one of that class: a handler the user also passed in
# `config["callbacks"]` is never attached twice.
register_configure_hook(_recording, True, RecordingCallbackHandler)
register_configure_hook(_tracking, True, RunTreeTracker)


class Instrumentation:
    """The handle `instrument()` returns: `.close()` (or leaving the `with` block) detaches.

    Closing works from any thread or task: runs started after it are not recorded anywhere,
    runs under way finish recording.
    """

    def __init__(self, var: ContextVar[Any], handler: RunTreeTracker) -> None:
        self.handler = handler
        self._var = var
        self._token: Token[Any] | None = var.set(handler)

    def close(self) -> None:
        if self._token is None:
            return
        self.handler.closed = True  # type: ignore[attr-defined]
        # Only the context that opened the handle can reset it; elsewhere the closed handler
        # stays set but takes no new runs (setting None there could detach another handle).
        with contextlib.suppress(ValueError):
            self._var.reset(self._token)
        self._token = None

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def instrument(target: Recorder | Player) -> Instrumentation:
    """Attach agentreplay to every LangChain run started in this context (and the threads and
    tasks LangChain starts from it), with no change to the agent's code.

    With a `Recorder`, runs are recorded through a `RecordingCallbackHandler`. With a `Player`,
    runs are only tracked, so that the replay backends know where in the run tree each call is
    and concurrent branches get their own recorded results. Attaching while already attached in
    this context raises, rather than recording everything twice.
    """
    if any(h is not None and not getattr(h, "closed", False)
           for h in (_recording.get(), _tracking.get())):
        raise RuntimeError(
            "agentreplay_langchain.instrument() is already active in this context; close the "
            "first handle (or leave its `with` block) before instrumenting again")
    if isinstance(target, Recorder):
        return Instrumentation(_recording, _AmbientRecorder(target))
    if isinstance(target, Player):
        return Instrumentation(_tracking, _AmbientTracker())
    raise TypeError(f"instrument() takes a Recorder or a Player, not {type(target).__name__}")
