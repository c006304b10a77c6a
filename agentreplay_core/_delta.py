"""Delta encoding of growing conversations within a run (stored form only).

A chat agent resends every earlier message each turn, so a 100-turn conversation would store
its first messages 100 times. PostgreSQL keeps a step's input as a *delta* on an earlier step
of the same run with the same kind and name when their `messages` lists share a long prefix::

    {"__ar__": "delta", "base": 41, "prefix": 80, "v": <the input, messages[80:] only>}

The logical input is `v` with `messages` = the first `prefix` messages of step `base`'s
logical input, then `v["messages"]`. With `"output": true` the base step's output comes
between them: the answer an agent appends to its messages (`v` then starts at messages[81:]).
Checksums and match keys are computed over the logical input, never over this form, so
verification and matching do not change; only `PostgresBackend` stores it
(`PendingStep.stored_input_json`), and `load_steps` resolves it before anything else sees a
step. docs/canonical-json.md section 3 specifies it.

`DeltaEncoder` decides, while recording; `DeltaResolver` undoes it, while loading. Example:

    >>> enc = DeltaEncoder()
    >>> first = {"messages": [{"role": "user", "content": "x" * 2000}]}
    >>> answer = {"role": "assistant", "content": "yes"}
    >>> enc.stored_input(1, "llm", "m", first, canonical_bytes(first),
    ...                  canonical_bytes(answer)) is None  # nothing before
    True
    >>> second = {"messages": [*first["messages"], answer, {"role": "user", "content": "hi"}]}
    >>> enc.stored_input(2, "llm", "m", second, canonical_bytes(second), b"null")
    b'{"__ar__":"delta","base":1,"output":true,"prefix":1,"v":{"messages":[{"content":"hi","role":"user"}]}}'
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from agentreplay_core._codec import canonical_bytes, unencodable_marker
from agentreplay_core._codec_base import TAG, Json
from agentreplay_core._errors import SerializationError

__all__ = ["DELTA_TAG", "MIN_SAVED_BYTES", "DeltaEncoder", "DeltaResolver", "delta_base"]

#: tag of the stored delta form (reserved: `encode` never produces it)
DELTA_TAG = "delta"
#: the least canonical JSON a delta must save. Below it a delta is not worth what it costs:
#: the row then depends on another row (a damaged base breaks every delta chained on it), and
#: a row's own overhead (tuple header, ids, match key, checksum, times: ~200 bytes, and
#: PostgreSQL's page and TOAST granularity on top) swallows a few hundred saved bytes. Chat
#: steps resending one system prompt of a few hundred characters stay whole; a growing
#: conversation passes it after its first turn or two.
MIN_SAVED_BYTES = 1024
_KEY = b'"messages":'
#: how every stored delta form begins: canonical JSON sorts `base` right after the tag
_HEAD = b'{"' + TAG.encode() + b'":"' + DELTA_TAG.encode() + b'","base":'


def delta_base(stored: bytes) -> int | None:
    """The step a stored input form (`DeltaEncoder.stored_input`) is a delta on; None for a
    whole input."""
    if not stored.startswith(_HEAD):
        return None
    return int(stored[len(_HEAD):stored.index(b",", len(_HEAD))])


@dataclass(slots=True)
class _Last:
    """The latest step of one (kind, name) with a messages list: a base for the next one."""

    step: int
    tree: dict[str, Json]
    messages: list[Json]
    input_json: bytes
    #: the stored output's canonical bytes, if the recorder gave them
    output_json: bytes | None
    #: canonical size of messages[:known] (each message plus one byte, for "[" or ","),
    #: carried from step to step so a growing prompt is measured only where it grew
    known: int
    known_bytes: int


def _messages(tree: Json) -> list[Json] | None:
    """The `messages` list of a plain (untagged) dict input, else None."""
    if type(tree) is not dict or TAG in tree:
        return None
    messages = tree.get("messages")
    return messages if type(messages) is list else None


def _common_prefix(a: list[Json], b: list[Json]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case, one comparison in C: the old list is a prefix
        return n
    k = 0
    while a[k] == b[k]:  # a mismatch exists below n
        k += 1
    return k


def _size(messages: list[Json]) -> int:
    return sum(len(canonical_bytes(m)) + 1 for m in messages)


def _array_start(tree: dict[str, Json]) -> int:
    """Where the messages array starts in `canonical_bytes(tree)`: after the members whose
    keys sort first, and the key itself."""
    first = {k: v for k, v in tree.items() if k < "messages"}
    return (len(canonical_bytes(first)) if first else 1) + len(_KEY)


def _same_prefix(last: _Last, input_json: bytes, start: int, size: int, whole: bool) -> bool:
    """Whether the canonical messages array at `start` of `input_json` begins with exactly
    the `size` bytes of the base's shared messages. `==` alone is not enough: it holds for 1,
    1.0 and True, whose canonical bytes differ."""
    base = _array_start(last.tree)
    end = b"]" if whole else b","
    return (input_json[start:start + size] == last.input_json[base:base + size]
            and input_json[start + size:start + size + 1] == end)


def _followed_by(input_json: bytes, at: int, value: bytes) -> bool:
    """Whether the array item at `at` is `value`: its bytes, then the item's end."""
    end = at + len(value)
    return input_json[at:end] == value and input_json[end:end + 1] in (b",", b"]")


