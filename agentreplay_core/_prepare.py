"""What a captured step becomes before it is chained: its redacted canonical input and output,
its match key, and the compact stored form of its input.

A pure function of the step and of the run's state (the redactor, the delta encoder), so that
it gives the same bytes wherever it runs: in the process that recorded the step, or in the
helper process of `prepare="process"` (`_prepare_helper`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from agentreplay_core._codec import canonical_bytes, unencodable_marker
from agentreplay_core._delta import DeltaEncoder
from agentreplay_core._errors import SerializationError
from agentreplay_core._keys import match_key_of_canonical
from agentreplay_core._redact import Redactor

#: the largest step (bytes of canonical JSON) screened for secrets from its JSON; a larger one
#: is mostly history the redactor has screened before, which its walk skips (`_redact_json`)
_SCAN_LIMIT = 16_384


#: a step's canonical input and output, and whether they may hold a secret (None: not known)
Screened = tuple[bytes, bytes, bool | None]


def screen_ahead(redactor: Redactor, steps: Sequence[tuple[Any, Any]],
                 max_bytes: int) -> list[Screened]:
    """The canonical input and output of the first steps (encoded trees) until they hold
    `max_bytes`, and the screen's verdict of each from one scan of them all
    (`Redactor.screen_each`) where it has one. Steps too big for the screen get none: they
    are walked anyway."""
    made: list[tuple[bytes, bytes]] = []
    size = 0
    for encoded_in, encoded_out in steps:
        if size > max_bytes:
            break
        made.append((canonical_bytes(encoded_in), canonical_bytes(encoded_out)))
        size += len(made[-1][0]) + len(made[-1][1])
    small = [n for n, (i, o) in enumerate(made) if len(i) + len(o) <= _SCAN_LIMIT]
    verdicts = redactor.screen_each([made[n][0] + b" " + made[n][1] for n in small]) \
        if len(small) > 1 else None
    decided: dict[int, bool | None] = dict(zip(small, verdicts, strict=True)) if verdicts else {}
    return [(i, o, decided.get(n)) for n, (i, o) in enumerate(made)]


class Prepared(NamedTuple):
    """A step's stored values, ready to be chained."""

    input_json: bytes
    output_json: bytes
    key: str
    #: the input's compact stored form (a delta), or None to store `input_json` itself
    stored_in: bytes | None
    #: (where, size in bytes, type name) of each part replaced by a marker for its size
    oversized: tuple[tuple[str, int, str], ...]


def oversized_error(size: int, limit: int, where: str, type_name: str) -> SerializationError:
    return SerializationError(
        f"{size:,} bytes of JSON, more than max_value_bytes={limit:,} allows; record a smaller "
        "value (a summary, a file name) or raise recorder.max_value_bytes",
        path=where, type_name=type_name)


def _oversized_marker(data: bytes, limit: int, where: str, type_name: str) -> bytes:
    """The canonical marker of a value refused for its size (the match key was computed from
    `data` already, so replay still finds the step and says why)."""
    error = oversized_error(len(data), limit, where, type_name)
    # the marker's repr from the first bytes only: repr() of the whole value is as big
    return canonical_bytes(unencodable_marker(data[:400].decode("utf-8", "replace"), error))


def prepare_step(redactor: Redactor | None, deltas: DeltaEncoder, limit: int, number: int,
                 kind: str, name: str, encoded_in: Any, encoded_out: Any,
                 match_key: str | None, caller_key: bool,
                 screened: Screened | None = None) -> Prepared:
    """Redacted canonical input and output, the match key, and the input's compact stored
    form when it repeats an earlier step's conversation (see `DeltaEncoder`). `screened`:
    the canonical input and output made already, with the screen's verdict if known
    (`screen_ahead`).

    Raises whatever redaction or encoding raises; the delta encoder then has not taken the
    step as a base.
    """
    if screened is None:
        input_json, output_json, verdict = canonical_bytes(encoded_in), \
            canonical_bytes(encoded_out), None
    else:
        input_json, output_json, verdict = screened
    if redactor is not None and (len(input_json) + len(output_json) > _SCAN_LIMIT
                                 or (redactor.may_hold_secrets(input_json, output_json)
                                     if verdict is None else verdict)):
        (encoded_in, encoded_out), changed = redactor.redact_trees((encoded_in, encoded_out))
        if changed[0]:
            input_json = canonical_bytes(encoded_in)
        if changed[1]:
            output_json = canonical_bytes(encoded_out)
    key = match_key
    if caller_key and key and redactor is not None and b"<secret:" in input_json:
        # a key the caller computed over a request that holds secrets: keyed, as a plain hash
        # of the request could be used to test guesses of a weak password
        key = redactor.rekey(key)
    key = key or match_key_of_canonical(kind, name, input_json)
    oversized: list[tuple[str, int, str]] = []
    whole_in = len(input_json) <= limit
    if not whole_in:
        oversized.append(("input", len(input_json), type(encoded_in).__name__))
        input_json = _oversized_marker(input_json, limit, "input", type(encoded_in).__name__)
    if len(output_json) > limit:
        oversized.append(("output", len(output_json), type(encoded_out).__name__))
        output_json = _oversized_marker(output_json, limit, "output",
                                        type(encoded_out).__name__)
    # the last thing that can fail: the encoder takes a step as a base only once it is kept
    stored_in = deltas.stored_input(number, kind, name, encoded_in if whole_in else None,
                                    input_json, output_json)
    return Prepared(input_json, output_json, key, stored_in, tuple(oversized))
