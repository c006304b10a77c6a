"""Noting what a recorded call does to an object it shares with the rest of the program.

Some effects of a call are not its result: a tool writes to a store or an event stream the
whole run shares, and a replay that serves the tool without running it must do them again.
The adapters wrap the shared object's class method once (`wrap_once`: objects such as a
workflow `Context` have no attributes of their own to wrap) and note what it is asked to do
only while a recorded call runs in the asking context (`Notes`: a context variable, so calls
running at once in other tasks or threads note their own), always calling the original.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: marks a method agentreplay wrapped (it is never wrapped twice)
WRAPPED = "__agentreplay__"
_wrapping = threading.Lock()


class Notes(Generic[T]):
    """What the calls running in a context note, between `start` and `stop`."""

    def __init__(self, name: str) -> None:
        self._var: ContextVar[list[T] | None] = ContextVar(name, default=None)

    def start(self) -> Token[list[T] | None]:
        return self._var.set([])

    def pause(self) -> Token[list[T] | None]:
        """Note nothing until `resume` (a part of the call whose effects are not its own)."""
        return self._var.set(None)

    def resume(self, token: Token[list[T] | None]) -> None:
        self._var.reset(token)

    @property
    def current(self) -> list[T] | None:
        """Where to note, or None when no recorded call is running here."""
        return self._var.get()

    def stop(self, token: Token[list[T] | None]) -> list[T] | None:
        """What was noted since `start` gave `token` (None: nothing); noting stops. A call
        inside another recorded call (a retriever a tool calls) did its effects for the outer
        one too, whose replay serves both: the outer one notes them as well, in their order."""
        noted = self._var.get()
        try:
            self._var.reset(token)
        except ValueError:  # stopped in another context than it started in
            self._var.set(None)
        outer = self._var.get()
        if noted and outer is not None and outer is not noted:
            outer.extend(noted)
        return noted or None


def wrap_once(cls: type, method: str,
              wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace `method` where `cls` gets it from with `wrapper(original)`, once."""
    owner = next((c for c in cls.__mro__ if method in c.__dict__), None)
    if owner is None or getattr(owner.__dict__[method], WRAPPED, False):
        return
    with _wrapping:
        original = owner.__dict__[method]
        if not getattr(original, WRAPPED, False):
            wrapped = wrapper(original)
            setattr(wrapped, WRAPPED, True)
            setattr(owner, method, wrapped)