class DeltaEncoder:
    """Decides, step by step, which inputs of one run are stored as deltas. Thread-safe.

    Call `stored_input` for every step in step order (as the recorder numbers them). It keeps
    only the latest input with a messages list per (kind, name), tree and bytes, so memory
    stays bounded by one prompt per model: the tree must be one nobody mutates afterwards.

    Args:
        min_saved: the least canonical JSON bytes a delta must save (`MIN_SAVED_BYTES`).
    """

    def __init__(self, min_saved: int = MIN_SAVED_BYTES) -> None:
        self.min_saved = min_saved
        self._last: dict[tuple[str, str], _Last] = {}
        self._lock = threading.Lock()

    def stored_input(self, step: int, kind: str, name: str, tree: Json, input_json: bytes,
                     output_json: bytes | None = None) -> bytes | None:
        """Canonical bytes of the delta form to store for this step's input, or None to store
        `input_json` as it is.

        Args:
            step: the step's number in its run.
            kind, name: the step's kind and name; only steps sharing both are bases.
            tree: the encoded (and redacted) input that `input_json` is the canonical bytes
                of. Pass None when the stored input is not that tree (a value replaced by an
                unencodable marker): the step is then neither a delta nor a base.
            input_json: the canonical bytes stored otherwise.
            output_json: the canonical bytes of the step's output as stored (a marker if it
                was replaced), so that the next turn may refer to it; None: it may not.
        """
        messages = _messages(tree)
        if messages is None:
            return None
        key = (kind, name)
        with self._lock:  # held while deciding: steps must become bases in step order
            last = self._last.get(key)
            if last is not None and step <= last.step:
                return None  # out of order: a base must come before its deltas
            data, known, known_bytes = self._decide(last, tree, messages, input_json)
            # only now: a step whose decision failed above is stored otherwise, and no base
            self._last[key] = _Last(step, tree, messages, input_json, output_json, known,
                                    known_bytes)
        return data

    def _decide(self, last: _Last | None, tree: dict[str, Json], messages: list[Json],
                input_json: bytes) -> tuple[bytes | None, int, int]:
        """The delta (or None), and how many of this step's messages have a known size."""
        k = _common_prefix(last.messages, messages) if last is not None else 0
        if last is None or k == 0:
            return None, 0, 0
        if k >= last.known:  # growing, or one system prompt: measure only what is new
            size = last.known_bytes + _size(last.messages[last.known:k])
        else:  # an earlier message was edited
            size = _size(last.messages[:k])
        out = last.output_json
        if size + (len(out) + 1 if out else 0) < self.min_saved:
            return None, 0, 0  # the base's sizes may not be this step's: measured again
        start = _array_start(tree)
        if not _same_prefix(last, input_json, start, size, k == len(messages)):
            return None, 0, 0
        # byte for byte the base's from here on: its sizes are this step's
        if out is not None and k < len(messages) and _followed_by(input_json, start + size + 1,
                                                                  out):
            follows, rest, known, size = True, messages[k + 1:], k + 1, size + len(out) + 1
        else:
            follows, rest, known = False, messages[k:], k
        if size < self.min_saved:
            return None, known, size
        form: dict[str, Json] = {TAG: DELTA_TAG, "base": last.step, "prefix": k,
                                 "v": {**tree, "messages": rest}}
        if follows:
            form["output"] = True
        data = canonical_bytes(form)
        return data if len(input_json) - len(data) >= self.min_saved else None, known, size


class DeltaResolver:
    """Turns the stored inputs of one run back into logical inputs; feed steps in order.

    A delta that cannot be resolved (its base missing, not earlier, without enough messages;
    the row malformed) becomes an unencodable marker saying why: the step then fails
    verification, since its checksum covers the logical input, and decoding it raises a
    `SerializationError` with that reason, instead of a wrong value or a failed load.
    Resolved inputs share their messages with their base's (and the base's output): nothing
    in agentreplay mutates a loaded tree (redaction and restoring secrets copy on write).
    """

    def __init__(self) -> None:
        #: logical messages and output of the steps that may serve as bases
        self._bases: dict[int, tuple[list[Json], Json]] = {}

    def resolve(self, step: int, stored: Json, output: Json) -> Json:
        """The logical input of `step`, whose input column holds `stored` and whose output
        is `output` (as loaded)."""
        if type(stored) is not dict:
            return stored
        if stored.get(TAG) == DELTA_TAG:
            stored = self._undelta(step, stored)
        messages = _messages(stored)
        if messages is not None:
            self._bases[step] = (messages, output)
        return stored

    def _undelta(self, step: int, stored: dict[str, Json]) -> Json:
        base, prefix, v = stored.get("base"), stored.get("prefix"), stored.get("v")
        follows = stored.get("output", False)
        rest = _messages(v)
        found = self._bases.get(base) if type(base) is int else None
        why = ""
        if type(base) is not int or type(prefix) is not int or rest is None or \
                type(follows) is not bool or not set(stored) <= _DELTA_KEYS:
            why = ", but the stored form is malformed (it needs integer base and prefix, v: " \
                  "an object with a messages list, and output true or absent)"
        elif not 0 < base < step:
            why = f", but step {base} is not an earlier step"
        elif found is None:
            why = ", which is missing or holds no messages list"
        elif not 0 < prefix <= len(found[0]):
            why = (f", but step {base} has {len(found[0])} messages, not the {prefix} "
                   "this step takes from it")
        if why or found is None or not isinstance(v, dict) or rest is None:
            return _unresolved(stored, f"the input of step {step} is stored as a delta on "
                                       f"step {base}{why}")
        messages, output = found
        middle = [output] if follows else []
        return {**v, "messages": messages[:prefix] + middle + rest}


_DELTA_KEYS = frozenset({TAG, "base", "prefix", "v", "output"})


def _unresolved(stored: Json, reason: str) -> Json:
    error = SerializationError(
        f"{reason}; the row or its base was changed or deleted outside agentreplay, so the "
        "step fails verification. Restore the rows from a backup or delete the run",
        path="input", type_name="stored delta")
    return unencodable_marker(stored, error)
