"""Hostile input for the JSONL run-file reader (issue 8).

A valid run file is damaged the ways files get damaged (flipped and overwritten bytes, cut
short, lines dropped, doubled, swapped or made up). `parse_run` then either returns the run or
raises a `StoreError` naming the file (and the line, for a bad line), never anything else; and
whatever parses cannot hide a change: `store.verify` flags every step whose chained content
(run id, number, kind, name, match key, path, input, output, error flag, checksum) differs from
the original, a seal that was edited, and a sealed run that lost steps. The step timing fields
(`started_at`, `duration_ms`) are outside the chain by design, so edits there are not flagged.

libFuzzer (through atheris) mutates the same kind of file with coverage feedback:
tests/fuzz/fuzz_jsonl.py, run here for a bounded number of inputs.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay_core import RunStatus, StoreError, open_store
from agentreplay_core._codec import canonical_bytes
from agentreplay_core._model import Run, Step
from agentreplay_core.stores._file import parse_run

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=400,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HARNESS = Path(__file__).resolve().parents[1] / "fuzz" / "fuzz_jsonl.py"
#: libFuzzer inputs per run of the harness (a few seconds)
ATHERIS_RUNS = 50_000

Original = tuple[bytes, Run, list[Step]]


def record_sample(directory: Path) -> Path:
    """A run whose values exercise the tagged forms, as the file store writes it."""
    with open_store(f"file:{directory}") as store, store.record(
            name="fuzz \"me\"", tags=["t\u00e9"], durability="sync") as rec:
        rec.record("llm", "gpt-4o",
                   {"messages": [{"role": "user", "content": "a\x00b \U0001f600"}]},
                   {"content": "ok", "cost": Decimal("0.10"), "raw": b"\x00\xff"})
        rec.record("tool", "search", {"q": ["x", 1.5, -0.0, 2**70]}, [float("nan"), None, True])
        with pytest.raises(ValueError):
            rec.call("tool", "broken", {}, _fail)
        rec.record("embedding", "embed", {"texts": ["a"]}, [[0.25] * 33])
    return directory / f"{rec.run_id}.jsonl"


def _fail() -> None:
    raise ValueError("no such city")


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Original:
    path = record_sample(tmp_path_factory.mktemp("original"))
    data = path.read_bytes()
    run, steps = parse_run(data, path)
    assert run.status == RunStatus.COMPLETE and len(steps) == 4
    return data, run, steps


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mutated") / "run.jsonl"


# --- mutations ----------------------------------------------------------------------------

Mutation = Callable[[bytes], bytes]
_INTERESTING = b'"\n{}[],:0 9\\\x00\xff-.e'


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _flip(pos: int, mask: int) -> Mutation:
    return lambda d: d[:pos % len(d)] + bytes([d[pos % len(d)] ^ mask]) + d[pos % len(d) + 1:] \
        if d else d


def _put(pos: int, byte: int) -> Mutation:
    return lambda d: d[:pos % len(d)] + bytes([byte]) + d[pos % len(d) + 1:] if d else d


def _insert(pos: int, junk: bytes) -> Mutation:
    return lambda d: d[:pos % (len(d) + 1)] + junk + d[pos % (len(d) + 1):]


def _truncate(pos: int) -> Mutation:
    return lambda d: d[:pos % (len(d) + 1)]


def _on_lines(edit: Callable[[list[bytes]], None]) -> Mutation:
    def apply(d: bytes) -> bytes:
        lines = _lines(d)
        edit(lines)
        return b"\n".join(lines)

    return apply


def _drop(i: int) -> Mutation:
    def edit(lines: list[bytes]) -> None:
        del lines[i % len(lines)]

    return _on_lines(edit)


def _duplicate(i: int) -> Mutation:
    return _on_lines(lambda lines: lines.insert(i % len(lines), lines[i % len(lines)]))


def _swap(i: int, j: int) -> Mutation:
    def edit(lines: list[bytes]) -> None:
        a, b = i % len(lines), j % len(lines)
        lines[a], lines[b] = lines[b], lines[a]

    return _on_lines(edit)


def _replace_line(i: int, text: bytes) -> Mutation:
    def edit(lines: list[bytes]) -> None:
        lines[i % len(lines)] = text

    return _on_lines(edit)


_records = st.sampled_from([
    b'{"t":"step"}', b'{"t":"finish","status":"complete"}', b'{"t":"status","status":"zombie"}',
    b'{"t":"finish","status":"complete","step_count":"x","head_checksum":null,"finished_at":1}',
    b'{"t":"run","format":"agentreplay-jsonl","format_version":2,"run":{}}', b'[1,2]', b'{}',
    b'{"t":[]}', b'{"t":"finish","status":"failed","step_count":1e300,"head_checksum":"",'
    b'"finished_at":"2024-01-01T00:00:00"}', b"\xff\xfe", b"[" * 2000,
])
mutations = st.one_of(
    st.builds(_flip, st.integers(0, 10**6), st.integers(1, 255)),
    st.builds(_put, st.integers(0, 10**6), st.sampled_from(list(_INTERESTING))),
    st.builds(_insert, st.integers(0, 10**6), st.binary(min_size=1, max_size=4)
              | st.sampled_from([b"\n", b" ", b"\n\n", b'"', b"\\u0000"])),
    st.builds(_truncate, st.integers(0, 10**6)),
    st.builds(_drop, st.integers(0, 20)),
    st.builds(_duplicate, st.integers(0, 20)),
    st.builds(_swap, st.integers(0, 20), st.integers(0, 20)),
    st.builds(_replace_line, st.integers(0, 20), _records),
)


# --- the property -------------------------------------------------------------------------


def chained(step: Step) -> tuple[Any, ...]:
    """What the hash chain covers of a step (and its stored checksum)."""
    return (step.run_id, step.step, step.kind, step.name, step.match_key, step.path,
            canonical_bytes(step.input), canonical_bytes(step.output), step.is_error,
            step.checksum)


def seal(run: Run) -> tuple[Any, ...]:
    return (run.run_id, run.chain, run.status, run.step_count, run.head_checksum)


def check_damaged(original: Original, path: Path, damaged: bytes) -> str:
    """Parse and verify `damaged`; returns what happened (for the test's own statistics)."""
    _, run0, steps0 = original
    try:
        run, steps = parse_run(damaged, path)
    except StoreError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: ") and "\n" not in message, message
        # a bad line is named; two messages are about the whole file
        assert "line " in message or "no run header line" in message \
            or "written by a newer agentreplay" in message, message
        return "refused"
    path.write_bytes(damaged)
    with open_store(f"file:{path}") as store:
        report = store.verify(run.run_id)
    before = [chained(s) for s in steps0]
    after = [chained(s) for s in steps]
    altered = [s.step for s, c in zip(steps, after, strict=True) if c not in before]
    doubled = len(set(after)) < len(after)
    lost = set(before) - set(after)
    sealed = run.status in (RunStatus.COMPLETE, RunStatus.FAILED)
    if altered:
        flagged = {p.step for p in report.problems}
        assert not report.ok and (None in flagged or set(altered) <= flagged), (altered, report)
        return "flagged"
    if doubled or (sealed and seal(run) != seal(run0)):
        assert not report.ok, report
        return "flagged"
    if lost:
        assert not report.ok or not report.sealed, report  # an unsealed prefix says so
        return "lost steps reported"
    if seal(run) == seal(run0):
        assert after == before and report.ok, report  # nothing that matters changed
    return "unchanged"


@FUZZ
@given(st.lists(mutations, min_size=1, max_size=3))
def test_damaged_run_files_are_refused_or_their_damage_is_flagged(
    original: Original, scratch: Path, damage: list[Mutation]
) -> None:
    data = original[0]
    for mutate in damage:
        data = mutate(data)
    check_damaged(original, scratch, data)


def test_every_single_byte_flip_is_refused_or_flagged(original: Original, scratch: Path) -> None:
    """Exhaustive over positions for one kind of damage: the bit most often hit, the low one."""
    data = original[0]
    outcomes: dict[str, int] = {}
    for pos in range(len(data)):
        outcome = check_damaged(original, scratch, _flip(pos, 1)(data))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    # Flips break the JSON or a field's type, or change chained content (flagged), or land
    # in what the chain does not cover (run name and metadata, timings): all three happen.
    assert {"refused", "flagged", "unchanged"} <= set(outcomes), outcomes


def test_an_untouched_file_parses_to_exactly_its_steps(original: Original, tmp_path: Path
                                                       ) -> None:
    """The baseline of the property: no mutation, no problem, every step as recorded."""
    data, run0, steps0 = original
    again = tmp_path / "copy.jsonl"
    assert check_damaged(original, again, data) == "unchanged"
    run, steps = parse_run(data, again)
    assert [chained(s) for s in steps] == [chained(s) for s in steps0]
    assert seal(run) == seal(run0)


def test_concatenated_runs_are_refused(tmp_path: Path) -> None:
    """Found by fuzzing: a second header line used to restart the run silently."""
    first = record_sample(tmp_path / "a").read_bytes()
    second = record_sample(tmp_path / "b").read_bytes()
    both = tmp_path / "both.jsonl"
    both.write_bytes(first + second)
    with pytest.raises(StoreError, match=r"line 7: a second run header .*a file holds one run"):
        parse_run(both.read_bytes(), both)
    header = first.split(b"\n")[0] + b"\n"
    with pytest.raises(StoreError, match="line 7: a second run header"):
        parse_run(first + header, both)  # the same run's header again, after its seal


# --- libFuzzer ----------------------------------------------------------------------------


def test_atheris_fuzzes_the_run_file_parser(tmp_path: Path) -> None:
    """Coverage-guided fuzzing of `parse_run` (and verification and decoding of what parses)
    for a bounded number of inputs, seeded with a sealed and an unsealed run file."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("atheris ships wheels for Linux x86-64 only (the test group installs it "
                    "there)")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    sealed = record_sample(tmp_path / "sealed").read_bytes()
    (corpus / "sealed.jsonl").write_bytes(sealed)
    # what a recording process that died leaves: no finish line
    (corpus / "unsealed.jsonl").write_bytes(sealed[:sealed.rindex(b"\n", 0, -1) + 1])
    result = subprocess.run(
        [sys.executable, str(HARNESS), f"-runs={ATHERIS_RUNS}", "-seed=20240501",
         "-max_len=8192", f"-artifact_prefix={tmp_path}{os.sep}", str(corpus)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    assert f"Done {ATHERIS_RUNS} runs" in result.stderr, result.stderr[-2000:]
    assert not list(tmp_path.glob("crash-*"))
