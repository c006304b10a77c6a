"""SHA-256 over a step's bytes without handing the GIL away for a few microseconds.

hashlib releases the GIL while it hashes an update of 2,048 bytes or more. For a step of a few
kilobytes the hashing takes about a microsecond, but releasing lets the writer thread take the
GIL, and the recording thread then waits for the writer's whole time slice to get it back: the
caller pays the writer's batch on its own step. Updates below the threshold keep the GIL; only
payloads big enough for the release to pay off are hashed in one piece.
"""

from __future__ import annotations

from typing import Any

#: hashlib's HASHLIB_GIL_MINSIZE is 2048: shorter updates keep the GIL
_PIECE = 2047
#: above this the hashing itself takes long enough (tens of microseconds) to be worth sharing
_SHARE_ABOVE = 64 * 1024


def feed(digest: Any, data: bytes) -> None:
    """`digest.update(data)`, in pieces small enough to keep the GIL."""
    if len(data) <= _PIECE or len(data) > _SHARE_ABOVE:
        digest.update(data)
        return
    view = memoryview(data)
    for start in range(0, len(data), _PIECE):
        digest.update(view[start:start + _PIECE])
