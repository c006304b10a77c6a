"""The Player: serves recorded results to replay backends, in order or by key (DESIGN section 5)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, NoReturn
from uuid import UUID

from agentreplay_core._codec import canonical_bytes, decode, encode
from agentreplay_core._completion_order import CompletionOrder
from agentreplay_core._divergence import (
    after_caught,
    divergence,
    missing_calls,
    raised_again,
    ran_for_real,
)
from agentreplay_core._errors import (
    AgentReplayError,
    ReplayDivergence,
    ReplayedCancellation,
    SerializationError,
)
from agentreplay_core._keys import (
    clean_key,
    clean_label,
    current_path,
    is_inside,
    join_path,
    match_key_of_canonical,
)
from agentreplay_core._metadata import meta_redaction
from agentreplay_core._model import Run, Step, check_kind
from agentreplay_core._recorded_errors import error_from_record, is_cancellation
from agentreplay_core._recorder import Recorder
from agentreplay_core._redact import Redactor
from agentreplay_core._redact_replay import (
    SecretMatcher,
    add_redaction_hint,
    restore_secrets,
    shown_request,
)
from agentreplay_core._replay_index import InsideIndex, KeyedQueues

MatchMode = Literal["keyed", "sequential"]
MATCH_MODES: tuple[str, ...] = ("keyed", "sequential")
ForkStarter = Callable[[ReplayDivergence, list[Step]], Recorder]
log = logging.getLogger("agentreplay")


#: kinds `check_kind` accepted already (a handful per process): skips its regex per call
_CHECKED_KINDS: set[str] = set()


def check_match_mode(value: str) -> MatchMode:
    if value not in MATCH_MODES:
        raise ValueError(f"match must be one of {', '.join(MATCH_MODES)}, not {value!r}")
    return value  # type: ignore[return-value]


def checked_player(player: object, stand_in: str) -> Player:
    """`player`, if it is one: a replay stand-in built without one would fail at its first
    call with an AttributeError that names nothing."""
    if not isinstance(player, Player):
        raise TypeError(f"{stand_in} needs the Player of a replay (`with store.replay(run_id) "
                        f"as player:`), not {type(player).__name__}")
    return player


class Player:
    """Recorded results of one run, handed out to replay backends.

    `next(kind, name, request, path=...)` returns the recorded output of the matching step (a
    fresh copy each time) or raises its recorded error; a call the recording does not hold
    raises `ReplayDivergence` and never goes live (see `store.replay(on_divergence="live")`).
    """

    def __init__(self, run: Run, steps: list[Step], *, match: MatchMode = "keyed",
                 redactor: Redactor | None = None,
                 secrets: Mapping[str, str] | Iterable[str] | None = None,
                 check_secrets: bool = True) -> None:
        self.run = run
        self.match = check_match_mode(match)
        #: redacts each request as the recorder did, so requests holding secrets match
        self.redactor = redactor
        if secrets is not None:
            steps = restore_secrets(steps, secrets, redactor)
        self._steps = steps
        #: False: a recorded request matches whatever text stands at its placeholders
        self.check_secrets = check_secrets
        #: matches requests holding secrets to their steps whatever the redaction rules; with
        #: redaction off only to let placeholders match unchecked (a key of its own, which
        #: verifies no secret, rather than the user's key file)
        matching = redactor
        if matching is None and not check_secrets:
            matching = Redactor(defaults=False, key=os.urandom(32))
        self._secret_matcher = None if matching is None else SecretMatcher(matching, steps)
        self._unchecked = 0  # requests matched with their secrets unchecked
        self._consumed: set[int] = set()
        self._lock = threading.Lock()
        self._keyed = KeyedQueues(steps)
        self._order = CompletionOrder(run.run_id, steps)
        self._inside: InsideIndex | None = None  # built at the first replay boundary
        #: (kind, name) of calls whose requests held secrets: no plain-key attempt for them
        self._secret_requests: set[tuple[str, str]] = set()
        self._cursor = 0  # sequential mode: index of the first step not yet consumed
        self._served: list[Step] = []
        #: set by the store for `on_divergence="live"`: starts the forked run at a divergence
        self.fork_starter: ForkStarter | None = None
        #: the forked run's recorder once replay went live
        self.fork: Recorder | None = None
        # A lock of its own: starting the fork records, and recording may ask the player
        # (entropy), which takes the matching lock.
        self._fork_lock = threading.RLock()
        #: the first divergence raised to the replayed code and not yet answered by a fork.
        #: Code that catches it (a tool error handler, a try/except) must not turn it into a
        #: vaguer one: later divergences quote it, and `check_all_consumed` raises it again.
        self.diverged: ReplayDivergence | None = None
        self._by_path: dict[str, list[Step]] | None = None  # built at the first `recorded_at`
        #: paths where a tracked call (a tool, retriever or model) started in this replay,
        #: served or not: a recorded step at one of them that nobody asked for ran for real
        self._started_at: set[str] = set()
        #: paths where a call's request could not be encoded to be matched, with why
        self._refused: dict[str, str] = {}
        #: paths where a call was asked for and diverged, with how: its step left unasked
        #: there did not run for real either
        self._diverged_at: dict[str, str] = {}
        #: whether something in this replay sets the core's current path as the recording
        #: did (`track_paths`, or a call made below the root): only then does a call at the
        #: root prefer the steps recorded at the root over the recorded order
        self._paths_tracked = False
        self._told_untracked = False
        self._ended = False

    @property
    def run_id(self) -> UUID:
        return self.run.run_id

    @property
    def steps(self) -> list[Step]:
        return list(self._steps)

    def consumed(self) -> list[Step]:
        return [s for s in self._steps if s.step in self._consumed]

    def is_consumed(self, step: Step) -> bool:
        return step.step in self._consumed

    def recorded_at(self, path: str) -> list[Step]:
        """The steps recorded at exactly `path`, consumed or not, in step order (for backends
        that must know how a call was made before asking for it)."""
        by_path = self._by_path
        if by_path is None:
            by_path = {}
            for step in self._steps:
                by_path.setdefault(step.path, []).append(step)
            self._by_path = by_path
        return list(by_path.get(path, ()))

    def started_at(self, path: str) -> None:
        """Note that a call started at `path` in this replay (called by the adapters' run-tree
        trackers under `instrument(player)`), so that a recorded step there that nobody asked
        for is reported as a call that ran for real instead of being replayed."""
        self._started_at.add(path)

    def track_paths(self) -> None:
        """Note that this replay sets the core's current path where the recording did (called
        by the adapters' run-tree trackers under `instrument(player)`). Until then, or some
        call is made below the root, a call made at the root takes the next recorded step of
        its request wherever it was recorded: the recording's tracker put what ran inside a
        framework's task (a graph node's id or clock read) at the task's path, which an
        untracked replay cannot ask for."""
        self._paths_tracked = True

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
        match_key: str | None = None,
        live: Callable[[], Any] | None = None,
        tentative: bool = False,
    ) -> Any:
        """The recorded result for this call; raises the recorded error or `ReplayDivergence`.

        `match_key` must be given exactly when the recording passed one to `Recorder.record`
        (e.g. a key computed without volatile fields). `live` is the real call, used only when
        the replay was opened with `on_divergence="live"`: from the first divergence on, calls
        with `live` go live and are recorded into a forked run (`player.fork.run_id`) whose
        parent is this run; calls without it are still served from the recording.

        A divergence the replayed code catches is quoted by every later divergence, and raised
        again at the end in place of the `missing_call` it leaves. `tentative=True` asks
        without that: for a backend that tries one form of a request and then another, the
        first miss is no divergence yet.
        """
        target = self._step_or_fork(kind, name, request, path, match_key, live, tentative)
        if isinstance(target, Recorder):
            assert live is not None
            return target.call(kind, name, request, live, path=path, match_key=match_key)
        return self.result_of(target)

    def _step_or_fork(self, kind: str, name: str, request: Any, path: str | None,
                      match_key: str | None, live: object, tentative: bool = False
                      ) -> Step | Recorder:
        """The recorded step of this call, or the forked run's recorder when the call goes
        live (it has a `live` counterpart and the replay has forked, or forks here)."""
        if live is not None and self.fork is not None:
            return self.fork
        try:
            return self.next_step(kind, name, request, path=path, match_key=match_key,
                                  tentative=tentative)
        except ReplayDivergence as diverged:
            if live is None or self.fork_starter is None:
                raise
            return self._go_live(diverged)

    @property
    def can_go_live(self) -> bool:
        """Whether the replay was opened with `on_divergence="live"`."""
        return self.fork_starter is not None

    def go_live(self, diverged: ReplayDivergence) -> Recorder:
        """Start (or join) the forked run at this divergence and return its recorder.

        For replay backends that make the live call themselves (a framework model that records
        through its own callbacks) rather than through `next(live=...)`. Raises `diverged`
        unless the replay was opened with `on_divergence="live"`.
        """
        if self.fork_starter is None:
            raise diverged
        return self._go_live(diverged)

    def _go_live(self, diverged: ReplayDivergence) -> Recorder:
        with self._fork_lock:
            if self.fork is None:
                assert self.fork_starter is not None
                with self._lock:
                    served = list(self._served)
                fork = self.fork_starter(diverged, served)
                with self._lock:
                    # steps other threads were served while the fork started go in too, and
                    # from here on `next_step` copies them itself
                    for step in self._served[len(served):]:
                        fork.copy_step(step)
                    self.fork = fork
                    self.diverged = None  # answered: the replay went on live
            return self.fork

    def next_step(self, kind: str, name: str, request: Any, *, path: str | None = None,
                  match_key: str | None = None, tentative: bool = False) -> Step:
        """The matching recorded step itself (consumed), for backends that need its metadata;
        `tentative` as in `next`."""
        if self._ended:
            self._refuse_ended(kind, name)
        if type(kind) is not str or kind not in _CHECKED_KINDS:
            kind = check_kind(kind)
            if len(_CHECKED_KINDS) < 256:
                _CHECKED_KINDS.add(kind)
        name = clean_label(name)
        if match_key is not None:
            match_key = clean_key(match_key)
        redacted = sent = None
        path = clean_label(self._where(kind, name, path))
        try:
            if self.redactor is None:
                if match_key is not None:
                    key = match_key
                else:
                    encoded = encode(request, path="request")
                    key = match_key_of_canonical(kind, name, canonical_bytes(encoded))
                    if self._secret_matcher is not None:  # placeholders match unchecked
                        sent = encoded
            else:
                key, redacted, sent = self._redacted_key(kind, name, request, match_key)
                if redacted is not None:  # never show the secret in a divergence report
                    request = shown_request(redacted)
        except SerializationError as exc:
            # a step left unasked here was not run for real: its request could not be taken
            self._refused.setdefault(path, str(exc))
            raise
        prefer = path if self._paths_tracked or path != f"{kind}:{name}" else None
        with self._lock:
            step, expected_next = self._take(kind, name, key, path, prefer)
            near = None
            if step is None and sent is not None:
                step, near = self._take_by_secrets(kind, name, sent, prefer, expected_next)
            if step is None:
                if near is not None:  # nor the secrets the rules in use do not know
                    assert self._secret_matcher is not None
                    request = self._secret_matcher.shown(near, sent)
                # built by a call: an exception held in a local here would keep this frame
                # (and what it references) alive in a cycle after it is raised
                raise self._divergence(kind, name, request, key, path, expected_next, redacted,
                                       tentative, near, compared=sent is not None)
            self._consume(step)
            self._served.append(step)
            fork = self.fork
        if prefer is None and step.path != path and not self._told_untracked:
            self._tell_untracked(step, path)
        if fork is not None:  # served from the recording after going live: the fork has it too
            fork.copy_step(step)
        return step

    def _where(self, kind: str, name: str, path: str | None) -> str:
        """The path of a call: `path`, else where the recorder would have put it."""
        if path is not None:
            return path
        here = current_path()
        if here:  # something sets the current path in this replay, as the recording did
            self._paths_tracked = True
        return join_path(here, f"{kind}:{name}")

    def _tell_untracked(self, step: Step, path: str) -> None:
        self._told_untracked = True
        log.info("replay of run %s: step %d (%s %r) was recorded at %s, inside the run tree, "
                 "and is asked for at its root (%s): nothing tracks this replay's run tree "
                 "(instrument(player) does), so such calls are served in recorded order",
                 self.run_id, step.step, step.kind, step.name, step.path, path)

    def _divergence(self, kind: str, name: str, request: Any, key: str, path: str,
                    expected_next: Step | None, redacted: Any, tentative: bool,
                    near: Step | None, *, compared: bool) -> ReplayDivergence:
        pending = self.unconsumed()
        diverged = divergence(
            run_id=self.run_id, kind=kind, name=name, request=request, key=key, path=path,
            pending=pending, expected_next=expected_next,
            recorded_total=sum(1 for s in self._steps if s.kind == kind and s.name == name))
        if self.redactor is not None:  # say if other redaction is a likely cause
            add_redaction_hint(diverged, redacted,
                               [s for s in pending if s.kind == kind and s.name == name],
                               (meta_redaction(self.run), self.redactor.rules_digest),
                               near=near, compared=compared)
        if tentative:
            return diverged
        self._add_ran_for_real(diverged, pending, path)
        # asked and refused here: its step left unasked did not run for real
        self._diverged_at.setdefault(path, diverged.classification)
        if self.diverged is None:
            self.diverged = diverged
            return diverged
        later = after_caught(diverged, self.diverged)
        later.__cause__ = self.diverged  # its traceback shows where the replayed code was
        return later

    def _add_ran_for_real(self, diverged: ReplayDivergence, pending: list[Step], path: str
                          ) -> None:
        """Name the recorded calls nobody asked for although a call started at their paths
        earlier in this replay: a model left live (not swapped for its replay backend) whose
        different answer is the likely cause of this divergence. Not the calls this one runs
        inside, which have not ended yet, nor those that ran for real with what they called
        served (a tool whose model is replayed: meant to run)."""
        started = self._started_at
        if not started:
            return
        unasked = [s for s in pending if s.path in started and s.path != path
                   and s.path not in self._refused and s.path not in self._diverged_at
                   and not is_inside(path, s.path)]
        unasked = [s for s in unasked
                   if not any(is_inside(served.path, s.path) for served in self._served)]
        if unasked:
            ran_for_real(diverged, unasked)

    def _redacted_key(self, kind: str, name: str, request: Any, match_key: str | None
                      ) -> tuple[str, Any, Any]:
        """The match key of the request as the recorder saw it (secrets replaced), the
        redacted encoded request if redaction changed it (else None), and the encoded request
        as sent, to compare with recorded ones if the key is not found (None when the caller
        gave the key: it cannot be compared)."""
        assert self.redactor is not None
        try:
            encoded = encode(request, path="request")
        except SerializationError:
            if match_key is None:
                raise
            return match_key, None, None  # stored as unencodable: its caller's key stands
        if match_key is None and (kind, name) not in self._secret_requests:
            # A request recorded exactly as it is sent now needs no redaction: redaction
            # leaves what it stored unchanged (placeholders included), so it would give the
            # same key. Only a request the recording does not hold as is pays for it.
            key = match_key_of_canonical(kind, name, canonical_bytes(encoded))
            if self._keyed.holds((kind, name, key)):
                return key, None, encoded
        redacted, changed = self.redactor.redact_encoded(encoded)
        if changed and match_key is None and len(self._secret_requests) < 1024:
            self._secret_requests.add((kind, name))  # this call's requests hold secrets
        request_json = canonical_bytes(redacted)
        if match_key is None:
            key = match_key_of_canonical(kind, name, request_json)
        elif b"<secret:" in request_json:  # keyed as the recorder keyed it
            key = self.redactor.rekey(match_key)
        else:
            key = match_key
        return key, redacted if changed else None, encoded if match_key is None else None

    def _take_by_secrets(self, kind: str, name: str, sent: Any, path: str | None,
                         expected_next: Step | None) -> tuple[Step | None, Step | None]:
        """(the recorded step of a request whose redaction gave another key than the
        recording's, found by comparing it as sent with the recorded requests holding
        placeholders, else None; a recorded request that is it but for its secrets).
        `path` None: in recorded order, wherever recorded."""
        matcher = self._secret_matcher
        assert matcher is not None
        consumed = self._consumed
        pending = matcher.pending(kind, name, consumed)
        if not pending:
            return None, None
        candidates: Iterable[Step]
        if self.match == "sequential":  # the step expected next, if it is this call's
            candidates = [s for s in (expected_next,)
                          if s is not None and s.kind == kind and s.name == name]
        else:  # lazily: the first candidate is the one almost always
            candidates = itertools.chain(
                (s for s in pending if s.path == path and s.step not in consumed),
                (s for s in pending if s.path != path and s.step not in consumed))
        found, near = matcher.find(sent, candidates)
        if found is None and near is not None and not self.check_secrets:
            found, near = near, None
            self._unchecked += 1
            if self._unchecked == 1:
                log.warning(
                    "replay of run %s: a request holding secrets (%s %r, step %d) matched its "
                    "recording with its secrets unchecked (check_secrets=False): the text at "
                    "its placeholders is not their secret under this replay's redaction key",
                    self.run_id, kind, name, found.step)
        elif found is not None and matcher.matched == 1:
            log.info("replay of run %s: a request holding secrets (%s %r, step %d) matched "
                     "its recording as sent, not by its key, as it is redacted otherwise now "
                     "(redaction rules recorded: %s, in use: %s)", self.run_id, kind, name,
                     found.step, meta_redaction(self.run) or "not stored",
                     matcher.rules_digest)
        return found, near

    async def anext(
        self,
        kind: str,
        name: str,
        request: Any,
        *,
        path: str | None = None,
        match_key: str | None = None,
        live: Callable[[], Awaitable[Any]] | None = None,
        tentative: bool = False,
    ) -> Any:
        """`next` for async code. A call that was cancelled while recording (a timeout cut it
        short) never completes here either, so the caller's same timeout fires again. `live`
        is awaited instead of the recording from the first divergence on, as with `next`."""
        target = self._step_or_fork(kind, name, request, path, match_key, live, tentative)
        if isinstance(target, Recorder):
            assert live is not None
            return await target.acall(kind, name, request, live, path=path, match_key=match_key)
        return await self.aresult_of(target)

    async def aresult_of(self, step: Step) -> Any:
        """`result_of` for async code: a step whose call was cancelled while recording never
        completes here either (until cancelled, as during recording)."""
        if step.is_error and is_cancellation(decode(step.output, restore_objects=False)):
            await asyncio.Event().wait()
        await self.in_recorded_order(step)
        return self.result_of(step)

    async def in_recorded_order(self, step: Step) -> None:
        """Wait until the calls that ended while `step`'s call ran, before it did, have
        returned in this replay (`_completion_order`): a fan-out then sees its results in the
        order it saw them while recording. For a backend that decodes a step it took itself;
        `anext` and `aresult_of` wait so already. Call it right after taking the step, with
        no await between."""
        if self.match == "keyed" and self.fork is None:
            await self._order.wait_turn(step, self._consumed)

    def result_of(self, step: Step) -> Any:
        """Decode a step's output, or raise its recorded error."""
        if step.is_error:
            record = decode(step.output)
            if is_cancellation(record):
                raise ReplayedCancellation(
                    f"step {step.step} of run {self.run_id} ({step.kind} {step.name!r}) was "
                    "cancelled while recording (e.g. by a timeout); replay async calls with "
                    "`await player.anext(...)` so that the same timeout fires again")
            raise error_from_record(record)
        try:
            return decode(step.output)
        except SerializationError as exc:  # the path inside the value alone is not enough
            exc.args = (f"step {step.step} of run {self.run_id} ({step.kind} {step.name!r}): "
                        f"{exc}",)
            raise

    # -- matching -------------------------------------------------------------------------

    def _take(self, kind: str, name: str, key: str, path: str, prefer: str | None
              ) -> tuple[Step | None, Step | None]:
        """(the step to serve or None, the step sequential matching expected next); keyed,
        the step recorded at `prefer` comes first (None: the recorded order alone)."""
        if self.match == "sequential":
            return self._take_next_in_order(kind, name, key, path)
        return self._keyed.take((kind, name, key), prefer, self._consumed), None

    def _take_next_in_order(self, kind: str, name: str, key: str, path: str
                            ) -> tuple[Step | None, Step | None]:
        while self._cursor < len(self._steps) and self._steps[self._cursor].step in self._consumed:
            self._cursor += 1
        index = self._cursor
        # Steps recorded inside this call come before it (a call is recorded when it returns);
        # they are consumed with it, so look past them.
        while index < len(self._steps) and (self._steps[index].step in self._consumed
                                            or is_inside(self._steps[index].path, path)):
            index += 1
        if index >= len(self._steps):
            return None, None
        step = self._steps[index]
        if (step.kind, step.name, step.match_key) == (kind, name, key):
            return step, step
        return None, step

    def _consume(self, step: Step) -> None:
        consumed = self._consumed
        consumed.add(step.step)
        if step.path:
            # Replay boundary: what was recorded inside this call (before it: a call is
            # recorded when it returns) is not expected again.
            if self._inside is None:
                self._inside = InsideIndex(self._steps)
            for inner in self._inside.take_inside(step.path, step.step):
                consumed.add(inner.step)

    def end(self) -> None:
        """Called when the replay block is left: later calls are refused, not served (the
        block's end checked what was replayed; a call after it would escape that check)."""
        self._ended = True

    def _refuse_ended(self, kind: str, name: str) -> NoReturn:
        raise AgentReplayError(
            f"the replay of run {self.run_id} has ended (its `with store.replay(...)` block was "
            f"left), so {kind} {clean_label(name)!r} cannot be served from it: make every "
            "replayed call inside the block (a stream or task that outlives it included)")

    def check_all_consumed(self) -> None:
        """Raise `ReplayDivergence(missing_call)` if recorded steps were never asked for, or,
        if the replayed code caught a divergence (the likely reason), that one again."""
        missing = self._not_replayed(self.unconsumed())
        if missing:
            unused = missing_calls(self.run_id, missing, ran=self._started_at,
                                   refused=self._refused, diverged=self._diverged_at)
            first = self.diverged
            if first is None:
                raise unused
            raise raised_again(first, unused) from first

    def _not_replayed(self, unconsumed: list[Step]) -> list[Step]:
        """`unconsumed` without the calls that ran for real in this replay, everything
        recorded inside them replayed (a tool whose model `ReplayLLM` serves): nobody asks
        for such a call's own step, and nothing of it is missing. So is a retriever that ran
        here at its recorded path with nothing recorded inside it (a query embedded once for
        two retrievers: the second one reads it from the query); a tool or a model so is
        reported, as it may have answered live."""
        if not any(step.path for step in unconsumed):
            return unconsumed
        consumed = self._consumed
        through: set[int] = set()
        below = InsideIndex(self._steps)  # step order: a call's inner steps come before it
        for step in self._steps:
            if not step.path:
                continue
            inner = below.take_inside(step.path, step.step)
            if step.step in consumed:
                continue
            if (inner and all(s.step in consumed or s.step in through for s in inner)) or (
                    not inner and step.kind == "retriever" and step.path in self._started_at):
                through.add(step.step)
        return [step for step in unconsumed if step.step not in through]
