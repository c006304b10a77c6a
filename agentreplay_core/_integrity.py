"""The hash chain that makes a run log tamper-evident (DESIGN section 3).

For step n of a run::

    payload[n]  = canonical JSON of {"input", "is_error", "kind", "match_key", "name",
                                      "output", "path", "run_id", "step"}
    checksum[n] = H(checksum[n-1] || payload[n])
    checksum[0] = SHA-256(b"agentreplay/chain/v1")

`H` is SHA-256, or HMAC-SHA-256 under the configured key; `||` joins the 32 raw digest bytes of
the previous checksum with the payload bytes. Checksums are stored as lower-case hex.
`runs.head_checksum` equals the checksum of the last step, and `runs.step_count` the number of
steps, so a truncated or extended run is detected too. The step's `path` is chained as well
(an extension of DESIGN's list): replay uses it to tell concurrent branches apart, so it must not
be editable either.
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

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            return f"run {self.run_id}: {self.step_count} steps, chain intact"
        return "\n".join(str(p) for p in self.problems)


def _recompute(step: Step, previous: bytes, key: bytes | None) -> bytes:
    payload = step_payload(
        step.run_id, step.step, step.kind, step.name, step.match_key, step.path,
        canonical_bytes(step.input), canonical_bytes(step.output), step.is_error,
    )
    return chain_next(previous, payload, key)


def verify_chain(run: Run, steps: Sequence[Step], key: bytes | None) -> VerifyReport:
    """Check every step's checksum, numbering and the run's seal; one problem per bad step.

    Each step is recomputed from the *stored* checksum of its predecessor, so a single changed
    row is reported once instead of breaking every later step.
    """
    report = VerifyReport(run_id=run.run_id, step_count=len(steps))
    problems = report.problems
    if run.chain == "hmac-sha256" and not key:
        problems.append(Problem(run.run_id, None, "hmac_key_missing",
                                f"run was chained with HMAC-SHA-256; set {HMAC_ENV} to verify it"))
        return report
    if run.chain == "sha256" and key:
        key = None  # the run predates the key; a plain chain is still checked
    previous = GENESIS
    expected_step = 1
    for step in steps:
        if step.run_id != run.run_id:
            problems.append(Problem(run.run_id, step.step, "foreign_step",
                                    f"row belongs to run {step.run_id}"))
        while expected_step < step.step:
            problems.append(Problem(run.run_id, expected_step, "missing_step",
                                    "step is missing (deleted?)"))
            expected_step += 1
        if step.step < expected_step:
            problems.append(Problem(run.run_id, step.step, "duplicate_step",
                                    "step number appears twice"))
        try:
            digest = _recompute(step, previous, key)
        except Exception as exc:  # a tampered row may not even decode
            problems.append(Problem(run.run_id, step.step, "unreadable", f"cannot hash: {exc}"))
            digest = b""
        if digest.hex() != step.checksum:
            problems.append(Problem(run.run_id, step.step, "checksum_mismatch",
                                    "content does not match its checksum (changed, inserted, "
                                    "reordered or copied from another run)"))
        try:
            previous = bytes.fromhex(step.checksum)
        except ValueError:
            previous = b""
        expected_step = max(expected_step, step.step + 1)
    _check_seal(run, steps, problems)
    return report


def _check_seal(run: Run, steps: Sequence[Step], problems: list[Problem]) -> None:
    sealed = run.status in (RunStatus.COMPLETE, RunStatus.FAILED)
    last = steps[-1] if steps else None
    if sealed or run.head_checksum is not None:
        if run.step_count != len(steps):
            problems.append(Problem(run.run_id, None, "step_count_mismatch",
                                    f"run was sealed with {run.step_count} steps but "
                                    f"{len(steps)} are stored (truncated or extended)"))
        head = last.checksum if last else None
        if run.head_checksum != head:
            problems.append(Problem(run.run_id, None, "head_mismatch",
                                    "head checksum does not match the last stored step"))
