"""The hash chain that makes a run log tamper-evident (DESIGN section 3).

For step n of a run::

    payload[n]  = canonical JSON of {"input", "is_error", "kind", "match_key", "name",
                                      "output", "path", "run_id", "step"}
    checksum[n] = H(checksum[n-1] || payload[n])
    checksum[0] = SHA-256(b"agentreplay/chain/v1")

`H` is SHA-256, or HMAC-SHA-256 under the configured key; `||` joins the 32 raw digest bytes of
the previous checksum with the payload bytes. Checksums are stored as lower-case hex.
Sealing a run chains one more record after the last step: `head_checksum = H(checksum[N] ||
{"run_id", "seal": true, "status", "step_count"})`, so a truncated or extended run, or one whose
status was changed, is detected too (with an HMAC key, even by someone who can rewrite rows).
The step's `path` is chained as well (an extension of DESIGN's list): replay uses it to tell
concurrent branches apart, so it must not be editable either.

Key rotation: a store records with one key and may hold old keys that still verify the runs
chained under them (`AGENTREPLAY_HMAC_OLD_KEYS`, or `hmac_key=[new, old, ...]`); the report
names the key that verified a run by its `key_id`, never the key itself. See SECURITY.md.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID

import orjson

from agentreplay_core._codec import canonical_bytes
from agentreplay_core._hashing import feed
from agentreplay_core._model import Run, RunStatus, Step
from agentreplay_core._plural import counted

GENESIS = hashlib.sha256(b"agentreplay/chain/v1").digest()
HMAC_ENV = "AGENTREPLAY_HMAC_KEY"
HMAC_OLD_ENV = "AGENTREPLAY_HMAC_OLD_KEYS"


def key_id(key: bytes) -> str:
    """A short public name of an HMAC key (12 hex digits), for reports and logs.

    An HMAC of a fixed label: it tells keys apart without revealing them (anyone who can read
    the run log already holds HMACs under the key, so this gives an attacker nothing new).
    """
    return hmac.new(key, b"agentreplay/key-id/v1", hashlib.sha256).hexdigest()[:12]


def chain_name(key: bytes | None) -> str:
    return "hmac-sha256" if key else "sha256"


def step_payload(
    run_id: UUID,
    step: int,
    kind: str,
    name: str,
    match_key: str,
    path: str,
    input_json: bytes,
    output_json: bytes,
    is_error: bool,
) -> bytes:
    """Canonical bytes of one step, built from the canonical bytes of input and output.

    Equal to `canonical_bytes` of the whole object: keys are emitted in sorted order and every
    value is itself canonical, so nothing is serialised twice.
    """
    return b"".join(
        (
            b'{"input":', input_json,
            b',"is_error":', b"true" if is_error else b"false",
            b',"kind":', _label_json(kind),
            b',"match_key":', orjson.dumps(match_key),
            b',"name":', _label_json(name),
            b',"output":', output_json,
            b',"path":', _label_json(path),
            b',"run_id":', _run_json(run_id),
            b',"step":', str(step).encode(),
            b"}",
        )
    )


# A run's steps repeat the same few kinds, names and paths: their JSON is made once.
@functools.lru_cache(maxsize=4096)
def _label_json(label: str) -> bytes:
    return orjson.dumps(label)


@functools.lru_cache(maxsize=256)
def _run_json(run_id: UUID) -> bytes:
    return orjson.dumps(str(run_id))


def chain_next(previous: bytes, payload: bytes, key: bytes | None) -> bytes:
    """The next 32-byte chain digest."""
    # fed in two parts: `previous + payload` would copy a payload of any size once more
    digest = hmac.new(key, previous, hashlib.sha256) if key else hashlib.sha256(previous)
    feed(digest, payload)
    return digest.digest()


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a run. `step` is None for run-level problems."""

    run_id: UUID
    step: int | None
    code: str
    message: str

    def __str__(self) -> str:
        where = f"step {self.step}" if self.step is not None else "run"
        return f"run {self.run_id} {where}: {self.message} [{self.code}]"


