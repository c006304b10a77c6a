"""Where the strings of JSON text or a repr are, at every level.

A secret's name inside a string is a word of that string: what follows it ends where the
string ends, and an object or array after it is one level down (`_redact_scan`). A string
may hold JSON text itself (a tool's result holding the JSON another returned), whose strings
are written with their quotes escaped once more (`\\"`, then `\\\\\\"`), or a repr's, whose
strings take the other quote unescaped. So the strings are found level by level, down to
`_MAX_LEVELS`: those of the text (if it is JSON or a repr, or one JSON string), then inside a
string those in its own kind of quote, escaped once more (JSON, or a quotation in prose), and
if it holds an object or array, those in the other kind too. Other text (prose, a log line)
has none: its quotes may be apostrophes, as they are in a string of prose.
"""

from __future__ import annotations

import bisect
import re
from typing import NamedTuple

from agentreplay_core._redact_containers import backslashes_before, string_end

#: a string of JSON or of a Python repr, in text whose quotes are not escaped
_STRING = re.compile(r"'(?:[^'\\\n]|\\.)*'" r'|"(?:[^"\\\n]|\\.)*"')
#: how JSON text or a repr starts ...
_STRUCTURED = re.compile(r"\s*[\[{]")
#: ... or JSON text that is one string
_ONE_STRING = re.compile(r"\s*\"")
#: how a string body holding an object or array starts (line breaks may be escaped)
_HOLDS_OBJECT = re.compile(r"(?:\s|\\+[nrt])*[\[{]")
_QUOTES = re.compile(r"[\"']")
_MAX_LEVELS = 4
#: a run of backslashes before the letter of an escaped line break or tab (or of a
#: backslash and that letter, one level down), and of a line break alone
ESCAPED_SPACE = re.compile(r"(?<!\\)(\\+)[nrt]")
ESCAPED_LINE_BREAK = re.compile(r"(?<!\\)(\\+)n")


def escaped_at(text: str, start: int, end: int, factor: int,
               escapes: re.Pattern[str] = ESCAPED_SPACE) -> int | None:
    """Where the first line break or tab (`escapes`) escaped at the level where each
    backslash is `factor` of the text's starts in `text[start:end]`: its `\\n` is a run of
    `factor` (mod twice that) before the `n`, as a run of twice that is a backslash."""
    for m in escapes.finditer(text, start, end):
        if len(m.group(1)) % (2 * factor) == factor:
            return m.start()
    return None


class TextString(NamedTuple):
    """A string in text: from its opening quote's first backslash (`start`) to after its
    closing quote (`end`); `closes` is where that quote's backslashes start (the body's end,
    or the text's end when the string is not closed). `escapes`: the backslashes before its
    quotes; `factor`: how many backslashes of the text each backslash written in the string
    around it is (1 in the text itself; each level doubles it)."""

    start: int
    end: int
    closes: int
    quote: str
    escapes: int
    factor: int = 1

    @property
    def body(self) -> int:
        return self.start + self.escapes + 1

    def inner_escapes(self, quote: str) -> int:
        """How many backslashes stand before the quotes `quote` of strings inside this one:
        its own kind's are escaped once more (`\\"`, `\\\\\\"`), the other kind's not at
        all (JSON escapes no `'`, a repr's `'` string no `"`)."""
        return self.factor + self.escapes if quote == self.quote else 0

    @property
    def inner_period(self) -> int:
        """The backslashes of an escaped backslash before a closing quote inside this one:
        two of this string's."""
        return 4 * self.factor

    def inner_quotes(self) -> dict[str, tuple[int, int]]:
        """Each kind of quote of strings inside this one: its backslashes, and their period
        before a closing one (`string_values`)."""
        return {q: (self.inner_escapes(q), self.inner_period) for q in "\"'"}


class TextStrings:
    """The strings of a text: those of the text itself found at once (their spans only), the
    ones inside a string only when a position in it is asked about."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._spans = _outermost(text)
        self._inner: dict[int, list[TextString]] = {}

    def outermost(self) -> list[TextString]:
        return [self._string(span) for span in self._spans]

    def around(self, at: int) -> tuple[TextString | None, TextString | None]:
        """The innermost string whose body `at` lies in, and the string that one is in."""
        i = bisect.bisect_right(self._spans, (at, len(self._text) + 1)) - 1
        if i < 0 or not self._spans[i][0] < at < self._spans[i][1]:
            return None, None
        string, outer = self._string(self._spans[i]), None
        for _ in range(_MAX_LEVELS - 1):
            inner = self.inside(string)
            j = bisect.bisect_right(inner, at, key=lambda s: s.start) - 1
            if j < 0 or not inner[j].body <= at < inner[j].end:
                break
            string, outer = inner[j], string
        return string, outer

    def inside(self, outer: TextString) -> list[TextString]:
        """The strings in `outer`'s body: those in quotes of its own kind, escaped once more
        (JSON text, or a quotation in prose), and if it holds an object or array, those in
        the other kind of quote (in prose, apostrophes)."""
        found = self._inner.get(outer.start)
        if found is None:
            found = self._inner[outer.start] = _inside(
                self._text, outer, _HOLDS_OBJECT.match(self._text, outer.body, outer.closes)
                is not None)
        return found

    def _string(self, span: tuple[int, int]) -> TextString:
        start, end = span
        closed = end - start >= 2 and self._text[end - 1] == self._text[start]
        return TextString(start, end, end - 1 if closed else end, self._text[start], 0)


def _outermost(text: str) -> list[tuple[int, int]]:
    if _STRUCTURED.match(text):
        return [m.span() for m in _STRING.finditer(text)]
    one = _ONE_STRING.match(text)
    if one is None:
        return []
    closes = string_end(text, one.end(), '"', 0)
    return [(one.end() - 1, len(text) if closes is None else closes + 1)]


def _inside(text: str, outer: TextString, both_kinds: bool) -> list[TextString]:
    """The strings in `outer`'s body, in order: a quote with its kind's backslashes before
    it (no more: a quote with more is inside a string one level further down) opens one,
    which ends at its closing quote; one not closed inside `outer` is none (an apostrophe).
    Quotes of the other kind than `outer`'s count only if `both_kinds`. No string spans a
    line break of `outer`'s (JSON's strings cannot, and a quotation read as one would hide
    what follows it from the rules, which read the line as text alone does)."""
    found = []
    body_end = outer.closes
    at = outer.body
    while (m := _QUOTES.search(text, at, body_end)) is not None:
        quote, escapes = m.group(), outer.inner_escapes(m.group())
        run = backslashes_before(text, m.start())
        at = m.end()
        if run != escapes or not (both_kinds or quote == outer.quote):
            continue
        closes = string_end(text, m.end(), quote, escapes, outer.inner_period)
        if closes is None or closes >= body_end or \
                escaped_at(text, m.end(), closes, outer.factor, ESCAPED_LINE_BREAK) is not None:
            continue
        end = closes + escapes + 1
        found.append(TextString(m.start() - escapes, end, closes, quote, escapes,
                                2 * outer.factor))
        at = end
    return found

