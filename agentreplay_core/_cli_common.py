"""Helpers shared by the run-inspection commands (runs, show, diff, export, import, prune,
verify)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from agentreplay_core._cli_app import err, fail
from agentreplay_core._errors import AgentReplayError, RunNotFound, StoreError
from agentreplay_core._model import Run, RunStatus
from agentreplay_core._store import Store
from agentreplay_core._when import format_duration
from agentreplay_core.stores._file import FileBackend, parse_run

STATUS_STYLE = {
    RunStatus.COMPLETE: "green",
    RunStatus.FAILED: "red",
    RunStatus.INCOMPLETE: "yellow",
    RunStatus.RECORDING: "cyan",
}


def _is_database_error(exc: BaseException, *names: str) -> bool:
    """Whether `exc` is one of the PostgreSQL store's errors named `names`."""
    try:
        from agentreplay_core.stores import _pgconn
    except ImportError:  # no PostgreSQL support installed: no such errors either
        return False
    return isinstance(exc, tuple(getattr(_pgconn, name) for name in names))


def _is_unavailable(exc: BaseException) -> bool:
    return _is_database_error(exc, "DatabaseUnavailable")


def is_transient(exc: BaseException) -> bool:
    """An error of the database, not of the run being read: unreachable, or a statement
    cancelled for taking too long (retrying may help)."""
    return _is_database_error(exc, "DatabaseUnavailable", "DatabaseTimeout")


def unreadable_run_files(store: Store) -> list[tuple[Path, str]]:
    """The files of a `file:` directory store that hold no readable run, each with its
    problem. The store's run list leaves them out (one damaged file must not hide every
    other run), so a command that reads every run names them itself."""
    backend = store.backend
    if not isinstance(backend, FileBackend) or backend.single:
        return []  # a single run file's problem is raised: no run to leave out
    found: list[tuple[Path, str]] = []
    for path in sorted(backend.path.glob("*.jsonl")):
        try:
            parse_run(path.read_bytes(), path, with_steps=False)
        except FileNotFoundError:
            continue  # deleted since the directory was listed
        except (StoreError, OSError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            found.append((path, why.removeprefix(f"{path}: ")))
    return found


class _SkipNotice(logging.Filter):
    """Drops the file store's log line about a run file its run list skips."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "list_runs skips" not in str(record.msg)


@contextmanager
def files_named_here() -> Iterator[None]:
    """For a command that names unreadable run files itself (`unreadable_run_files`): the
    store's log line about each would say it a second time, in another form."""
    logger = logging.getLogger("agentreplay")
    notice = _SkipNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


@contextmanager
def cli_errors(hint: str = "") -> Iterator[None]:
    """Turn agentreplay and file errors into one `error:` line and a hint, exit code 2."""
    try:
        yield
    except RunNotFound as exc:
        raise fail(str(exc), "`agentreplay runs` lists the runs of this store") from None
    except AgentReplayError as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        # an unreachable database's message already says what to check
        raise fail(lines[0], "" if _is_unavailable(exc) else hint) from None
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise fail(f"{where}{exc.strerror or exc}", hint) from None


def print_json(data: Any) -> None:
    """Machine output on stdout: plain JSON, never wrapped or coloured."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def run_tags(run: Run) -> list[str]:
    tags = run.metadata.get("tags")
    return [str(t) for t in tags] if isinstance(tags, list) else []


def run_seconds(run: Run) -> float | None:
    if run.finished_at is None:
        return None
    return max(0.0, (run.finished_at - run.started_at).total_seconds())


def local_time(moment: datetime, *, seconds: bool = False) -> str:
    """A time in the reader's own time zone, to the minute (or second)."""
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def short_ids(ids: Sequence[UUID], minimum: int = 8) -> list[str]:
    """Id prefixes for a table, like git's short hashes: `minimum` characters, more where
    two of `ids` would share them (any unique prefix names its run on the command line)."""
    texts = [str(i) for i in ids]
    for length in range(minimum, 37):
        if len({t[:length] for t in texts}) == len(set(texts)):
            return [t[:length] for t in texts]
    return texts


def duration_text(run: Run) -> str:
    seconds = run_seconds(run)
    return "-" if seconds is None else format_duration(seconds)


def lineage(run: Run) -> str:
    """`3f2a9c1e@4`: the run this one was forked from, and at which step; "" if none."""
    if run.parent_run_id is None:
        return ""
    return f"{str(run.parent_run_id)[:8]}@{run.fork_step if run.fork_step is not None else '?'}"


def status_text(run: Run) -> Text:
    return Text(run.status.value, style=STATUS_STYLE.get(run.status, ""))


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr (only when it is a terminal); yields `update(done, total)`."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update
