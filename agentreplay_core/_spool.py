"""Local spool: where rows go when the database cannot take them, until `flush_spool` loads them.

One append-only JSONL file per run (`<run_id>.jsonl`), each line one of::

    {"t": "run", "run": {...}}                       the run header
    {"t": "rows", "steps": [...], "embeddings": [...]}   a batch of steps
    {"t": "finish", ...}                             the run's seal

Lines are appended whole, fsynced, under an exclusive `flock` (see `stores/_jsonl.py`): an
unfinished last line (a process killed mid-write) is ignored, and cut off before the next
append. Loading renames a file to `<run_id>.jsonl.loading` first; `.loader.lock` gives one
loader at a time its turn.

One spool serves every store of the user, so each line also names the store its run belongs
to (`"store"`, see `store_identity`): a flush loads only its own store's runs. Lines of older
versions name none; those load into whichever store flushes, as they always did.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from uuid import UUID

import orjson
import platformdirs

from agentreplay_core._errors import RunNotFound, StoreError
from agentreplay_core._model import Run, RunStatus
from agentreplay_core._plural import counted
from agentreplay_core.stores import _jsonl as jsonl
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish, StoreBackend

SPOOL_ENV = "AGENTREPLAY_SPOOL_DIR"
LOADING = ".jsonl.loading"
LOADER_LOCK = ".loader.lock"
#: load passes per run and call: bounds the chase of a recorder that keeps spooling
MAX_PASSES = 100


def default_spool_dir() -> Path:
    configured = os.environ.get(SPOOL_ENV)
    if configured:
        return Path(configured)
    return Path(platformdirs.user_cache_dir("agentreplay")) / "spool"


def store_identity(backend: StoreBackend) -> str:
    """Which store `backend` is, stably and without secrets: PostgreSQL's host, port,
    database and schema (not the user or password: two roles on one schema are one store),
    a file store's absolute path; a memory store is itself only."""
    from agentreplay_core.stores._file import FileBackend
    from agentreplay_core.stores._memory import MemoryBackend

    if isinstance(backend, FileBackend):
        return f"file:{os.path.realpath(backend.path)}"
    if isinstance(backend, MemoryBackend):
        return f"memory:{id(backend):x}"
    schema = getattr(backend, "schema", None)
    if isinstance(schema, str):  # PostgreSQL: its description is the DSN, password removed
        return f"{_postgres_target(backend.description)}?schema={schema}"
    return f"{type(backend).__module__}.{type(backend).__qualname__}:{backend.description}"


def _postgres_target(dsn: str) -> str:
    """`postgresql://host:port/dbname` of a DSN, with libpq's defaults filled in, so that the
    same server spelled with or without its default port is one store."""
    from psycopg import Error
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except Error:  # "PostgreSQL (libpq defaults)": no DSN at all
        params = {}
    env = os.environ

    def get(key: str, var: str, default: str) -> str:
        return str(params.get(key) or env.get(var) or default)

    user = get("user", "PGUSER", "")
    host = get("host", "PGHOST", "") or get("hostaddr", "PGHOSTADDR", "")
    return (f"postgresql://{host or 'localsocket'}:{get('port', 'PGPORT', '5432')}/"
            f"{get('dbname', 'PGDATABASE', user)}")


def _step_to_json(step: PendingStep) -> dict[str, object]:
    return {
        "run_id": str(step.run_id), "step": step.step, "kind": step.kind, "name": step.name,
        "match_key": step.match_key, "path": step.path,
        "input": base64.b64encode(step.input_json).decode(),
        "output": base64.b64encode(step.output_json).decode(),
        "is_error": step.is_error, "started_at": step.started_at.isoformat(),
        "duration_ms": step.duration_ms, "checksum": step.checksum,
    }


def _step_from_json(data: dict[str, object]) -> PendingStep:
    return PendingStep(
        run_id=UUID(str(data["run_id"])), step=int(str(data["step"])), kind=str(data["kind"]),
        name=str(data["name"]), match_key=str(data["match_key"]), path=str(data["path"]),
        input_json=base64.b64decode(str(data["input"])),
        output_json=base64.b64decode(str(data["output"])),
        is_error=bool(data["is_error"]),
        started_at=datetime.fromisoformat(str(data["started_at"])),
        duration_ms=float(str(data["duration_ms"])), checksum=str(data["checksum"]),
    )


class SpoolFlushError(StoreError):
    """Some spooled runs could not be loaded; they stay spooled for a later flush.

    Attributes:
        loaded: steps loaded per run that did load (as `Spool.flush` returns them).
        failed: per run that did not, why (exception type and message).
    """

    def __init__(
        self, directory: Path, loaded: dict[UUID, int], failed: dict[UUID, str]
    ) -> None:
        self.loaded = loaded
        self.failed = failed
        reasons = "; ".join(f"run {run_id}: {why}" for run_id, why in failed.items())
        super().__init__(
            f"{counted(len(failed), 'spooled run')} in {directory} could not be loaded "
            f"({reasons}); {counted(len(loaded), 'other run')} loaded. The failed ones stay "
            "spooled: fix the "
            "cause and run `agentreplay spool flush` again")