@dataclass
class VerifyReport:
    """Result of `store.verify(run_id)`."""

    run_id: UUID
    step_count: int
    problems: list[Problem] = field(default_factory=list)
    #: True when the run carries a seal (complete or failed); an unsealed run (still recording,
    #: or incomplete because its process died) cannot prove that no steps followed the last one
    sealed: bool = False
    #: `key_id` of the HMAC key the chain was checked with (None for a plain SHA-256 run); for
    #: a failed report, the configured key that explained the most steps
    key_id: str | None = None
    #: True when that key is an old one (`AGENTREPLAY_HMAC_OLD_KEYS`), not the recording key
    old_key: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if not self.ok:
            return "\n".join(str(p) for p in self.problems)
        seal = ("sealed" if self.sealed else
                "not sealed, so steps after the last stored one cannot be ruled out")
        key = ""
        if self.key_id:
            key = f" under HMAC key {self.key_id}" + (" (an old key)" if self.old_key else "")
        return f"run {self.run_id}: {counted(self.step_count, 'step')}, chain intact{key}, {seal}"


def seal_payload(run_id: UUID, status: RunStatus, step_count: int) -> bytes:
    """Canonical bytes of a run's seal, chained after its last step into `head_checksum`.

    Status and step count are inside the chain, so with an HMAC key neither truncating a run
    nor flipping `failed` to `complete` can be hidden by editing the `runs` row.
    """
    return b"".join((
        b'{"run_id":', orjson.dumps(str(run_id)), b',"seal":true,"status":',
        orjson.dumps(RunStatus(status).value), b',"step_count":', str(step_count).encode(), b"}",
    ))


def seal_checksum(run_id: UUID, status: RunStatus, step_count: int, last: bytes,
                  key: bytes | None) -> str:
    """The `head_checksum` that seals a run whose last step checksum is `last` (or GENESIS)."""
    return chain_next(last, seal_payload(run_id, status, step_count), key).hex()


def _recompute(step: Step, previous: bytes, key: bytes | None) -> bytes:
    payload = step_payload(
        step.run_id, step.step, step.kind, step.name, step.match_key, step.path,
        canonical_bytes(step.input), canonical_bytes(step.output), step.is_error,
    )
    return chain_next(previous, payload, key)


def verify_chain(
    run: Run, steps: Sequence[Step], key: bytes | None, *, accept_unkeyed: bool = False,
    old_keys: Sequence[bytes] = (),
) -> VerifyReport:
    """Check every step's checksum, numbering and the run's seal; one problem per bad step.

    Each step is recomputed from the *stored* checksum of its predecessor, so a single changed
    row is reported once instead of breaking every later step. With a key, a run chained
    without it is a problem unless `accept_unkeyed` (anyone with write access could have
    re-chained it with plain SHA-256). A keyed run verifies under `key` or any of `old_keys`
    (retired keys, kept for the runs chained under them); the report names which.
    """
    if run.chain != "hmac-sha256":
        report = _check_chain(run, steps, None)
        if run.chain != "sha256":  # an edited row, or a newer agentreplay's algorithm
            report.problems.insert(0, Problem(
                run.run_id, None, "unknown_chain",
                f"run names the chain algorithm {run.chain!r}, which this agentreplay does not "
                "know (sha256, hmac-sha256); it was checked as sha256"))
        if key and not accept_unkeyed:
            report.problems.insert(0, Problem(
                run.run_id, None, "unkeyed_run",
                "run is chained with plain SHA-256 although an HMAC key is configured: anyone "
                "with write access could have forged it (for runs recorded before the key "
                "existed: open_store(..., accept_unkeyed_runs=True), or "
                "AGENTREPLAY_ACCEPT_UNKEYED_RUNS=1 / --accept-unkeyed-runs for the CLI)"))
        return report
    keys = list(dict.fromkeys(k for k in (key, *old_keys) if k))
    if not keys:
        report = VerifyReport(run_id=run.run_id, step_count=len(steps))
        report.problems.append(Problem(
            run.run_id, None, "hmac_key_missing",
            f"run was chained with HMAC-SHA-256; set {HMAC_ENV} (or list the key it was "
            f"recorded with in {HMAC_OLD_ENV}) to verify it"))
        return report
    reports = []
    for candidate in keys:
        report = _check_chain(run, steps, candidate)
        report.key_id, report.old_key = key_id(candidate), candidate != key
        if report.ok:
            return report
        reports.append(report)
    best = min(reports, key=lambda r: len(r.problems))  # on a tie, the recording key's
    mismatched = sum(p.code == "checksum_mismatch" for p in best.problems)
    if steps and mismatched == len(steps):  # no key explains even one step
        ids = ", ".join(key_id(k) for k in keys)
        best.problems.insert(0, Problem(
            run.run_id, None, "hmac_key_unknown",
            f"no configured HMAC key (key ids {ids}) matches any step: the run was chained "
            f"under another key (list it in {HMAC_OLD_ENV}), or every step was rewritten"))
    return best


