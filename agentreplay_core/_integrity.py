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
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID

import orjson

from agentreplay_core._codec import canonical_bytes
from agentreplay_core._model import Run, RunStatus, Step

GENESIS = hashlib.sha256(b"agentreplay/chain/v1").digest()
HMAC_ENV = "AGENTREPLAY_HMAC_KEY"


def hmac_key_from_env() -> bytes | None:
    """The HMAC key from `AGENTREPLAY_HMAC_KEY`, if set."""
    value = os.environ.get(HMAC_ENV)
    return value.encode("utf-8") if value else None


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
            b',"kind":', orjson.dumps(kind),
            b',"match_key":', orjson.dumps(match_key),
            b',"name":', orjson.dumps(name),
            b',"output":', output_json,
            b',"path":', orjson.dumps(path),
            b',"run_id":', orjson.dumps(str(run_id)),
            b',"step":', str(step).encode(),
            b"}",
        )
    )


def chain_next(previous: bytes, payload: bytes, key: bytes | None) -> bytes:
    """The next 32-byte chain digest."""
    if key:
        return hmac.new(key, previous + payload, hashlib.sha256).digest()
    return hashlib.sha256(previous + payload).digest()


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

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if not self.ok:
            return "\n".join(str(p) for p in self.problems)
        seal = ("sealed" if self.sealed else
                "not sealed, so steps after the last stored one cannot be ruled out")
        return f"run {self.run_id}: {self.step_count} steps, chain intact, {seal}"


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
    run: Run, steps: Sequence[Step], key: bytes | None, *, accept_unkeyed: bool = False
) -> VerifyReport:
    """Check every step's checksum, numbering and the run's seal; one problem per bad step.

    Each step is recomputed from the *stored* checksum of its predecessor, so a single changed
    row is reported once instead of breaking every later step. With a key, a run chained
    without it is a problem unless `accept_unkeyed` (anyone with write access could have
    re-chained it with plain SHA-256).
    """
    report = VerifyReport(run_id=run.run_id, step_count=len(steps))
    problems = report.problems
    if run.chain == "hmac-sha256" and not key:
        problems.append(Problem(run.run_id, None, "hmac_key_missing",
                                f"run was chained with HMAC-SHA-256; set {HMAC_ENV} to verify it"))
        return report
    if run.chain != "hmac-sha256" and key:
        if not accept_unkeyed:
            problems.append(Problem(
                run.run_id, None, "unkeyed_run",
                "run is chained with plain SHA-256 although an HMAC key is configured: anyone "
                "with write access could have forged it (pass accept_unkeyed=True for runs "
                "recorded before the key existed)"))
        key = None
    previous = GENESIS
    expected_step = 1
    for step in steps:
        if step.run_id != run.run_id:
            problems.append(Problem(run.run_id, step.step, "foreign_step",
                                    f"row belongs to run {step.run_id}"))
        after_gap = expected_step < step.step
        while expected_step < step.step:
            problems.append(Problem(run.run_id, expected_step, "missing_step",
                                    "step is missing (deleted, or lost while recording: the "
                                    "recorder logs and counts such losses)"))
            expected_step += 1
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
            else:
                problems.append(Problem(run.run_id, step.step, "checksum_mismatch",
                                        "content does not match its checksum (changed, "
                                        "inserted, reordered or copied from another run)"))
        previous = _digest_bytes(step.checksum)
        expected_step = max(expected_step, step.step + 1)
    _check_seal(run, steps, previous, key, report)
    return report


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
                                f"run was sealed with {run.step_count} steps but "
                                f"{len(steps)} are stored (truncated or extended)"))
    expected = seal_checksum(run.run_id, run.status, run.step_count, last, key)
    if run.head_checksum != expected:
        problems.append(Problem(run.run_id, None, "seal_mismatch",
                                "the seal does not match the run's status, step count and last "
                                "step (truncated, extended, or status changed)"))
