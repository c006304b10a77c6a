"""Every error agentreplay raises derives from `AgentReplayError`."""

from __future__ import annotations

from typing import Any


class AgentReplayError(Exception):
    """Base class of all agentreplay errors."""


class SerializationError(AgentReplayError, TypeError):
    """A value cannot be converted to the run log's JSON form.

    `path` names the place inside the value, e.g. ``input.messages[2].content``.
    """

    def __init__(self, message: str, *, path: str = "$", type_name: str | None = None) -> None:
        self.path = path
        self.type_name = type_name
        super().__init__(f"{message} (at {path})")


class IntegrityError(AgentReplayError):
    """A run failed verification: its hash chain does not match its rows."""

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
        qualified = f"{module}.{type_name}" if module else type_name
        super().__init__(f"{qualified}: {message}")


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
