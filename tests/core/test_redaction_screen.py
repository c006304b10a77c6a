"""The Hyperscan screen for secrets answers exactly as the pure-Python screen does.

The Python screen (`Scanner(rules, fast=False)`) is the reference: it asks each question of
the text itself (`in`, `str.lower`, `re`). The fast screen must find the same candidate rules
and so the same secrets in every text, including those where bytes and characters part ways:
other scripts, Unicode whitespace inside `password :`, and the two characters that lower-case
to ASCII letters.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay_core import RedactionRule, Redactor
from agentreplay_core._redact_fast import LAST_SPACE, LOWER_TO_ASCII, Compiled, FastScreen
from agentreplay_core._redact_rules import DEFAULT_RULES
from agentreplay_core._redact_scan import Scanner
from tests.support.secret_leaks import FakeSecret, fake_secrets

CI = settings(derandomize=True, database=None, deadline=None, max_examples=400,
              suppress_health_check=[HealthCheck.too_slow])

#: a user rule with keywords that are not ASCII: Hyperscan leaves its screen to Python
USER_RULES = (
    RedactionRule("passwort", pattern=r"(?i:passwört)\s*[:=]\s*(?P<secret>\S{6,})",
                  needles=(":", "="), keywords=("passwört",)),
    RedactionRule("ticket", pattern=r"TCK-[0-9]{8}", needles=("TCK-",)),
)
RULES = tuple(r for r in DEFAULT_RULES if not r.is_field_rule) + USER_RULES

#: pieces a text is made of: secrets, the contexts of keyword rules, characters where UTF-8
#: and lower-casing differ from ASCII, separators and prose
PIECES = [f.in_text for f in fake_secrets()] + [
    "password", "PASSWORD", "Password", "token", "api_key", "KEY", "secret", "passwört",
    "PASSWÖRT", ":", "=", '"', "'", " ", "\t", "\n", "\u00a0", "\u2003", "\u3000", "\x1c",
    "\x85", "\u212a", "\u212aey", "\u0130", "t\u0130", "\u017f", "\u0131", "é", "日本",
    "\U0001f600", "\ud800", "hunter2hunter2", "-----BEGIN", "sk-", "task-force", "disk-",
    "AKIA", "ASIA", "xox", "eyJ", "earer", "Bearer", "BEARER", "@", "_", "ghp_", "hf_", "k_live_",
    "github_pat_", "TCK-", "12345678", "The quick brown fox jumps over the lazy dog. ",
]
TEXTS = st.lists(st.sampled_from(PIECES) | st.text(max_size=12), max_size=14).map("".join)


def _scanners(rules: tuple[RedactionRule, ...] = RULES) -> tuple[Scanner, Scanner]:
    fast, python = Scanner(rules), Scanner(rules, fast=False)
    assert fast._fast is not None, "Hyperscan is not in use: install it (a dependency)"
    return fast, python


FAST, PYTHON = _scanners()


@CI
@given(TEXTS)
def test_the_fast_screen_finds_what_the_python_screen_finds(text: str) -> None:
    assert FAST.candidates(text) == PYTHON.candidates(text)
    assert FAST.find(text) == PYTHON.find(text)


@pytest.mark.parametrize("text", [
    "PASSWORD\u00a0: hunter2hunter2",     # Unicode whitespace before the separator
    "password\x1c= hunter2hunter2",       # a separator character Python counts as space
    "\u212aEY = hunter2hunter2",          # the Kelvin sign lower-cases to k: "key = "
    "x \u212aey: hunter2hunter2 t\u0130",  # ... with İ, whose lower case is longer
    "ap\u0130_key = hunter2hunter2",      # İ, which `re` takes for i when caseless
    "passwört: hunter2hunter2",           # a user keyword that is not ASCII
    'the "Api_Key" : "hunter2hunter2"',
])
def test_keyword_contexts_across_unicode_are_found_by_both(text: str) -> None:
    fast = FAST.candidates(text)
    assert fast == PYTHON.candidates(text)
    assert {r.name for r in fast} & {"assignment", "passwort"}


@pytest.mark.parametrize("fake", fake_secrets(), ids=lambda f: f.kind)
def test_every_kind_of_secret_is_a_candidate_of_the_fast_screen(fake: FakeSecret) -> None:
    text = f"prose before {fake.in_text} and after"
    assert FAST.find(text) == PYTHON.find(text)
    assert FAST.find(text), "the fast screen let a secret through"


def test_the_unicode_facts_the_fast_screen_relies_on_hold_for_this_python() -> None:
    """Only LOWER_TO_ASCII lower-case to something holding ASCII or whitespace, and no code
    point above LAST_SPACE is whitespace (`_redact_fast` depends on both)."""
    to_ascii, spaces_above = [], []
    for code in range(0x80, sys.maxunicode + 1):
        char = chr(code)
        lower = char.lower()
        if lower != char and any(c.isascii() or c.isspace() for c in lower):
            to_ascii.append(char)
        if code > LAST_SPACE and char.isspace():
            spaces_above.append(char)
    assert tuple(to_ascii) == LOWER_TO_ASCII
    assert spaces_above == []


def test_threads_scan_at_once_each_with_its_own_scratch_space() -> None:
    """A scan releases the GIL; threads sharing one scratch space would make Hyperscan fail
    (and every text fall back to Python): each must get an answer from Hyperscan."""
    screen = FAST._fast
    assert screen is not None
    text = "a long text with sk-proj-" + "x" * 20_000 + " and password: hunter2hunter2"
    failures: list[str] = []
    start = threading.Barrier(4)

    def scan_many() -> None:
        start.wait()
        for _ in range(200):
            if screen.scan(text) is None:
                failures.append(threading.current_thread().name)
                return

    threads = [threading.Thread(target=scan_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


class _Scratch:
    def clone(self) -> _Scratch:
        return self


class _FailingDatabase:
    """Hyperscan's database as it behaves when a scan fails (an error from the library)."""

    scratch = _Scratch()

    def scan(self, *_: object, **__: object) -> None:
        raise RuntimeError("hyperscan failed")