def _check_chain(run: Run, steps: Sequence[Step], key: bytes | None) -> VerifyReport:
    report = VerifyReport(run_id=run.run_id, step_count=len(steps))
    problems = report.problems
    previous = GENESIS
    expected_step = 1
    first_mismatch: int | None = None
    for step in steps:
        if step.run_id != run.run_id:
            problems.append(Problem(run.run_id, step.step, "foreign_step",
                                    f"row belongs to run {step.run_id}"))
        after_gap = expected_step < step.step
        if after_gap:
            problems.append(_missing(run, expected_step, step.step))
            expected_step = step.step
        if step.step < expected_step:
            problems.append(Problem(run.run_id, step.step, "duplicate_step",
                                    "step number appears twice"))
        try:
            digest = _recompute(step, previous, key)
        except Exception as exc:  # a tampered row may not even encode
            problems.append(Problem(run.run_id, step.step, "unreadable", f"cannot hash: {exc}"))
            digest = b""
        if digest.hex() != step.checksum:
            if after_gap:
                problems.append(Problem(run.run_id, step.step, "unverifiable_after_gap",
                                        "cannot be checked: the step before it is missing"))
            elif len(previous) != len(GENESIS):
                problems.append(Problem(run.run_id, step.step, "unverifiable_after_bad_link",
                                        "cannot be checked: the checksum of the step before "
                                        "it is no checksum"))
            else:
                problems.append(Problem(run.run_id, step.step, "checksum_mismatch",
                                        _mismatch(first_mismatch)))
                first_mismatch = first_mismatch or step.step
        previous = _digest_bytes(step.checksum)
        expected_step = max(expected_step, step.step + 1)
    _check_seal(run, steps, previous, key, report)
    return report


def _mismatch(earlier: int | None) -> str:
    text = ("content does not match its checksum (changed, inserted, reordered or copied "
            "from another run)")
    if earlier is None:
        return text
    # a step's checksum follows from the one before it, and its input may be stored as a
    # change to an earlier step's: one edited row can fail the steps after it
    return (f"{text}, or only step {earlier} before it was: a step's checksum follows from "
            "the one before it, and its input may be stored as a change to an earlier one's")


def _missing(run: Run, first: int, following: int) -> Problem:
    """One problem for a whole gap: a tampered step number (2 made 2,000,000,000) must not
    make verification list, and hold, one problem per number it skips."""
    why = "deleted, or lost while recording: the recorder logs and counts such losses"
    if following - first == 1:
        return Problem(run.run_id, first, "missing_step", f"step is missing ({why})")
    return Problem(run.run_id, first, "missing_step",
                   f"steps {first} to {following - 1} are missing, {following - first:,} in "
                   f"all ({why})")


def _digest_bytes(checksum: object) -> bytes:
    try:
        return bytes.fromhex(str(checksum))
    except ValueError:
        return b""


def _check_seal(run: Run, steps: Sequence[Step], last: bytes, key: bytes | None,
                report: VerifyReport) -> None:
    problems = report.problems
    finished = run.status in (RunStatus.COMPLETE, RunStatus.FAILED)
    if run.head_checksum is None:
        if finished:
            problems.append(Problem(run.run_id, None, "seal_missing",
                                    f"run claims to be {run.status.value} but carries no seal"))
        return
    report.sealed = True
    if run.step_count != len(steps):
        problems.append(Problem(run.run_id, None, "step_count_mismatch",
                                f"run was sealed with {counted(run.step_count, 'step')} but "
                                f"{len(steps)} are stored (truncated or extended)"))
    expected = seal_checksum(run.run_id, run.status, run.step_count, last, key)
    if run.head_checksum != expected:
        problems.append(Problem(run.run_id, None, "seal_mismatch",
                                "the seal does not match the run's status, step count and last "
                                "step (truncated, extended, or status changed)"))
