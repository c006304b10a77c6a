"""Append-only JSON-lines files, shared by the file store and the spool.

Every writer appends whole lines while holding an exclusive `flock` on the file, so under that
lock a file that does not end with a newline was left by a writer that died mid-line (or by a
write cut short). `append` repairs such a tail before writing: bytes that never became a
complete record are cut off, a complete record that only lacks its newline gets one. Readers
take no lock and skip an unfinished last line (`records`), so what a reader sees never changes
when the file is repaired.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from agentreplay_core._errors import StoreError
from agentreplay_core._plural import counted

log = logging.getLogger("agentreplay")

_CHUNK = 1 << 16
#: what `bytes.strip()` removes: a line of only these is skipped
_BLANK = re.compile(rb"[ \t\n\r\x0b\x0c]*")


@contextmanager
def locked(path: Path, *, create: bool, mode: int = 0o644) -> Iterator[int]:
    """A descriptor of `path` for reading and appending, under an exclusive `flock`.

    A spool flush renames a file to load it: if the name moved on between open and lock, the
    file carrying the name now is opened instead, so nothing is written into a file already
    being loaded. Raises `FileNotFoundError` if `path` does not exist and `create` is false.
    """
    flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
    while True:
        fd = os.open(path, flags, mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                now = os.stat(path)
                same = (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)
        if not create:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    try:
        yield fd
    finally:
        os.close(fd)


def read_all(fd: int) -> bytes:
    """The whole content of the file behind `fd` (any offset, any `O_APPEND` mode)."""
    return _pread_all(fd, 0, os.fstat(fd).st_size)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data`: `os.write` may write less than asked (a file size limit, a signal)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # never seen for regular files, but a loop must not spin
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


def append(fd: int, data: bytes, source: Path) -> None:
    """Append whole lines under the lock held on `fd`: repair a torn tail, write, fsync.

    A write that fails (disk full) is undone where possible, so lines the caller was told
    are not stored never turn up later (`repair_tail` would keep a whole record).
    """
    repair_tail(fd, source)
    size = os.fstat(fd).st_size
    try:
        write_all(fd, data)
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def append_to(path: Path, data: bytes, *, create: bool, mode: int = 0o644) -> None:
    """`append` to `path`, opening and locking it for the duration."""
    with locked(path, create=create, mode=mode) as fd:
        append(fd, data, path)


def repair_tail(fd: int, source: Path) -> None:
    """Make the locked file end at a line boundary (see the module docstring)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end = _after_last_newline(fd, size)
    if is_record(_pread_all(fd, end, size - end)):
        write_all(fd, b"\n")
        log.warning("%s: the last line had no newline; added one", source)
        return
    os.ftruncate(fd, end)
    log.warning("%s: cut %s of a line left unfinished by a writer that died or failed "
                "mid-line; they were never a complete record", source,
                counted(size - end, "byte"))


def is_record(line: bytes) -> bool:
    """Whether `line` is one whole JSON object (a cut-off line never parses as one)."""
    try:
        return isinstance(orjson.loads(line), dict)
    except orjson.JSONDecodeError:
        return False


def records(data: bytes, source: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of each line; an unfinished last line is skipped.

    Raises `StoreError` naming the file and line for any other line that is not JSON.
    """
    # Lines are parsed in place (memoryview slices): splitting would copy the whole file,
    # which for a run holding a 50 MB tool result is 50 MB more at once.
    view = memoryview(data)
    start, number = 0, 0
    while start < len(data):
        end = data.find(b"\n", start)
        last = end < 0  # no newline after it: a writer still at it, or killed
        end = len(data) if last else end
        number += 1
        line, start = view[start:end], end + 1
        if _BLANK.fullmatch(data, end - len(line), end):
            continue
        try:
            yield number, orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if last:
                return
            raise StoreError(f"{source}: line {number} is not valid JSON ({exc}); the file "
                             "was changed by hand or damaged: repair or move it") from None


def _pread_all(fd: int, offset: int, size: int) -> bytes:
    parts: list[bytes] = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:  # the file shrank meanwhile
            break
        parts.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    return b"".join(parts)


def _after_last_newline(fd: int, size: int) -> int:
    """The offset just after the file's last newline (0 if it has none)."""
    stop = size
    while stop > 0:
        start = max(0, stop - _CHUNK)
        found = _pread_all(fd, start, stop - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        stop = start
    return 0
