"""libFuzzer harness (atheris) for the JSONL run-file reader.

Each input is the content of a run file. `parse_run` must return the run or raise a
`StoreError` that names the file; what parses must verify (or report problems) and decode
(or raise `SerializationError`) without any other exception. Any other exception is a crash:
libFuzzer writes the input to `crash-*` and exits non-zero.

Run it (Linux x86-64, `pip install atheris`; tests/core/test_fuzz_file_reader.py does this
with a seed corpus for a bounded number of inputs)::

    python tests/fuzz/fuzz_jsonl.py -runs=100000 -max_len=8192 CORPUS_DIR
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path
from typing import Any

atheris: Any = importlib.import_module("atheris")  # untyped; only this harness needs it

with atheris.instrument_imports(include=["agentreplay_core"]):
    from agentreplay_core._codec import decode
    from agentreplay_core._errors import SerializationError, StoreError
    from agentreplay_core._integrity import verify_chain
    from agentreplay_core.stores._file import parse_run

SOURCE = Path("fuzzed.jsonl")


def test_one_input(data: bytes) -> None:
    try:
        run, steps = parse_run(data, SOURCE)
    except StoreError as exc:
        if not str(exc).startswith(f"{SOURCE}: "):
            raise AssertionError(f"a StoreError that does not name the file: {exc}") from exc
        return
    report = verify_chain(run, steps, None)
    assert report.ok or report.problems
    for step in steps:
        for value in (step.input, step.output):
            # restore_objects=False: never import a class named by fuzzed data
            with contextlib.suppress(SerializationError):
                decode(value, restore_objects=False)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
