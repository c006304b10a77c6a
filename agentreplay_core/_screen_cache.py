"""Compiled Hyperscan databases of the secret screens, kept on disk between processes.

Compiling the default rules' three databases costs ~75 ms of CPU (Hyperscan's optimiser;
a set of patterns compiles far slower than its members one by one), paid by every process that
records: 8 ms of it when a run opens, the rest by the writer before it writes the first batch.
A short-lived process (a CLI call, a serverless function, the `prepare="process"` helper) pays
it each time, for the same patterns. A serialised database loads in under a millisecond.

A file is named by a SHA-256 of Hyperscan's version, the machine and the patterns with their
flags and ids, so a change of any of them misses the cache. What is loaded must be trusted as
the compiler's own answer (a wrong database would leave secrets unredacted), so:

- files are written whole (a temporary file renamed into place): a killed process leaves none
  half-written, and Hyperscan refuses a database whose checksum does not match;
- a file that is neither this user's nor root's, or that others may write, is ignored, and a
  directory like that is neither read nor written;
- a database that does not load, or fails a trial scan (another CPU's build on a shared home
  directory), is compiled anew and its file replaced.

`AGENTREPLAY_SCREEN_CACHE_DIR` moves the cache (default: the user cache directory); set it
empty to keep nothing on disk. Any failure here falls back on compiling: the cache can only
make a process start sooner, never change what it screens.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import platform
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("agentreplay")

CACHE_ENV = "AGENTREPLAY_SCREEN_CACHE_DIR"
SUFFIX = ".hsdb"
#: files kept: older ones (rules since changed, an older Hyperscan) are deleted past this
MOST_FILES = 32
#: what was found not private, warned about once a process
_warned: set[Path] = set()


def cache_dir() -> Path | None:
    """Where the databases are kept, or None if the cache is turned off."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        return Path(configured).expanduser() if configured.strip() else None
    import platformdirs

    default = Path(platformdirs.user_cache_dir("agentreplay")) / "screens"
    # no home directory to expand (a container's user without one): not the working directory
    return default if default.is_absolute() else None


def cache_key(hyperscan: Any, patterns: Sequence[tuple[bytes, int]]) -> str:
    """The file name (without its suffix) of the database for `patterns`."""
    digest = hashlib.sha256()
    for part in (str(getattr(hyperscan, "__version__", "")), platform.machine(),
                 platform.python_implementation()):
        digest.update(part.encode() + b"\0")
    for ident, (expression, flags) in enumerate(patterns):
        digest.update(b"%d\0%d\0%d\0" % (ident, flags, len(expression)) + expression)
    return digest.hexdigest()


def _private(info: os.stat_result) -> bool:
    """Owned by this user (or root, as for a cache baked into an image) and writable by no
    one else: what POSIX can tell, the rule ssh applies to its own files."""
    if not hasattr(os, "getuid"):  # pragma: no cover - Windows: its ACLs are not checked
        return True
    return (info.st_uid in (os.getuid(), 0)
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _warn_once(path: Path) -> None:
    if path not in _warned:
        _warned.add(path)
        log.warning("agentreplay: the screen cache ignores %s: it is not private to this user "
                    "(owned by another, or writable by group or others)", path)


def _trusted(directory: Path) -> bool:
    """Whether `directory` may hold databases to load (one that does not exist yet is made
    private when the first file is written)."""
    try:
        info = directory.stat()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if _private(info):
        return True
    _warn_once(directory)
    return False


def _load(hyperscan: Any, path: Path) -> Any | None:
    try:
        if not _private(path.stat()):
            _warn_once(path)
            return None
        database = hyperscan.loadb(path.read_bytes(), hyperscan.HS_MODE_BLOCK)
        database.scratch = hyperscan.Scratch(database)
        database.scan(b"", match_event_handler=lambda *_: None)
    except FileNotFoundError:
        return None
    except Exception as exc:  # unreadable, corrupt, or built for another CPU: compile anew
        log.info("agentreplay: compiling the screen again: %s did not load (%s)", path, exc)
        return None
    with contextlib.suppress(OSError):  # a read-only cache is used all the same
        os.utime(path)  # recently used: kept when older files are pruned
    return database


def _store(hyperscan: Any, database: Any, path: Path) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=".", suffix=".partial", dir=path.parent)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(hyperscan.dumpb(database))
            os.replace(partial, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise
        _prune(path.parent)
    except Exception as exc:  # a read-only home, a full disk: the next process compiles too
        log.debug("agentreplay: screen cache not written to %s: %s", path, exc)


def _prune(directory: Path) -> None:
    kept = sorted(directory.glob("*" + SUFFIX), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[MOST_FILES:]:
        with contextlib.suppress(OSError):
            old.unlink()


def load_or_compile(hyperscan: Any, patterns: Sequence[tuple[bytes, int]]) -> Any:
    """The database of `patterns` ((expression, flags), match ids their indexes): from the
    cache, else compiled (and cached). Raises what Hyperscan's compiler raises."""
    directory = cache_dir()
    if directory is not None and not _trusted(directory):
        directory = None  # neither read nor written: a file put there could be anyone's
    path = None if directory is None else directory / (cache_key(hyperscan, patterns) + SUFFIX)
    database = None if path is None else _load(hyperscan, path)
    if database is not None:
        return database
    database = hyperscan.Database()
    database.compile(expressions=[e for e, _ in patterns], ids=list(range(len(patterns))),
                     flags=[f for _, f in patterns])
    if path is not None:
        _store(hyperscan, database, path)
    return database
