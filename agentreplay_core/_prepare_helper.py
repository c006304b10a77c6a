"""The helper process of `prepare="process"`: prepares captured steps (`prepare_step`) for the
recording process, on another core and outside its GIL.

Run as `python -m agentreplay_core._prepare_helper` by `PrepareClient`, which talks to it over
its stdin and stdout in frames (4-byte big-endian length, then one type byte and the body):

- `K` pickle of (token, rules, key): a redactor the steps name by its token;
- `B` JSON array of steps, each `[run, token, limit, number, kind, name, match_key,
  caller_key, encoded_in, encoded_out]`: answered, in order, by one frame holding the pickled
  list of their `Prepared` values as plain tuples (pickled faster than named ones), or None
  for a step that failed here: the recording process prepares that one itself, and says why.

It keeps a delta encoder per run (the latest few hundred runs), and exits when its stdin
closes: when the recording process closes the store, exits or dies.
"""

from __future__ import annotations

import pickle
import queue
import struct
import sys
import threading
from collections import OrderedDict
from typing import IO

import orjson

from agentreplay_core._delta import DeltaEncoder
from agentreplay_core._prepare import prepare_step
from agentreplay_core._redact import Redactor

#: runs whose delta state is kept; an older run's next step is stored whole (still correct)
_RUNS_KEPT = 256
HEADER = struct.Struct(">I")
READY = b"R"


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's body, or None at the end of the stream."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    body = stream.read(size)
    return body if len(body) == size else None


def write_frame(stream: IO[bytes], body: bytes) -> None:
    stream.write(HEADER.pack(len(body)))
    stream.write(body)
    stream.flush()


class _Helper:
    def __init__(self) -> None:
        self.redactors: dict[int, Redactor | None] = {0: None}
        self.runs: OrderedDict[str, DeltaEncoder] = OrderedDict()

    def deltas(self, run: str) -> DeltaEncoder:
        encoder = self.runs.get(run)
        if encoder is None:
            encoder = self.runs[run] = DeltaEncoder()
            if len(self.runs) > _RUNS_KEPT:
                self.runs.popitem(last=False)
        else:
            self.runs.move_to_end(run)
        return encoder

    def handle(self, frame: bytes) -> bytes | None:
        kind, body = frame[:1], frame[1:]
        if kind == b"K":
            token, rules, key = pickle.loads(body)  # our own parent: trusted
            self.redactors[token] = Redactor(rules=rules, defaults=False, key=key)
            return None
        if kind != b"B":
            raise ValueError(f"unknown frame type {kind!r}")
        results: list[tuple[object, ...] | None] = []
        for run, token, limit, number, kind_, name, key, caller_key, inp, out in \
                orjson.loads(body):
            try:
                results.append(tuple(prepare_step(self.redactors[token], self.deltas(run), limit,
                                                  number, kind_, name, inp, out, key,
                                                  caller_key)))
            except Exception:  # the recording process prepares it again, and reports why
                results.append(None)
        return pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)


def _read_all(stream: IO[bytes], frames: queue.SimpleQueue[bytes | None]) -> None:
    # Reading in a thread of its own: the parent may send the next batch before it reads the
    # answer to the previous one, and neither side must block the other on a full pipe.
    try:
        while (frame := read_frame(stream)) is not None:
            frames.put(frame)
    finally:
        frames.put(None)


def main(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    frames: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    threading.Thread(target=_read_all, args=(stdin, frames), daemon=True).start()
    helper = _Helper()
    write_frame(stdout, READY)
    while (frame := frames.get()) is not None:
        answer = helper.handle(frame)
        if answer is not None:
            write_frame(stdout, answer)


if __name__ == "__main__":
    channel = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed by accident may corrupt the frames
    main(sys.stdin.buffer, channel)
