"""The secret screen's substring questions about a text, answered in one pass of Hyperscan.

The screen in `_redact_scan` asks of each new text which needles it holds and whether a
keyword rule's context (`password:`) occurs. In Python each needle costs a substring search of
about a nanosecond per character: some 15 us for the 3 KB of a chat step and the default
rules, the largest share of recording new text. Hyperscan, a SIMD multi-pattern matcher,
answers them together in one pass of a few microseconds. (A run of token characters, which
Hyperscan finds no faster than `has_run`, is left to Python, and asked only of the texts that
pass a rule's other screens.)

Its answers must be exactly Python's, so it scans the text's UTF-8 bytes (lone surrogates
passed through) only for questions whose answer is the same on those bytes:

- a literal needle occurs in the text if and only if its UTF-8 occurs in the text's UTF-8;
- a keyword screen searches `text.lower()`: matching the ASCII keywords caselessly is the same
  as long as no other character lower-cases to ASCII. Two do (U+0130, U+212A: a test checks
  every code point), so a text holding them leaves the keyword screens to Python. Python's
  `\\s` is spelled out as the UTF-8 of every character it counts as whitespace, and a rule
  with a keyword that is not ASCII stays with Python.

Without Hyperscan (no wheel for the platform, or a CPU it cannot run on) `Scanner` screens in
Python alone; a scan that fails does the same for that text.
"""

from __future__ import annotations

import functools
import importlib
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agentreplay_core._screen_cache import load_or_compile


def _hyperscan() -> Any:
    """The `hyperscan` module, or None where it is not installed (no wheel for the
    platform): the Python screen then."""
    try:
        return importlib.import_module("hyperscan")
    except ImportError:  # pragma: no cover - the test environments install it
        return None


hyperscan = _hyperscan()
#: what a scan raises when its match handler asked it to stop
_TERMINATED: type[Exception] | tuple[()] = hyperscan.ScanTerminated if hyperscan else ()

#: the characters other than ASCII ones whose lower-case form holds ASCII (İ, the Kelvin sign)
LOWER_TO_ASCII = ("\u0130", "\u212a")
#: in the ids a scan returns: the keyword rules were not decided (the text lower-cases to
#: more ASCII than it holds)
UNDECIDED = -1
#: no code point above this is whitespace to Python (a test checks every one)
LAST_SPACE = 0x3000


def hex_pattern(data: bytes) -> bytes:
    """`data` as a Hyperscan pattern matching exactly those bytes (no escaping to get wrong)."""
    return b"".join(b"\\x%02x" % byte for byte in data)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


@functools.cache
def whitespace() -> tuple[str, ...]:
    """The characters Python's `\\s` matches in a str."""
    return tuple(chr(c) for c in range(LAST_SPACE + 1) if chr(c).isspace())


def alternatives(forms: Iterable[bytes]) -> bytes:
    """A Hyperscan pattern matching any one of `forms` (byte strings)."""
    return b"(?:" + b"|".join(hex_pattern(f) for f in forms) + b")"


class Compiled:
    """A compiled Hyperscan database, with a scratch space for each thread that scans (a
    scan releases the GIL, and a scratch space serves one scan at a time)."""

    def __init__(self, database: Any) -> None:
        self._database = database
        self._local = threading.local()

    def scanned(self, data: bytes, on_match: Callable[..., bool | None]) -> bool:
        """Scan `data`, calling `on_match(id, start, end, flags, context)` for each match
        until it returns True; False if Hyperscan failed (then nothing can be concluded from
        the matches)."""
        try:
            scratch = getattr(self._local, "scratch", None)
            if scratch is None:
                scratch = self._local.scratch = self._database.scratch.clone()
            self._database.scan(data, match_event_handler=on_match, scratch=scratch)
        except _TERMINATED:  # `on_match` stopped the scan: what it saw is the answer
            return True
        except Exception:  # the caller falls back on what needs no Hyperscan
            return False
        return True


def compiled(patterns: Sequence[tuple[bytes, int]]) -> Compiled | None:
    """`patterns` ((expression, flags), each match reported with its index) compiled, or
    None without Hyperscan or if it cannot compile them (a CPU it does not support)."""
    if hyperscan is None or not patterns:
        return None
    try:
        database = load_or_compile(hyperscan, patterns)
    except Exception:
        return None
    return Compiled(database)


class FastScreen:
    """The text screen for one set of needles and keyword rules."""

    def __init__(self, database: Compiled, needles: Sequence[str],
                 keyword_rules: Sequence[int]) -> None:
        self._database = database
        #: what each match id stands for: a needle, or the index of a keyword rule
        self.needles = tuple(needles)
        self.keyword_ids = {len(self.needles) + k: rule for k, rule in enumerate(keyword_rules)}
        #: the keyword rules this screen decides (the others have a keyword that is not ASCII)
        self.keyword_rules = frozenset(keyword_rules)

    def scan(self, text: str) -> frozenset[int] | None:
        """The ids of the needles and keyword rules found in `text` (`UNDECIDED` instead of
        the keyword rules if `text` lower-cases to more ASCII than it holds), or None if
        Hyperscan failed: screen it in Python then."""
        hits: set[int] = set()
        if not self._database.scanned(_utf8(text), lambda match_id, *_: hits.add(match_id)):
            return None
        if any(c in text for c in LOWER_TO_ASCII):
            return frozenset([UNDECIDED, *(i for i in hits if i < len(self.needles))])
        return frozenset(hits)


def keyword_pattern(keywords: Sequence[str],
                    form: Callable[[str], bytes] = _utf8) -> bytes | None:
    """The forward form of `_redact_scan._keyword_screens`: a keyword, an optional quote
    (escaped or not), whitespace (or its escapes in JSON text: `\\n`), then `:` or `=`, each
    character as `form` writes it (UTF-8 here, inside a JSON string for `_redact_json`).
    None if a keyword is not ASCII: caseless matching of bytes folds ASCII letters only."""
    if not keywords or not all(k.isascii() for k in keywords):
        return None
    escaped_space = alternatives([form("\\")]) + b"+" + alternatives(form(c) for c in "nrt")
    return (alternatives(form(k) for k in sorted(set(keywords)))
            + alternatives([form("\\")]) + b"*"  # an escaped quote: JSON text in JSON text
            + alternatives([form('"'), form("'")]) + b"?"
            + b"(?:" + alternatives(form(c) for c in whitespace()) + b"|" + escaped_space
            + b")*" + alternatives([form(":"), form("=")]))


@functools.lru_cache(maxsize=16)
def fast_screen(needles: tuple[str, ...],
                keywords: tuple[tuple[int, tuple[str, ...]], ...]) -> FastScreen | None:
    """A screen for these needles and keyword rules (rule index, keywords), or None without
    Hyperscan. Compiling takes ~15 ms, so redactors with the same rules share a screen."""
    if hyperscan is None:
        return None
    single = hyperscan.HS_FLAG_SINGLEMATCH
    patterns = [(hex_pattern(_utf8(n)), single) for n in needles]
    decided = []
    for rule, words in keywords:
        pattern = keyword_pattern(words)
        if pattern is not None:
            patterns.append((pattern, single | hyperscan.HS_FLAG_CASELESS))
            decided.append(rule)
    database = compiled(patterns)
    return None if database is None else FastScreen(database, needles, decided)
