"""libFuzzer harness (atheris) for the text redaction rules.

Each input is read as a dict of values under names (secrets' names, others, or fuzzed ones),
written as text one of the ways tools return it (JSON, indented, ASCII-escaped or not, JSON
inside JSON, a repr), or as free text. Redacting it must keep no string a dict's secret field
would lose, leave JSON text readable JSON, change nothing when done again, and raise nothing.
Any failure is a crash: libFuzzer writes the input to `crash-*` and exits non-zero.

Run it (Linux x86-64, `pip install atheris`; tests/core/test_fuzz_redaction_text.py does this
for a bounded number of inputs)::

    python tests/fuzz/fuzz_redaction_text.py -runs=100000 -max_len=8192
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

atheris: Any = importlib.import_module("atheris")  # untyped; only this harness needs it

# the checks are the property test's (tests/support), whatever directory this runs from
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

with atheris.instrument_imports(include=["agentreplay_core"]):
    from agentreplay_core import Redactor

from tests.support.text_forms import (  # noqa: E402
    FORMS,
    SECRET_NAMES,
    assert_text_redacted,
    default_secret_name,
)

REDACTOR = Redactor(key=b"fuzz-redaction-text")
#: a user's field names too (one that JSON text escapes), for half the inputs
OWN_NAMES = ("x-acme-ref", "contraseña")
WITH_FIELDS = Redactor(key=b"fuzz-redaction-text", fields=OWN_NAMES)
_NAMES = (*SECRET_NAMES, *OWN_NAMES, "note", "x")
#: pieces of text the rules care about, so that short inputs reach them
_PIECES = ("password", ": ", "=", '"', "'", "\\", "\\\"", "<", ">", "Bearer ", "Basic ",
           "{", "[", "\n", " ", "sk-", "secret", '{"', '": "', "'='", "x-acme-ref",
           "contraseña", "\t")


def _text(fdp: Any, budget: int) -> str:
    parts = []
    for _ in range(fdp.ConsumeIntInRange(0, 6)):
        if fdp.ConsumeBool():
            parts.append(_PIECES[fdp.ConsumeIntInRange(0, len(_PIECES) - 1)])
        else:
            parts.append(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, budget)))
    if fdp.ConsumeIntInRange(0, 15) == 0:  # now and then one long enough for the 4 KiB bound
        parts.append(parts[-1:][0] * (4200 // max(1, len(parts[-1])) + 1) if parts else "")
    return "".join(parts)


def _value(fdp: Any, depth: int) -> Any:
    kind = fdp.ConsumeIntInRange(0, 5 if depth < 2 else 3)
    if kind == 0:
        return fdp.ConsumeInt(4)
    if kind == 1:
        return fdp.ConsumeBool() or None
    if kind in (2, 3):
        return _text(fdp, 24)
    if kind == 4:
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    return _dict(fdp, depth + 1)


def _dict(fdp: Any, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(fdp.ConsumeIntInRange(1 if depth == 0 else 0, 3)):
        name = _NAMES[fdp.ConsumeIntInRange(0, len(_NAMES) - 1)] if fdp.ConsumeBool() \
            else fdp.ConsumeUnicodeNoSurrogates(12)
        out[name] = _value(fdp, depth)
    return out


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeIntInRange(0, 3) == 0:  # free text: stable, and JSON stays JSON
        text = _text(fdp, 64)
        redacted = REDACTOR.redact(text)
        assert REDACTOR.redact(redacted) == redacted, text
        try:
            json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested past what json reads
            return
        json.loads(redacted)
        return
    form = FORMS[fdp.ConsumeIntInRange(0, len(FORMS) - 1)]
    indent = 2 if fdp.ConsumeBool() else None
    ascii_ = fdp.ConsumeBool()
    if fdp.ConsumeBool():
        assert_text_redacted(REDACTOR, _dict(fdp, 0), form, indent, ascii_)
    else:
        assert_text_redacted(WITH_FIELDS, _dict(fdp, 0), form, indent, ascii_,
                             named=_own_or_default, name_rules=("assignment", "custom_field"))


def _own_or_default(name: str) -> bool:
    return name.lower() in OWN_NAMES or default_secret_name(name)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
