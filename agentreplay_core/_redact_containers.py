"""The strings of an object or array written in text after a secret's name.

A dict's redaction takes every string below a secret field (`{"credentials": {"user": ...,
"pass": ...}}`), whatever the inner keys are called. Written as text (JSON a tool returned,
a Python dict's repr in a log line) the text rules saw a name and an opening bracket, which
is no value, and kept the inner strings in clear. The assignment rules now also match the
bracket, and `string_values` gives the strings the bracket opens: each string up to the
matching closing bracket that is no key, as written (escapes and all, as a quoted value is).

In JSON text inside JSON text a quote is written `\\"`; in a third level `\\\\\\"`. A level's
quotes carry 2 ** level - 1 backslashes, which the name's closing quote shows; a quote with
more before it is a character of a string one level down.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agentreplay_core._redact_rules import BETWEEN_STRINGS

#: what matters outside strings: brackets, and quotes that may open a string
_STRUCTURE = re.compile(r"[{}\[\]\"']")
_COLON = re.compile(r"\s*:")
#: what follows a string in an object or array, line breaks escaped or not (or the text ends)
_AFTER_STRING = re.compile(r"(?:\s|\\+[nrt])*(?:[,:\]}]|\Z)")
_BETWEEN_STRINGS = re.compile(f"{BETWEEN_STRINGS}+")


def string_values(text: str, at: int, escapes: int, structured: bool = False,
                  quotes: Mapping[str, tuple[int, int]] | None = None
                  ) -> tuple[list[tuple[int, int]], int]:
    """(start, end) of each non-empty string value in the object or array opened at `at`,
    whose quotes are preceded by `escapes` backslashes (to the end of `text` if it is not
    closed: a cut text keeps its secrets too; but a single quote that no other closes is an
    apostrophe); and where the object ends (a name inside it needs no scan of its own). No
    strings when one is followed by what no object or array has there and is what stands
    between two strings, or `text` is JSON or a repr (`structured`, where no string in an
    object stands before a word): the bracket stood inside a string (`'note: password: {',
    'a': 1`). (In prose, `[see "notes" below]` keeps its string.) `quotes`: the backslashes
    before each kind of quote, and the period of those before its closing one, where they
    differ (an object in a string: `TextString.inner_quotes`)."""
    found: list[tuple[int, int]] = []
    by_quote = quotes or dict.fromkeys("\"'", (escapes, 2 * escapes + 2))
    depth = 0
    i = at
    while (m := _STRUCTURE.search(text, i)) is not None:
        char, i = m.group(), m.end()
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return found, i
        elif backslashes_before(text, m.start()) == (escaped := by_quote[char][0]):
            end = string_end(text, i, char, escaped, by_quote[char][1])
            if end is None:
                if char == "'":  # an apostrophe in prose (`[it's ...]`), no string
                    continue
                if i < len(text) and not _BETWEEN_STRINGS.fullmatch(text, i):
                    found.append((i, len(text)))  # open to the end: the rest is the string
                break
            after = end + escaped + 1
            if not _AFTER_STRING.match(text, after) and \
                    (structured or _BETWEEN_STRINGS.fullmatch(text, i, end)):
                return [], at + 1  # the gap between two strings: the bracket was inside one
            if end > i and not _COLON.match(text, after):
                found.append((i, end))
            i = after
    return found, len(text)  # not closed: it runs to the end


def backslashes_before(text: str, at: int) -> int:
    """How many backslashes come right before `at`."""
    start = at
    while start > 0 and text[start - 1] == "\\":
        start -= 1
    return at - start


def string_end(text: str, at: int, quote: str, escapes: int, period: int = 0
               ) -> int | None:
    """Where the string body that starts at `at` ends (its closing quote's backslashes
    start there), or None if it does not. `period`: an escaped backslash of its level, in
    backslashes (where its quotes are escaped at every level above, 2 * escapes + 2)."""
    period = period or 2 * escapes + 2
    i = at
    while (end := text.find(quote, i)) >= 0:
        run = backslashes_before(text, end)
        if run >= escapes and (run - escapes) % period == 0 and end - escapes >= at:
            return end - escapes
        i = end + 1
    return None