def test_a_failing_scan_leaves_the_text_to_the_python_screen() -> None:
    fast, python = _scanners()
    assert fast._fast is not None
    fast._fast = FastScreen(Compiled(_FailingDatabase()), fast._fast.needles, sorted(
        fast._fast.keyword_rules))
    assert fast._fast.scan("anything") is None
    for fake in fake_secrets():
        assert fast.find(fake.in_text) == python.find(fake.in_text)
        assert fast.find(fake.in_text)


def test_redactors_with_the_same_rules_share_one_compiled_screen() -> None:
    """Compiling takes milliseconds: a redactor per store must not pay it each time."""
    first, second = Redactor(key=b"one"), Redactor(key=b"two")
    assert first._scanner._fast is not None
    assert first._scanner._fast is second._scanner._fast


def test_scanners_of_candidate_rules_are_kept_and_redact_as_new_ones() -> None:
    """A text's candidate rules get a scanner of their own, built once per set of rules (it
    costs more than the search). Kept or rebuilt after the cache fills, it redacts what a
    fresh redactor redacts: each text alone, in any order, many times."""
    rules = [RedactionRule(f"r{i}", pattern=rf"tok{i:02d}_[a-z]{{8}}", needles=(f"tok{i:02d}_",))
             for i in range(80)]
    texts = [f"see tok{i:02d}_abcdefgh and tok{(i * 7) % 80:02d}_hgfedcba, then stop"
             for i in range(80)]
    kept = Redactor(rules=rules, key=b"k")
    expected = [Redactor(rules=rules, key=b"k").redact_encoded([t])[0] for t in texts]
    for _ in range(3):  # 80 sets of candidates: more than the cache holds, so it starts over
        for text, want in zip(texts, expected, strict=True):
            assert kept.redact_encoded([text])[0] == want
            kept._texts.clean.clear()  # no memo: the text is scanned again
            kept._texts.dirty.clear()
    assert all("<secret:r" in w[0] and "tok" not in w[0] for w in expected)
    candidates = kept._scanner.candidates(texts[1])
    assert kept._scanner_of(candidates) is kept._scanner_of(list(candidates))


def test_without_hyperscan_redaction_screens_in_python_with_the_same_result(
        tmp_path: Path) -> None:
    """Where no wheel of Hyperscan exists, it cannot be imported: recording still redacts."""
    fake = fake_secrets()[0]
    script = f"""
import sys
sys.modules["hyperscan"] = None  # what an import of a missing module does: ImportError
from agentreplay_core import Redactor, open_store
from agentreplay_core._redact_json import json_screen
redactor = Redactor(key=b"k")
assert redactor._scanner._fast is None and json_screen(redactor.rules) is None
with open_store("file:{tmp_path / 'runs'}") as store:
    store.redaction = redactor
    with store.record(name="no-hyperscan") as rec:
        rec.record("llm", "chat", {{"content": {fake.in_text!r}}}, "ok")
    [step] = store.load_steps(rec.run_id)
print(step.input["content"])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, timeout=120)
    expected = fake.in_text.replace(fake.value, Redactor(key=b"k").placeholder(fake.value,
                                                                               "openai"))
    assert done.stdout.strip() == expected
