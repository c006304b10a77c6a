"""Finding a stored run: a full run id or a unique prefix of one (like git's short hashes),
the closest ids for a "did you mean", and the `recording` runs whose process died on this
host, reported (and stored, where the role may write) as `incomplete`."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
from uuid import UUID

from agentreplay_core._errors import RunNotFound, StoreError
from agentreplay_core._model import Run, RunStatus
from agentreplay_core.stores._backend import StoreBackend

__all__ = ["as_run_id", "close_ids", "mark_incomplete", "reap", "resolve_run_id"]

log = logging.getLogger("agentreplay")

#: what a run id prefix may hold once dashes are dropped: 1 to 32 hex digits
_HEX_PREFIX = re.compile(r"^[0-9a-f]{1,32}$")


def as_run_id(run_id: UUID | str) -> UUID:
    """A whole run id (no prefix: for an action that must name exactly the run meant)."""
    if isinstance(run_id, UUID):
        return run_id
    try:
        return UUID(str(run_id))
    except ValueError:
        raise RunNotFound(run_id, "run ids are UUIDs") from None


def resolve_run_id(backend: StoreBackend, run_id: UUID | str) -> UUID:
    """The id `run_id` names: a full id as is, or the one run id starting with these hex
    digits (dashes optional), like git's short hashes. Raises `RunNotFound` for a prefix
    of no run (naming the closest ids) or of several runs (naming them)."""
    if isinstance(run_id, UUID):
        return run_id
    text = str(run_id).strip()
    with contextlib.suppress(ValueError):
        return UUID(text)
    digits = text.lower().replace("-", "")
    finder = getattr(backend, "run_ids_like", None)
    if finder is None or not _HEX_PREFIX.match(digits):
        raise RunNotFound(text, "run ids are UUIDs, or a unique prefix of one "
                                "(as `agentreplay runs` lists them)")
    found: list[UUID] = list(finder(digits, 6))
    if len(found) == 1:
        return found[0]
    if found:
        more = ", ..." if len(found) > 5 else ""
        raise RunNotFound(text, f"it starts {'more than 5' if more else len(found)} run ids "
                                f"({', '.join(map(str, found[:5]))}{more}); type more of it")
    close = close_ids(backend, digits)
    raise RunNotFound(text, ("did you mean " + ", ".join(map(str, close)) + "?") if close
                      else "no run id starts with it (`agentreplay runs` lists them)")


def close_ids(backend: StoreBackend, text: str, limit: int = 3) -> list[UUID]:
    """The run ids sharing the longest prefix (4 hex digits at least) with `text`."""
    finder = getattr(backend, "run_ids_like", None)
    digits = text.lower().replace("-", "")
    if finder is None or len(digits) < 4 or not _HEX_PREFIX.match(digits):
        return []
    # Ids sharing a prefix share every shorter one: binary search for the longest shared.
    best: list[UUID] = []
    low, high = 3, len(digits)  # a prefix of `low` digits matches (3: not worth offering)
    while low < high:
        middle = (low + high + 1) // 2
        found = list(finder(digits[:middle], limit))
        if found:
            low, best = middle, found
        else:
            high = middle - 1
    return best


def _pid_alive(pid: int) -> bool:
    if not 0 < pid < 2**31:  # a tampered or foreign value: not a process of this host
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, owned by someone else
        return True
    return True


def reap(backend: StoreBackend, run: Run) -> Run:
    """The run as stored; a `recording` run whose process died on this host is marked
    `incomplete` on the way."""
    if run.status != RunStatus.RECORDING:
        return run
    own = run.metadata.get("agentreplay")
    pid = own.get("pid") if isinstance(own, dict) else None
    host = own.get("host") if isinstance(own, dict) else None
    if host == socket.gethostname() and isinstance(pid, int) and not _pid_alive(pid):
        if mark_incomplete(backend, run.run_id):
            run.status = RunStatus.INCOMPLETE
        else:  # sealed meanwhile (a spool flush): read what it is now
            run = backend.get_run(run.run_id)
    return run


def mark_incomplete(backend: StoreBackend, run_id: UUID) -> bool:
    """Store that a run's recorder died; False if it was sealed meanwhile. A role that may
    only read (SECURITY.md) cannot store it: the run is reported incomplete all the same,
    and the next read by a store that may write stores it."""
    why: object = "this store's role may only read"
    if not getattr(backend, "read_only", False):
        try:
            return backend.mark_incomplete(run_id)
        except RunNotFound:
            raise
        except StoreError as exc:  # privileges revoked since open, or the server went away
            why = exc
    log.debug("agentreplay: run %s lost its recording process; reporting it incomplete "
              "without storing that: %s", run_id, why)
    return True
