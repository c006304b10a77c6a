"""The Player: serves recorded results to replay backends, in order or by key (DESIGN section 5)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Literal
from uuid import UUID

from agentreplay_core._codec import decode, encode
from agentreplay_core._diff import classify, nearest_candidates, render_diff, structural_diff
from agentreplay_core._errors import ReplayDivergence
from agentreplay_core._keys import current_path, is_inside, join_path, match_key_of_encoded
from agentreplay_core._model import Run, Step, check_kind
from agentreplay_core._recorded_errors import error_from_record
from agentreplay_core._recorder import Recorder

MatchMode = Literal["keyed", "sequential"]
MATCH_MODES: tuple[str, ...] = ("keyed", "sequential")
Key = tuple[str, str, str]


def check_match_mode(value: str) -> MatchMode:
    if value not in MATCH_MODES:
        raise ValueError(f"match must be one of {', '.join(MATCH_MODES)}, not {value!r}")
    return value  # type: ignore[return-value]


class Player:
    """Recorded results of one run, handed out to replay backends.

    `next(kind, name, request, path=...)` returns the recorded output of the matching step (a
    fresh copy each time) or raises its recorded error; a call the recording does not hold
    raises `ReplayDivergence` and never goes live (see `store.replay(on_divergence="live")`).
    """

    def __init__(self, run: Run, steps: list[Step], *, match: MatchMode = "keyed") -> None:
        self.run = run
        self.match = check_match_mode(match)
        self._steps = steps
        self._consumed: set[int] = set()
        self._lock = threading.Lock()
        self._fork_lock = threading.RLock()
        self._queues: dict[Key, deque[Step]] = {}
        for step in steps:
            self._queues.setdefault((step.kind, step.name, step.match_key), deque()).append(step)
        self._cursor = 0  # sequential mode: index of the first step not yet consumed
        self._served: list[Step] = []
        #: set by the store for `on_divergence="live"`: starts the forked run at a divergence
        self.fork_starter: Callable[[ReplayDivergence, list[Step]], Recorder] | None = None
        self.fork: Recorder | None = None

    @property
    def run_id(self) -> UUID:
        return self.run.run_id

    @property
    def steps(self) -> list[Step]:
        return list(self._steps)

    def consumed(self) -> list[Step]:
        return [s for s in self._steps if s.step in self._consumed]

    def unconsumed(self) -> list[Step]:
        """Recorded steps the replay has not asked for (yet)."""
        return [s for s in self._steps if s.step not in self._consumed]

    def next(
        self,
        kind: str,
        name: str,
        request: Any,
        *,
        path: str | None = None,
        live: Callable[[], Any] | None = None,
    ) -> Any:
        """The recorded result for this call; raises the recorded error or `ReplayDivergence`.

        `live` is the real call. It is used only when the replay was opened with
        `on_divergence="live"`: from the first divergence on, calls go live and are recorded
        into a forked run (`player.fork.run_id`) whose parent is this run.
        """
        if self.fork is not None and live is not None:
            return self.fork.call(kind, name, request, live, path=path)
        try:
            step = self.next_step(kind, name, request, path=path)
        except ReplayDivergence as divergence:
            if live is None or self.fork_starter is None:
                raise
            # A lock of its own: starting the fork records, and recording may ask the player
            # (entropy), which takes the matching lock.
            with self._fork_lock:
                if self.fork is None:
                    self.fork = self.fork_starter(divergence, list(self._served))
            return self.fork.call(kind, name, request, live, path=path)
        return self.result_of(step)

    def next_step(self, kind: str, name: str, request: Any, *, path: str | None = None) -> Step:
        """The matching recorded step itself (consumed), for backends that need its metadata."""
        kind = check_kind(kind)
        encoded = encode(request, path="request")
        key = match_key_of_encoded(kind, name, encoded)
        if path is None:  # where the recorder would have put this call
            path = join_path(current_path(), f"{kind}:{name}")
        with self._lock:
            step = self._take(kind, name, key, path)
            if step is None:
                raise self._divergence(kind, name, request, path)
            self._consume(step)
            self._served.append(step)
            return step

    @staticmethod
    def result_of(step: Step) -> Any:
        """Decode a step's output, or raise its recorded error."""
        if step.is_error:
            raise error_from_record(decode(step.output))
        return decode(step.output)

    # -- matching -------------------------------------------------------------------------

    def _take(self, kind: str, name: str, key: str, path: str | None) -> Step | None:
        if self.match == "sequential":
            self._advance_cursor()
            if self._cursor < len(self._steps):
                step = self._steps[self._cursor]
                if (step.kind, step.name, step.match_key) == (kind, name, key):
                    return step
            return None
        queue = self._queues.get((kind, name, key))
        while queue and queue[0].step in self._consumed:
            queue.popleft()  # consumed through a replay boundary
        if not queue:
            return None
        if path is not None:
            for step in queue:
                if step.path == path and step.step not in self._consumed:
                    return step
        for step in queue:
            if step.step not in self._consumed:
                return step
        return None

    def _advance_cursor(self) -> None:
        while self._cursor < len(self._steps) and self._steps[self._cursor].step in self._consumed:
            self._cursor += 1

    def _consume(self, step: Step) -> None:
        self._consumed.add(step.step)
        queue = self._queues.get((step.kind, step.name, step.match_key))
        if queue and queue[0] is step:
            queue.popleft()
        if step.path:
            # Replay boundary: what was recorded inside this call is not expected again.
            for inner in self._steps:
                if inner.step >= step.step:
                    break
                if inner.step not in self._consumed and is_inside(inner.path, step.path):
                    self._consumed.add(inner.step)

    # -- divergence -----------------------------------------------------------------------

    def _divergence(self, kind: str, name: str, request: Any, path: str | None) -> ReplayDivergence:
        pending = [s for s in self._steps if s.step not in self._consumed]
        same = [s for s in pending if s.kind == kind and s.name == name]
        if path is not None:
            same.sort(key=lambda s: s.path != path)  # stable: same path first, then order
        candidates = nearest_candidates(
            request, kind, name, [(s.step, s.kind, s.name, decode(s.input)) for s in pending]
        )
        common: dict[str, Any] = {"run_id": self.run_id, "kind": kind, "name": name,
                                  "actual": request, "candidates": candidates}
        if self.match == "sequential" and pending:
            expected_step = pending[0]
            if any(s.match_key == match_key_of_encoded(kind, name, encode(request))
                   for s in same):
                return ReplayDivergence(
                    step=expected_step.step, classification="order_changed",
                    expected=decode(expected_step.input),
                    detail=(f"the recording holds this call later; step {expected_step.step} "
                            f"({expected_step.kind} {expected_step.name!r}) was expected first"),
                    **common)
            if same and same[0] is not expected_step:
                return ReplayDivergence(
                    step=expected_step.step, classification="order_changed",
                    expected=decode(expected_step.input),
                    detail=(f"step {expected_step.step} ({expected_step.kind} "
                            f"{expected_step.name!r}) was expected next"),
                    **common)
        if same:
            target = same[0]
            expected = decode(target.input)
            entries = structural_diff(expected, request)
            return ReplayDivergence(
                step=target.step, classification=classify(kind, entries), expected=expected,
                diff=render_diff(entries),
                detail="the request differs from the recorded one", **common)
        recorded = sum(1 for s in self._steps if s.kind == kind and s.name == name)
        detail = (f"all {recorded} recorded {kind} {name!r} call(s) were already replayed"
                  if recorded else f"the recording holds no {kind} call named {name!r}")
        return ReplayDivergence(step=None, classification="unexpected_call", detail=detail,
                                **common)

    def check_all_consumed(self) -> None:
        """Raise `ReplayDivergence(missing_call)` if recorded steps were never asked for."""
        missing = self.unconsumed()
        if not missing:
            return
        first = missing[0]
        listing = ", ".join(f"{s.step} ({s.kind} {s.name!r})" for s in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise ReplayDivergence(
            run_id=self.run_id, step=first.step, kind=first.kind, name=first.name,
            classification="missing_call", expected=decode(first.input),
            detail=(f"{len(missing)} recorded step(s) were never replayed: {listing}{more}; "
                    "pass allow_unused=True if that is expected"),
        )
