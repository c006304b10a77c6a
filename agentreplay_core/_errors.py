"""Every error agentreplay raises derives from `AgentReplayError`."""

from __future__ import annotations

import pickle
from typing import Any


class AgentReplayError(Exception):
    """Base class of all agentreplay errors.

    They survive pickling (a multiprocessing worker's error) with their message and attributes;
    an attribute that cannot be pickled (a request holding a lock) arrives as its text.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduced(self)


class SerializationError(AgentReplayError, TypeError):
    """A value cannot be converted to the run log's JSON form.

    `path` names the place inside the value, e.g. ``input.messages[2].content``.
    """

    def __init__(self, message: str, *, path: str = "$", type_name: str | None = None) -> None:
        self.path = path
        self.type_name = type_name
        super().__init__(f"{message} (at {path})")


class IntegrityError(AgentReplayError):
    """A run failed verification: its hash chain does not match its rows.

    `report` is the `VerifyReport`, if any (pickled, as its text should it not pickle).
    """

    def __init__(self, message: str, *, report: Any = None) -> None:
        self.report = report
        super().__init__(message)


class StoreError(AgentReplayError):
    """The run store cannot do what was asked (bad URL, unreachable database, ...)."""


class RunNotFound(StoreError, KeyError):
    """No run with this id exists in the store."""

    def __init__(self, run_id: object, hint: str = "") -> None:
        self.run_id = run_id
        message = f"no run with id {run_id}"
        if hint:
            message = f"{message}; {hint}"
        super().__init__(message)

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class NetworkAccessDuringReplay(AgentReplayError, ConnectionError):
    """Code under replay tried to open a network connection that was not recorded."""


class ReplayedCancellation(AgentReplayError):
    """A call that was cancelled while recording (e.g. by a timeout) was replayed synchronously.

    Replay it with `await player.anext(...)`: the call then never completes, so the same
    timeout or cancellation that cut it short during recording fires again.
    """


class AbandonedStreamReplayed(AgentReplayError):
    """A replay asked a recorded stream its consumer closed part-way for more than was
    recorded: what a live model would have sent next is unknown (`abandoned_stream`)."""


class ReplayedError(AgentReplayError):
    """A recorded error whose original exception type cannot be rebuilt here."""

    def __init__(self, type_name: str, message: str, module: str | None = None) -> None:
        self.type_name = type_name
        self.original_module = module
        self.message = message
        super().__init__(_qualified(type_name, message, module))


class ReplayedInterruption(BaseException):
    """A recorded call ended in a `BaseException` that replay does not rebuild from a run log
    (pytest's skip, gevent's `Timeout`, a library's own; see `error_from_record`): raised in its
    place, with the same attributes as `ReplayedError`.

    Not an `AgentReplayError`: like the original, it must pass the program's
    `except Exception:` handlers, so that the replay stops where the recording did.
    """

    def __init__(self, type_name: str, message: str, module: str | None = None) -> None:
        self.type_name = type_name
        self.original_module = module
        self.message = message
        super().__init__(_qualified(type_name, message, module))

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduced(self)


def _qualified(type_name: str, message: str, module: str | None) -> str:
    return f"{module}.{type_name}: {message}" if module else f"{type_name}: {message}"


class ReplayDivergence(AgentReplayError):
    """The replayed code asked for something the recording does not hold.

    Attributes:
        run_id: the run being replayed.
        step: the recorded step the call was matched against (or would have been), if any.
        kind, name: what the code asked for.
        classification: one of `prompt_changed`, `params_changed`, `tool_args_changed`,
            `unexpected_call`, `missing_call`, `order_changed`.
        expected: the recorded request (decoded), or None.
        actual: the request the code made (decoded), or None for `missing_call`.
        diff: a readable structural diff of expected vs actual.
        candidates: nearest recorded steps, best first (`Candidate` objects).

    Pickled (raised in a multiprocessing worker), an `expected` or `actual` request that
    cannot be pickled arrives as its text.
    """

    CLASSIFICATIONS = (
        "prompt_changed",
        "params_changed",
        "tool_args_changed",
        "unexpected_call",
        "missing_call",
        "order_changed",
    )

    def __init__(
        self,
        *,
        run_id: object,
        step: int | None,
        kind: str,
        name: str,
        classification: str,
        expected: Any = None,
        actual: Any = None,
        diff: str = "",
        candidates: list[Any] | None = None,
        detail: str = "",
    ) -> None:
        if classification not in self.CLASSIFICATIONS:
            raise ValueError(f"unknown divergence classification {classification!r}")
        self.run_id = run_id
        self.step = step
        self.kind = kind
        self.name = name
        self.classification = classification
        self.expected = expected
        self.actual = actual
        self.diff = diff
        self.candidates = list(candidates or [])
        self.detail = detail
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"step {self.step}" if self.step is not None else "no matching step"
        lines = [
            f"replay diverged ({self.classification}) in run {self.run_id}, {where}: "
            f"{self.kind} {self.name!r}"
        ]
        if self.detail:
            lines.append(self.detail)
        if self.diff:
            lines.append("diff (recorded -> actual):")
            lines.extend("  " + line for line in self.diff.splitlines())
        if self.candidates:
            lines.append("nearest recorded steps:")
            lines.extend(f"  {c}" for c in self.candidates)
        return "\n".join(lines)


def _reduced(exc: BaseException) -> tuple[Any, ...]:
    """`__reduce__` of agentreplay's errors. The default, `type(exc)(*exc.args)`, does not fit
    constructors that take keyword-only arguments or build the message from theirs, and an
    error that fails to unpickle kills a multiprocessing pool's result thread: the caller then
    waits forever instead of seeing the error. So they are rebuilt without `__init__`, and
    whatever would not unpickle travels as text."""
    state = {name: _portable(value) for name, value in vars(exc).items()}
    return _unpickled, (type(exc), tuple(_portable(arg) for arg in exc.args), state)


def _unpickled(cls: type[BaseException], args: tuple[Any, ...],
               state: dict[str, Any]) -> BaseException:
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def _portable(value: Any) -> Any:
    """`value`, if a pickled copy of it can be unpickled, else its text."""
    try:
        pickle.loads(pickle.dumps(value))  # unpickling is what fails in the receiver
    except Exception:
        try:
            return str(value)
        except Exception:
            return f"<unprintable {type(value).__qualname__}>"
    return value
