"""`Store`: the run store users hold. Record, replay, verify on top of any backend."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from agentreplay_core._errors import AgentReplayError, RunNotFound, StoreError
from agentreplay_core._integrity import Problem, VerifyReport, chain_name, verify_chain
from agentreplay_core._keys import clean_label
from agentreplay_core._metadata import run_metadata
from agentreplay_core._model import EmbeddingMatch, Run, RunStatus, Step
from agentreplay_core._player import Player
from agentreplay_core._prepare_client import PREPARE_ENV, check_prepare
from agentreplay_core._recorder import Recorder
from agentreplay_core._redact import Redactor
from agentreplay_core._run_lookup import as_run_id, close_ids, reap, resolve_run_id
from agentreplay_core._sink import Sink
from agentreplay_core._spool import Spool, store_identity
from agentreplay_core._store_keys import store_keys
from agentreplay_core._store_replay import OnDivergence, replaying
from agentreplay_core._writer import LINGER, BatchedWriter, Writer, check_linger
from agentreplay_core._writer_sync import SyncWriter, check_durability
from agentreplay_core.stores._backend import StoreBackend, ThisProcess

log = logging.getLogger("agentreplay")

_UNSET: Any = object()
#: longest run name: a btree index entry holds at most ~2,700 bytes (500 4-byte characters
#: fit, with the rest of the entry); longer names would be refused by PostgreSQL
MAX_RUN_NAME = 500


def _new_run_id(run_id: UUID | str) -> UUID:
    if isinstance(run_id, UUID):
        return run_id
    try:
        return UUID(str(run_id))
    except ValueError:
        raise ValueError(f"run_id={run_id!r} is not a UUID") from None


class Store:
    """A run store over one backend (PostgreSQL, JSONL files or memory). See `open_store`.

    `prepare="process"` (or `AGENTREPLAY_PREPARE=process`) has the batched writer hand the
    costly part of making rows (redaction, canonical JSON, match keys, delta encoding) to a
    helper process, which runs it on another core, outside the agent's GIL; the rows are the
    same. If the helper cannot start or fails, the writer goes on without it and logs why.
    POSIX only; the default, "thread", prepares them in the writer's thread.
    """

    def __init__(
        self,
        backend: StoreBackend,
        *,
        hmac_key: bytes | str | Sequence[bytes | str] | None = _UNSET,
        spool_dir: str | Path | None = None,
        max_queue: int = 10_000,
        linger: float = LINGER,
        accept_unkeyed_runs: bool = False,
        redaction: Redactor | None = _UNSET,
        prepare: str | None = None,
    ) -> None:
        if isinstance(backend, (str, bytes, os.PathLike)):
            # else it fails only in the writer's thread, and the run's steps are lost (the
            # URL is not repeated here: it may hold a password)
            raise TypeError(f"Store() takes a store backend, not a {type(backend).__name__}: "
                            "open a store from its URL or path with open_store(url)")
        self.backend = backend
        #: where the batched writer prepares steps: "thread" (its own) or "process" (a helper)
        self.prepare = check_prepare(prepare or os.environ.get(PREPARE_ENV) or "thread")
        #: with an HMAC key, also trust runs chained without one (recorded before the key)
        self.accept_unkeyed_runs = accept_unkeyed_runs
        new_key, old_keys = store_keys(hmac_key, from_env=hmac_key is _UNSET)
        #: the key new runs are chained with (the first of `hmac_key=[new, old, ...]`)
        self.hmac_key: bytes | None = new_key
        #: retired keys: runs chained under them still verify (SECURITY.md, key rotation)
        self.hmac_old_keys: tuple[bytes, ...] = old_keys
        if redaction is _UNSET:
            redaction = Redactor.from_env()
        #: replaces secrets before anything is stored (None: redaction off)
        self.redaction = redaction.bound_to_store(self.hmac_key) if redaction else None
        self.spool = Spool(Path(spool_dir) if spool_dir else None, store=store_identity(backend))
        self._sink = Sink(backend, self.spool)
        self._max_queue = max_queue
        self._linger = check_linger(linger)
        self._batched: BatchedWriter | None = None
        self._sync_writer = SyncWriter(self._sink)
        self._lock = threading.Lock()
        #: the process the writers belong to (`_own_writers`)
        self._pid = ThisProcess.pid
        self._closed = False
        #: the runs this store started recording (for what `get_run` says of one not found)
        self._recorded_here: set[UUID] = set()

    def __repr__(self) -> str:
        return f"<Store {self.backend.description}>"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Write what is queued, load what was spooled if the database is back, disconnect."""
        if self._closed:
            return
        self._closed = True
        if self._pid != ThisProcess.pid:
            self._own_writers()
        if self._batched is not None:
            self._batched.close(timeout=30.0)
        else:
            self._sink.flush_spooled()
        self.backend.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the run store {self.backend.description} is closed; "
                             "open a new one with open_store()")

    def _own_writers(self) -> None:
        """In a forked child: writers and a sink of its own. The parent's writer thread was
        not forked with it, and its queue, counts and locks (maybe held at the fork) belong
        to the runs the parent records; the backend opens connections of the child's own."""
        with ThisProcess.lock:
            if self._pid == ThisProcess.pid:
                return
            self._sink = Sink(self.backend, self.spool)
            self._sync_writer = SyncWriter(self._sink)
            self._batched = None  # the parent's, left alone (`BatchedWriter.close`)
            self._lock = threading.Lock()
            self._pid = ThisProcess.pid

    def _writer(self, durability: str) -> Writer:
        if self._pid != ThisProcess.pid:
            self._own_writers()
        if check_durability(durability) == "sync":
            return self._sync_writer
        with self._lock:
            if self._batched is None:
                self._batched = BatchedWriter(self._sink, max_queue=self._max_queue,
                                              linger=self._linger, prepare=self.prepare)
            return self._batched

    # -- recording ------------------------------------------------------------------------

    @contextlib.contextmanager
    def record(
        self,
        name: str | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        tags: Iterable[str] | None = (),
        durability: str = "batched",
        entropy: bool = False,
        run_id: UUID | str | None = None,
        parent_run_id: UUID | None = None,
        fork_step: int | None = None,
        _entropy_in_log: bool = False,
    ) -> Iterator[Recorder]:
        """Record one run. Leaving the block seals it `complete`, or `failed` if it raised (the
        exception propagates unchanged). A process that dies leaves it `incomplete`."""
        self._check_open()
        self._check_writable()
        if name is not None and not isinstance(name, str):
            raise TypeError(f"run name must be a string, not {type(name).__name__}")
        if name is not None and len(name) > MAX_RUN_NAME:  # PostgreSQL indexes the name
            raise ValueError(f"run name of {len(name)} characters: at most {MAX_RUN_NAME} "
                             "are stored; put longer text in metadata=")
        if run_id is not None:
            run_id = _new_run_id(run_id)
            self._check_new_run_id(run_id)
        writer = self._writer(durability)
        # `_entropy_in_log`: a forked run holds entropy steps copied from its parent
        meta = run_metadata(metadata, tags, durability, entropy or _entropy_in_log,
                            self.redaction)
        if self.redaction is not None and name:
            name = self.redaction.redact_text(name)
        run = Run(
            run_id=run_id or uuid4(), name=clean_label(name) if name else name,
            status=RunStatus.RECORDING,
            started_at=datetime.now(timezone.utc), parent_run_id=parent_run_id,
            fork_step=fork_step, metadata=meta, chain=chain_name(self.hmac_key),
        )
        self._recorded_here.add(run.run_id)
        writer.submit_run(run)
        recorder = Recorder(run.run_id, writer, hmac_key=self.hmac_key,
                            redactor=self.redaction)
        status = RunStatus.FAILED
        try:
            if entropy:
                from agentreplay_core._entropy import record_entropy

                with record_entropy(recorder):
                    yield recorder
            else:
                yield recorder
            status = RunStatus.COMPLETE
        finally:
            try:
                recorder._seal(status)
            except Exception:  # sealing must never replace the user's exception
                log.exception("agentreplay: could not seal run %s", run.run_id)

    def _check_new_run_id(self, run_id: UUID) -> None:
        # Recording under the id of a stored run would mix two runs into one broken chain:
        # the new run's rows were dropped as already there, and its seal replaced the stored
        # run's, which then failed to verify.
        try:
            self.backend.get_run(run_id)
        except StoreError:  # not found (or cannot tell: the recorder copes with a store down)
            return
        raise AgentReplayError(f"run {run_id} already exists in {self.backend.description}; "
                               "a recording needs a new run id (or none, to get a fresh one)")

    def _check_writable(self) -> None:
        """Refuse to start recording with a role that may only read (SECURITY.md): fail here,
        before the agent runs, instead of spooling every row of the run for nothing."""
        check = getattr(self.backend, "check_writable", None)
        if check is not None:
            check()

    # -- reading --------------------------------------------------------------------------

    def get_run(self, run_id: UUID | str) -> Run:
        """The run's row; a `recording` run whose process died on this host is marked
        `incomplete` on the way. A unique prefix of a run id names that run (`resolve_run_id`).
        """
        rid = self.resolve_run_id(run_id)
        try:
            run = self.backend.get_run(rid)
        except RunNotFound as exc:
            close = close_ids(self.backend, str(rid))
            if rid in close:  # written by the batched writer just now: read it again
                return reap(self.backend, self.backend.get_run(rid))
            raise RunNotFound(rid, self._not_found_hint(rid, close)) from exc.__cause__
        return reap(self.backend, run)

    def _not_found_hint(self, run_id: UUID, close: list[UUID]) -> str:
        if close:
            return "did you mean " + ", ".join(str(c) for c in close) + "?"
        if self.spool.holds(run_id):
            return (f"its rows wait in the spool {self.spool.directory} (the database was "
                    "unreachable while it was recorded): `agentreplay spool flush`, or closing "
                    "the store once the database is back, loads them")
        if run_id in self._recorded_here and self._batched is not None:
            return ("a run still being recorded with durability=\"batched\" is written in "
                    "the background: leave its record block, or call rec.flush(), before "
                    "reading it")
        return "`agentreplay runs` lists the runs of this store"

    def resolve_run_id(self, run_id: UUID | str) -> UUID:
        """The id `run_id` names: a full id as is, or the one run id starting with these hex
        digits (dashes optional), like git's short hashes. Raises `RunNotFound` for a prefix
        of no run (naming the closest ids) or of several runs (naming them)."""
        return resolve_run_id(self.backend, run_id)

    def list_runs(self, *, name: str | None = None, status: RunStatus | str | None = None,
                  since: datetime | None = None, limit: int | None = 100,
                  tag: str | None = None, before: datetime | None = None) -> list[Run]:
        """Runs, newest first; `since`/`before` bound the start time (>= / <), `tag` keeps
        the runs recorded with that tag."""
        wanted = RunStatus(status) if status is not None else None
        # names and tags are stored cleaned (NUL made visible): look for them so
        name, tag = (clean_label(v) if isinstance(v, str) else v for v in (name, tag))
        # passed only when set: a backend written before these filters keeps working
        extra: dict[str, Any] = {k: v for k, v in (("tag", tag), ("before", before))
                                 if v is not None}
        if wanted in (RunStatus.RECORDING, RunStatus.INCOMPLETE):
            # reaping turns dead `recording` runs into `incomplete`: filter after it
            runs = [reap(self.backend, r) for r in self.backend.list_runs(name=name, since=since,
                                                                  **extra)]
            runs = [r for r in runs if r.status == wanted]
            return runs[:limit] if limit is not None else runs
        return [reap(self.backend, r) for r in self.backend.list_runs(
            name=name, status=wanted, since=since, limit=limit, **extra)]

    def load_steps(self, run_id: UUID | str) -> list[Step]:
        return self.backend.load_steps(self.get_run(run_id).run_id)

    def delete_run(self, run_id: UUID | str) -> None:
        self.backend.delete_run(as_run_id(run_id))

    def search_embeddings(self, vector: Sequence[float], limit: int = 10) -> list[EmbeddingMatch]:
        """Nearest recorded vectors (needs PostgreSQL with pgvector)."""
        return self.backend.search_embeddings(vector, limit)

    def flush_spool(self) -> dict[UUID, int]:
        """Load every spooled run into the backend; returns steps loaded per run."""
        return self.spool.flush(self.backend)

    # -- verification and replay ------------------------------------------------------------

    def verify(self, run_id: UUID | str) -> VerifyReport:
        """Check a run's hash chain; the report has one problem per bad step."""
        run = self.get_run(run_id)
        return self.verify_steps(run, self.backend.load_steps(run.run_id))

    def verify_steps(self, run: Run, steps: Sequence[Step]) -> VerifyReport:
        """Verify a run already loaded (an export, an import) with this store's keys."""
        return verify_chain(run, steps, self.hmac_key, accept_unkeyed=self.accept_unkeyed_runs,
                            old_keys=self.hmac_old_keys)

    def verify_all(self, progress: Callable[[int, int], None] | None = None
                   ) -> list[VerifyReport]:
        """Verify every run; a run that cannot even be read is reported, not raised.
        `progress(done, total)` is called after each run."""
        reports: list[VerifyReport] = []
        runs = self.list_runs(limit=None)
        for run in runs:
            try:
                reports.append(self.verify(run.run_id))
            except AgentReplayError as exc:
                reports.append(VerifyReport(run.run_id, 0, [
                    Problem(run.run_id, None, "unreadable", f"cannot read the run: {exc}")]))
            if progress is not None:
                progress(len(reports), len(runs))
        return reports

    def replay(
        self,
        run_id: UUID | str,
        *,
        match: str = "keyed",
        allow_unused: bool = False,
        verify: bool = True,
        on_divergence: OnDivergence = "raise",
        network_guard: bool | None = None,
        allow_hosts: Iterable[tuple[str, int]] = (),
        entropy: bool | None = None,
        secrets: Mapping[str, str] | Iterable[str] | None = None,
        check_secrets: bool | None = None,
    ) -> contextlib.AbstractContextManager[Player]:
        """Replay a recorded run: a context manager that yields the `Player` replay
        backends ask for results.

        Refuses a run that fails verification (`IntegrityError`) unless `verify=False`. Leaving
        the block with recorded steps never asked for raises `ReplayDivergence(missing_call)`
        unless `allow_unused`. Entropy replay is switched on for runs that recorded it. The
        network guard is on unless `on_divergence="live"`, whose live calls need the network.
        Recorded outputs hold placeholders where secrets were; `secrets` puts them back:
        `{placeholder: secret}`, or just the secrets (placeholders derived with the key).
        A request matches a recorded one holding placeholders only where the text at each is
        its secret under the redaction key; `check_secrets=False` lets them match any text,
        for a machine without the key the run was recorded with (None: on, unless
        `AGENTREPLAY_CHECK_SECRETS=0`).
        """
        return replaying(self, run_id, match=match, allow_unused=allow_unused, verify=verify,
                         on_divergence=on_divergence, network_guard=network_guard,
                         allow_hosts=allow_hosts, entropy=entropy, secrets=secrets,
                         check_secrets=check_secrets)