class Spool:
    """Append-only spool files in one directory, shared safely by threads and processes."""

    def __init__(self, directory: Path | None = None, store: str | None = None) -> None:
        self.directory = Path(directory) if directory else default_spool_dir()
        #: the store the rows written here belong to (`store_identity`); None writes lines
        #: naming none, which any store's flush loads (as before stores were told apart)
        self.store = store

    def _file(self, run_id: UUID) -> Path:
        return self.directory / f"{run_id}.jsonl"

    def _append(self, run_id: UUID, record: dict[str, object]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.store is not None:
            # on every line: a file may start with any of them (only a run's last rows
            # spooled), and its first line tells its store
            record["store"] = self.store
        jsonl.append_to(self._file(run_id), orjson.dumps(record) + b"\n", create=True,
                        mode=0o600)

    def write_run(self, run: Run) -> None:
        self._append(run.run_id, {"t": "run", "run": run.model_dump(mode="json")})

    def write_rows(self, steps: Sequence[PendingStep], embeddings: Sequence[EmbeddingRow]) -> None:
        by_run: dict[UUID, list[PendingStep]] = {}
        for step in steps:
            by_run.setdefault(step.run_id, []).append(step)
        for run_id, run_steps in by_run.items():
            vectors = [
                {"step": e.step, "position": e.position, "vector": e.vector}
                for e in embeddings if e.run_id == run_id
            ]
            self._append(run_id, {"t": "rows", "steps": [_step_to_json(s) for s in run_steps],
                                  "embeddings": vectors})

    def write_finish(self, finish: RunFinish) -> None:
        self._append(finish.run_id, {
            "t": "finish", "status": finish.status.value, "step_count": finish.step_count,
            "head_checksum": finish.head_checksum, "finished_at": finish.finished_at.isoformat(),
        })

    def holds(self, run_id: UUID) -> bool:
        """Whether rows of the run wait here."""
        return self._file(run_id).exists() or (self.directory / f"{run_id}{LOADING}").exists()

    def pending(self) -> list[UUID]:
        """Run ids that have spooled rows waiting."""
        if not self.directory.is_dir():
            return []
        ids: set[UUID] = set()
        for path in self.directory.iterdir():
            stem = path.name.split(".", 1)[0]
            if path.name.endswith((".jsonl", LOADING)):
                try:
                    ids.add(UUID(stem))
                except ValueError:
                    continue
        return sorted(ids, key=str)

    def load_into(self, backend: StoreBackend, run_id: UUID) -> int:
        """Load one run's spooled rows into `backend` (idempotently); returns steps loaded.

        The live file is renamed (to `.jsonl.loading`) before loading, so a recorder still
        spooling starts a new file instead of racing with the load; what it spools meanwhile
        is loaded next, in order. A crash mid-load leaves the renamed file for the next load,
        and loading twice is harmless. Loaders in other threads and processes wait their turn.
        Rows spooled for another store are left alone (0).
        """
        return self._load_run(backend, run_id, store_identity(backend)) or 0

    def _load_run(self, backend: StoreBackend, run_id: UUID, here: str) -> int | None:
        """`load_into`, but None when nothing was spooled for the run (anymore), or only for
        another store than `here` (the backend's `store_identity`, made once per flush)."""
        if not self.directory.is_dir():
            return None
        live = self._file(run_id)
        loading = self.directory / f"{run_id}{LOADING}"
        count: int | None = None
        with self._loader_turn():
            # Older rows first (a `.loading` file left by an interrupted load), then the live
            # file. A recorder that never stops spooling is not chased forever: what it writes
            # after the last pass stays for the next load.
            for _ in range(MAX_PASSES):
                if loading.exists():
                    if _store_of(loading) not in (None, here):
                        break
                elif not _take(live, loading, here):
                    break
                count = (count or 0) + self._load_file(backend, run_id, loading)
                loading.unlink(missing_ok=True)
        return count

    def elsewhere(self, backend: StoreBackend) -> dict[UUID, str]:
        """Spooled runs that belong to another store than `backend`'s, with that store."""
        here = store_identity(backend)
        found: dict[UUID, str] = {}
        for run_id in self.pending():
            store = self._store_of_run(run_id)
            if store is not None and store != here:
                found[run_id] = store
        return found

    def _store_of_run(self, run_id: UUID) -> str | None:
        for path in (self.directory / f"{run_id}{LOADING}", self._file(run_id)):
            with contextlib.suppress(FileNotFoundError):
                return _store_of(path)
        return None

    @contextmanager
    def _loader_turn(self) -> Iterator[None]:
        # One loader at a time per spool directory, across threads (each opens its own
        # descriptor, and flock excludes per open file) and processes. Without it a second
        # loader could rename a newer live file over a `.loading` file the first one is still
        # loading, or unlink it unloaded.
        fd = os.open(self.directory / LOADER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _load_file(self, backend: StoreBackend, run_id: UUID, path: Path) -> int:
        count = 0
        for _, record in jsonl.records(path.read_bytes(), path):
            kind = record.get("t")
            if kind == "run":
                backend.create_run(Run.model_validate(record["run"]))
            elif kind == "rows":
                steps = [_step_from_json(s) for s in record["steps"]]
                vectors = [
                    EmbeddingRow(run_id, int(e["step"]), int(e["position"]), list(e["vector"]))
                    for e in record["embeddings"]
                ]
                backend.append(steps, vectors, idempotent=True)
                count += len(steps)
            elif kind == "finish":
                head = record["head_checksum"]
                backend.finish_run(RunFinish(
                    run_id=run_id, status=RunStatus(str(record["status"])),
                    step_count=int(record["step_count"]),
                    head_checksum=str(head) if head is not None else None,
                    finished_at=datetime.fromisoformat(str(record["finished_at"])),
                ))
        return count

    def flush(self, backend: StoreBackend) -> dict[UUID, int]:
        """Load every spooled run of `backend`'s store into it; returns steps loaded per run.

        Files are removed once loaded; runs spooled for other stores stay (`elsewhere`). A
        run that cannot be loaded stays spooled and does not stop the others: once all were
        tried, `SpoolFlushError` lists the failures (and `.loaded` holds what this call did
        load).
        """
        loaded: dict[UUID, int] = {}
        failed: dict[UUID, str] = {}
        here = store_identity(backend)
        for run_id in self.pending():
            owner = self._store_of_run(run_id)
            if owner not in (None, here):
                continue
            try:
                count = self._load_run(backend, run_id, here)
            except Exception as exc:  # any one run's problem, reported together below
                failed[run_id] = f"{type(exc).__name__}: {exc}"
                # A file naming no store may be another store's, whose run this one lacks:
                # setting it aside would keep it from the store it belongs to.
                if backend.is_permanent(exc) and not (owner is None and _not_found(exc)):
                    # the store refuses this data: retrying every flush would fail forever
                    where = self._set_aside(run_id)
                    failed[run_id] += f" (rejected by the store; set aside as {where})"
                continue
            if count is not None:  # None: another loader took it meanwhile
                loaded[run_id] = count
        if failed:
            raise SpoolFlushError(self.directory, loaded, failed)
        return loaded

    def _set_aside(self, run_id: UUID) -> str:
        """Move a run's spool files out of the way, keeping them for inspection."""
        names = []
        for suffix in (".jsonl.loading", ".jsonl"):
            path = self.directory / f"{run_id}{suffix}"
            target = path.with_name(path.name + ".rejected")
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, target)
                names.append(target.name)
        return ", ".join(names) or "nothing (already gone)"

    def discard(self, run_id: UUID) -> None:
        self._file(run_id).unlink(missing_ok=True)


def _take(live: Path, loading: Path, store: str) -> bool:
    """Rename the live spool file to `loading`; False if there is none, or it holds rows of
    another store than `store`."""
    try:
        # under the writers' lock, so no line is half written into the renamed file (nor
        # the first, which names the store)
        with jsonl.locked(live, create=False, mode=0o600) as fd:
            if _first_store(fd) not in (None, store):
                return False
            os.rename(live, loading)
    except FileNotFoundError:
        return False
    return True


def _store_of(path: Path) -> str | None:
    """The store a spool file's rows belong to; None if its lines name none (or it has no
    whole line yet). Raises `FileNotFoundError`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return _first_store(fd)
    finally:
        os.close(fd)


def _first_store(fd: int) -> str | None:
    parts: list[bytes] = []
    offset = 0
    while True:  # a first line holds a batch of rows: maybe megabytes
        chunk = os.pread(fd, 65536, offset)
        if not chunk:
            return None
        end = chunk.find(b"\n")
        if end >= 0:
            parts.append(chunk[:end])
            break
        parts.append(chunk)
        offset += len(chunk)
    try:
        record = orjson.loads(b"".join(parts))
    except orjson.JSONDecodeError:
        return None  # loading it reports the damage
    store = record.get("store") if isinstance(record, dict) else None
    return store if isinstance(store, str) else None


def _not_found(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, RunNotFound):
            return True
        cause = cause.__cause__
    return False
