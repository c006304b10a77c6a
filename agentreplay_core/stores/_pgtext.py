"""Text COPY of step rows, for rows still being made as they are sent (`LazyRows`).

PostgreSQL inserts text COPY rows every ~64 KB as they arrive, and binary ones only at the
COPY's end (below 1,000 rows): streamed as text, a short run's COPY ends ~0.3 ms after its
last row is sent instead of ~1 ms. Rendering text costs the client about twice the CPU of
binary (`_pgrows.binary_step_rows`), which is why only such rows go as text.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import tzinfo
from uuid import UUID

from agentreplay_core.stores._backend import PendingStep

#: text COPY data is handed to psycopg in pieces of about this size: the server parses and
#: inserts what arrives while the client makes the next rows (64 KB: a tail twice as long)
TEXT_CHUNK = 16 * 1024
_TEXT_ESCAPES = {ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}


def _text_label(s: str) -> bytes:
    return s.translate(_TEXT_ESCAPES).encode()


def _text_json(data: bytes) -> bytes:
    """JSON bytes as a text COPY field. Canonical JSON holds no raw tab, newline or carriage
    return (they are escaped inside strings, and it has no whitespace between tokens), but
    these bytes need not be canonical to be stored."""
    data = data.replace(b"\\", b"\\\\")
    if b"\n" in data or b"\r" in data or b"\t" in data:
        data = data.replace(b"\n", b"\\n").replace(b"\r", b"\\r").replace(b"\t", b"\\t")
    return data


def text_step_rows(steps: Iterable[PendingStep], session_zone: tzinfo) -> Iterator[bytearray]:
    """`steps` as text COPY data in `STEP_COLUMNS` order, in chunks of ~`TEXT_CHUNK` bytes.
    A naive `started_at` is read in the session's time zone, as in binary."""
    out = bytearray()
    ids: dict[UUID, bytes] = {}
    for s in steps:
        run = ids.get(s.run_id)
        if run is None:
            run = ids[s.run_id] = str(s.run_id).encode()
        started = s.started_at
        if started.tzinfo is None:
            started = started.replace(tzinfo=session_zone)
        out += b"\t".join((
            run, str(s.step).encode(), _text_label(s.kind), _text_label(s.name),
            _text_label(s.match_key), _text_label(s.path), _text_json(s.stored_input),
            _text_json(s.output_json), b"t" if s.is_error else b"f",
            started.isoformat().encode(), repr(s.duration_ms).encode(), s.checksum.encode(),
        ))
        out += b"\n"
        if len(out) >= TEXT_CHUNK:
            yield out
            out = bytearray()
    if out:
        yield out
