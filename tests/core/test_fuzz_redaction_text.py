"""Coverage-guided fuzzing of the text redaction rules (tests/fuzz/fuzz_redaction_text.py)
for a bounded number of inputs: random values under secrets' names written as JSON, JSON
inside JSON or a repr, and free text, checked as the property test checks them (no secret
kept, JSON stays JSON, redacting again changes nothing). Run longer by hand, it found the
cases of test_redaction_text_structure.py."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "fuzz" / "fuzz_redaction_text.py"
#: libFuzzer inputs per run of the harness (some 15 seconds)
ATHERIS_RUNS = 50_000


def test_atheris_fuzzes_the_text_redaction_rules(tmp_path: Path) -> None:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip("atheris ships wheels for Linux x86-64 only (the test group installs it "
                    "there)")
    result = subprocess.run(
        [sys.executable, str(HARNESS), f"-runs={ATHERIS_RUNS}", "-seed=20261206",
         "-max_len=4096", "-timeout=60", f"-artifact_prefix={tmp_path}{os.sep}"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    assert f"Done {ATHERIS_RUNS} runs" in result.stderr, result.stderr[-2000:]
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*"))
