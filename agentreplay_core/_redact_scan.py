"""Finding secrets in text quickly: which rules can match at all, and where they do.

Regexes with alternatives cost the `re` engine several nanoseconds per character, too much to
run over everything an agent records. So a rule is first screened by its needles (literal
strings one of which any match contains), and a needle by its rarest character: looking for
one character is a `memchr`, close to free, and most text lacks the rare ones. Only rules
whose needles are present run their regex. The recorder screens all new text of a step at
once (joined), so a step without secrets costs a few substring searches in all.

Where Hyperscan is installed (a dependency, with wheels for the common platforms), the
needles and keyword contexts of all rules are found in one pass instead (`_redact_fast`), with
the same answers; the Python screen here stays as the reference and the fallback.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator, Sequence

from agentreplay_core._redact_containers import string_end, string_values
from agentreplay_core._redact_fast import UNDECIDED, fast_screen
from agentreplay_core._redact_rules import (
    GAP,
    NAME_START,
    PLACEHOLDER,
    FieldTextRule,
    RedactionRule,
)
from agentreplay_core._redact_text_strings import (
    ESCAPED_LINE_BREAK,
    ESCAPED_SPACE,
    TextString,
    TextStrings,
    escaped_at,
)

#: characters from commonest to rarest in prose and JSON-ish text (a rough ranking; any other
#: character counts as rarer still)
_BY_FREQUENCY = " etaoinshrdlcumwfgypb,.\n'\"-:0123456789vk/()TAISOWHBCMFPDRLEGNYUVJKQXZxjqz"
_GUARD_FROM = 20  # characters before this index are too common to guard with


#: token characters (`min_run`): bytes.translate maps them to "x" and all else to " ", so that
#: one substring search finds a run; a C-speed pass, unlike a regex with a repeated class
_TOKEN_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.~+/="
_RUNS = bytes(0x78 if i in _TOKEN_BYTES else 0x20 for i in range(256))


def has_run(text: str, length: int) -> bool:
    """Whether `text` holds `length` consecutive token characters."""
    return b"x" * length in text.encode("utf-8", "surrogatepass").translate(_RUNS)


def _guards(needle: str) -> str:
    """The characters of `needle` rare enough to look for first (all must be present)."""
    return "".join(sorted({ch for ch in needle if _BY_FREQUENCY.find(ch) not in
                           range(_GUARD_FROM)}))


def _keyword_screens(keywords: Sequence[str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """(separator, regex) pairs finding `word:` / `word =` / `"word": ` / `\\"word\\": ` in
    lower-cased text read backwards, where each regex starts with its separator: a literal,
    which `re` searches for fast (forwards, the words would be alternatives: several
    nanoseconds per character)."""
    if not keywords:
        return ()
    words = "|".join(_backwards(k) for k in sorted(set(keywords)))
    # a quote may be escaped (JSON text inside JSON text): read backwards, backslashes after it
    # spaces may be escaped (`\\n`): read backwards, the backslashes come after the letter
    return tuple((sep, re.compile(rf"{re.escape(sep)}(?:\s|[nrt]\\+)*[\"']?\\*(?:{words})"))
                 for sep in ":=")


def _backwards(keyword: str) -> str:
    """A regex of `keyword` read backwards. A `\\u` escape in it (a name JSON escapes:
    `contrase\\u00f1a`) stands for any, in either case, and after any backslashes (one
    level down in JSON inside JSON its backslash is escaped again)."""
    parts = _U_ESCAPE_IN_KEYWORD.split(keyword)  # escapes at the odd places
    return "".join(r"[0-9a-f]{4}u\\+" if i % 2 else re.escape(part[::-1])
                   for i, part in reversed(list(enumerate(parts))))


_U_ESCAPE_IN_KEYWORD = re.compile(r"(\\u[0-9a-f]{4})")


#: how a rule that passed its needles is checked: its screen and pattern; its keyword screens
#: (in Python); or not at all, as Hyperscan found its keywords
_PATTERN, _KEYWORDS, _KEYWORD_FOUND = range(3)
_Survivor = tuple[RedactionRule, int, tuple[tuple[str, re.Pattern[str]], ...]]


class Scanner:
    """The pattern rules of a redactor, prepared for screening and scanning."""

    def __init__(self, rules: Sequence[RedactionRule], fast: bool = True) -> None:
        """`fast`: screen with Hyperscan where it is installed (`_redact_fast`); a scanner
        made for one text's candidate rules skips its ~15 ms compilation."""
        self.rules = tuple(rules)
        self.min_length = min((r.min_length for r in self.rules), default=1 << 62)
        self._plans = [(rule, frozenset(rule.needles), _keyword_screens(rule.keywords))
                       for rule in self.rules]
        self._screens = {rule: screens for rule, _, screens in self._plans if screens}
        #: the shortest `min_run` of the rules that have one: text without such a run skips them
        self._min_run = min((r.min_run for r in self.rules if r.min_run), default=0)
        # every needle once, with its guard characters; a needle that is one rare character is
        # its own guard and needs no search of its own, nor does one whose rules all have a
        # screen: one search of the screen costs less than one per needle
        needles = {n: _guards(n) for r in self.rules for n in r.needles}
        self._guard_chars = "".join(sorted({c for g in needles.values() for c in g}))
        unscreened = {n for r in self.rules if r.screen_regex is None for n in r.needles}
        self._needles = tuple((n, frozenset(g), n == g or n not in unscreened)
                              for n, g in needles.items())
        # a needle of one character is a memchr: cheaper than a match Hyperscan reports
        self._single = tuple(n for n in needles if len(n) == 1)
        self._fast = fast_screen(
            tuple(n for n in needles if len(n) > 1),
            tuple((i, rule.keywords) for i, (rule, _, screens) in enumerate(self._plans)
                  if screens)) if fast else None
        #: the rules left by the needles and keywords Hyperscan found, by what it found
        self._fast_survivors: dict[tuple[frozenset[int], frozenset[str]], list[_Survivor]] = {}

    def candidates(self, text: str) -> list[RedactionRule]:
        """The rules that can match somewhere in `text` (a rule without keywords: that does
        match, as its pattern is the last check)."""
        hits = self._fast.scan(text) if self._fast is not None else None
        if hits is None:
            survivors = self._survivors_in_python(text)
        else:
            singles = frozenset(n for n in self._single if n in text)
            known = self._fast_survivors.get((hits, singles))
            survivors = self._survivors_of_hits(hits, singles) if known is None else known
        found = []
        seen: dict[str, bool] = {}
        backwards: str | None = None
        runs = None
        for rule, how, keyword_screens in survivors:
            if how == _PATTERN and rule.screen_regex is not None and \
                    not _matches(rule.screen_regex, text, seen):
                continue
            if rule.min_run:
                if runs is None:
                    runs = has_run(text, self._min_run)
                if not runs:
                    continue
            if how == _PATTERN:
                if _named(rule, text) if isinstance(rule, FieldTextRule) else \
                        _matches(rule.regex, text, seen):
                    found.append(rule)
            elif how == _KEYWORD_FOUND:
                found.append(rule)
            else:
                if backwards is None:
                    backwards = _caseless(text)[::-1]
                if any(sep in text and _matches(screen, backwards, seen)
                       for sep, screen in keyword_screens):
                    found.append(rule)
        return found

    def _survivors_in_python(self, text: str) -> list[_Survivor]:
        """The rules whose needles `text` holds, found with substring searches."""
        absent = {c for c in self._guard_chars if c not in text}  # memchr each, near free
        present = {n for n, guards, guards_suffice in self._needles
                   if absent.isdisjoint(guards) and (guards_suffice or n in text)}
        return [(rule, _KEYWORDS if screens else _PATTERN, screens)
                for rule, needles, screens in self._plans
                if not needles or not needles.isdisjoint(present)]

    def _survivors_of_hits(self, hits: frozenset[int], singles: frozenset[str]
                           ) -> list[_Survivor]:
        """The rules whose needles (and keywords, where Hyperscan decided them) were found,
        remembered: most texts give one of a few answers."""
        assert self._fast is not None
        present = singles | {self._fast.needles[i] for i in hits
                             if 0 <= i < len(self._fast.needles)}
        decided = self._fast.keyword_rules if UNDECIDED not in hits else frozenset()
        keywords_found = {self._fast.keyword_ids[i] for i in hits
                          if i in self._fast.keyword_ids}
        survivors = []
        for index, (rule, needles, screens) in enumerate(self._plans):
            if needles and needles.isdisjoint(present):
                continue
            if not screens:
                survivors.append((rule, _PATTERN, screens))
            elif index not in decided:
                survivors.append((rule, _KEYWORDS, screens))
            elif index in keywords_found:
                survivors.append((rule, _KEYWORD_FOUND, screens))
        if len(self._fast_survivors) > 1_000:
            self._fast_survivors.clear()
        self._fast_survivors[(hits, singles)] = survivors
        return survivors

    def find(self, s: str) -> list[tuple[int, int, str]]:
        """(start, end, rule name) of each secret in `s`, without overlaps (the rule listed
        first wins a tie) and never inside an existing placeholder."""
        rules = self.candidates(s)
        if not rules:
            return []
        # (start, -end, rule order, rule name, where the secret's name starts)
        found: list[tuple[int, int, int, str, int]] = []
        for order, rule in enumerate(rules):
            if len(s) < rule.min_length:
                continue
            screens = self._screens.get(rule)
            matches = _seeded(rule.regex, screens, s) if screens else \
                _named_matches(rule, s) if isinstance(rule, FieldTextRule) else \
                rule.regex.finditer(s)
            found += _taken(rule, matches, s, order)
        if not found:
            return []
        if "<secret:" in s:  # keeps redaction idempotent, whatever a user pattern matches
            taken = [m.span() for m in PLACEHOLDER.finditer(s)]
            found = [f for f in found if not any(f[0] < b and -f[1] > a for a, b in taken)]
        found.sort()
        out: list[tuple[int, int, str]] = []
        done = 0
        for start, negative_end, _, name, named_at in found:
            # a name inside a secret taken already is a word of that secret (`"password: [\""`
            # is one), not the start of another: a value it seems to open is none
            if start >= done and not _within(named_at, out):
                out.append((start, -negative_end, name))
                done = -negative_end
        return out


def _taken(rule: RedactionRule, matches: Iterable[re.Match[str]], s: str, order: int
           ) -> list[tuple[int, int, int, str, int]]:
    """(start, -end, rule order, rule name, where the secret's name starts) of each secret
    `rule`'s matches (in order) take: a value, or each string of an object or array after a
    secret's name. An object whose name is inside a value (`"api_key": "password=[..."`)
    may be none: it hides no object after it from that one's own name (the caller drops
    what a name inside a secret it keeps opens)."""
    group = "secret" if "secret" in rule.regex.groupindex else 0
    opens = "open" in rule.regex.groupindex
    names_quoted = "kq" in rule.regex.groupindex  # the rule tells a quoted name from a word
    out: list[tuple[int, int, int, str, int]] = []
    strings: TextStrings | None = None
    # without apostrophes every unescaped `"` of JSON or a repr ends or starts a string, so
    # a name with one after it is a string's whole (whichever string the name is in ends
    # there): no strings need finding
    apostrophes = "'" in s
    text_structured = _JSON_OR_REPR.match(s) is not None
    words = rule.regex.pattern.startswith(NAME_START)  # a name is a word, not part of one
    scanned = taken = -1  # where the last object scanned ends (nested names are inside it),
    for m in matches:  # ... and the last value taken
        if words and (_after_a_word_escape(s, m.start()) or
                      _at_an_escapes_letter(s, m.start())):
            continue
        ends = len(s)  # where what follows the name ends: the string the name is in, if any
        level = None  # ... that string
        quotes = None  # how an object's quotes are escaped, if not as the name's are
        structured = text_structured  # whether what the object is part of is JSON or a repr
        if names_quoted and (m.group("quote") or (opens and m.start("open") >= 0)) and \
                (apostrophes or m.group("kq") != "" or s[m.end("kq")] != '"'):
            strings = TextStrings(s) if strings is None else strings
            inside, around = strings.around(m.start())
            if inside is not None and m.group("kq") is not None \
                    and m.start("kq") == inside.closes:
                inside = around  # the name is its string's whole: what follows it is in the
                # string around that one, if any (`'{"password": "x"}'`)
            if inside is not None:
                # else a name in a string (unquoted, or with a quote after it that is not the
                # string's closing one: `"password'='x"`) is a word of it. Either way what
                # follows it ends with the string (`'... password: ', 'x'`: the quote closes
                # it; `'password: ["'`: the bracket opens nothing past it), and is read as the
                # string alone would be (`"password: {\"a\": \"x\"}"`: one level down)
                ends, level = inside.closes, inside
                if m.group("quote") and m.start("quote") >= ends:
                    continue  # the quote after the name closes the string the name is in
                quotes = inside.inner_quotes()
                structured = _JSON_OR_REPR.match(s, inside.body) is not None
        if opens and m.start("open") >= 0:  # a secret's name before an object
            if m.start("open") < scanned:
                continue  # its strings are the outer object's already
            values, reach = string_values(s if ends == len(s) else s[:ends],
                                          m.start("open"), len(m.group("kq") or ""),
                                          quotes=quotes, structured=structured)
            out += [(start, -end, order, rule.name, m.start()) for start, end in values]
            if values and m.start() >= taken:  # else it may be none (its name a word of a
                scanned = reach  # value or of a string), and must hide no object after it
            continue
        start, end = m.span(group)
        end = min(end, ends)  # a value quoted inside a string runs on no further than it
        # (an unquoted one stops at any quote)
        if text_structured and names_quoted and "\\" in s[start:end]:
            # nor does an unquoted one run over a line break or tab JSON or a repr escaped
            # (`password: x\nuser: ann`), or a quoted one after a name in a string over a
            # line break (`'password: "\npassword: "x'`), where the string alone ends it; cut
            # short, it is no value, as there
            if m.group("quote"):
                space = _escaped_space(s, start, end, level, ESCAPED_LINE_BREAK) \
                    if level is not None else None
            else:
                strings = TextStrings(s) if strings is None else strings
                space = _escaped_space(s, start, end, strings.around(m.start())[0])
            if space is not None:
                if space - start < _SHORTEST_VALUE:
                    continue
                end = space
        if start < end:
            out.append((start, -end, order, rule.name, m.start()))
            taken = max(taken, end)
    return out


_SHORTEST_VALUE = 6  # `_redact_rules._VALUE`


def _escaped_space(s: str, start: int, end: int, inside: TextString | None,
                   escapes: re.Pattern[str] = ESCAPED_SPACE) -> int | None:
    """`escaped_at` at the level of the string `inside` (the text's own, if None)."""
    return escaped_at(s, start, end, 1 if inside is None else inside.factor, escapes)


#: how JSON text, a repr, or JSON text inside JSON text starts
_JSON_OR_REPR = re.compile(r"\s*[\[{\"]")


def _within(at: int, spans: list[tuple[int, int, str]]) -> bool:
    """Whether `at` lies inside one of `spans` (sorted, not overlapping)."""
    i = bisect.bisect_right(spans, at, key=lambda span: span[0]) - 1
    return i >= 0 and spans[i][0] <= at < spans[i][1]


#: how far before its keyword's last word a keyword rule's match may start (`api_` of
#: `api_key`), and how much of its value a first search looks at (a quoted value that runs on
#: past it is matched again where it starts, without this bound)
_LEAD, _WINDOW = 32, 256
_OPENS_QUOTE = re.compile(rf"{GAP}(\\*)([\"'])")


def _seeded(regex: re.Pattern[str], screens: tuple[tuple[str, re.Pattern[str]], ...],
            s: str) -> list[re.Match[str]]:
    """The matches of a keyword rule, searched for only where its keyword screens matched
    (a case-insensitive regex of alternatives run over all of `s` would cost far more)."""
    backwards = _caseless(s)[::-1]
    if len(backwards) != len(s):  # lower-casing changed lengths: search all, each match
        return list(_overlapping(regex, s))  # (another's value may hold a name)
    n = len(s)
    group = "secret" if "secret" in regex.groupindex else 0
    found: dict[int, re.Match[str]] = {}
    for separator, screen in screens:
        if separator not in s:
            continue
        for seed in screen.finditer(backwards):
            for m in _around(regex, s, n - seed.end(), n - seed.start(), group):
                # another keyword's search may have seen less of this match's value (its
                # window ends sooner): the longest is the one that saw all of it
                if m.start() not in found or m.end() > found[m.start()].end():
                    found[m.start()] = m
    return [found[k] for k in sorted(found)]


def _caseless(text: str) -> str:
    """`text` lower-cased as `re` compares caselessly, a character for a character:
    `str.lower` makes two of U+0130 (`İ`), which `re` takes for `i`."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.replace("\u0130", "i").lower()


def _overlapping(regex: re.Pattern[str], s: str) -> Iterator[re.Match[str]]:
    """The matches of `regex` starting at each position, not only after the last one."""
    at = 0
    while (m := regex.search(s, at)) is not None:
        yield m
        at = m.start() + 1


def _around(regex: re.Pattern[str], s: str, word_start: int, after_separator: int,
            group: str | int) -> list[re.Match[str]]:
    """The matches that take in the keyword at `word_start`, up to its own: the first may be
    another keyword's, whose value runs on over this one (`password=abc...password: "x y"`);
    overlaps are settled by the caller."""
    n, lead = len(s), max(0, word_start - _LEAD)
    window = min(n, after_separator + _WINDOW)
    if window < n and _quoted_past(s, after_separator, window):
        # a quoted value the window cuts (a cookie header of short words, none a value on
        # its own): matched where a match may start, without the window
        candidates: Iterator[re.Match[str] | None] = (
            regex.match(s, start) for start in range(lead, word_start + 1))
    else:
        candidates = _searched(regex, s, lead, word_start, window)
    out = []
    for m in candidates:
        if m is None or m.end() <= word_start:
            continue  # none, or another keyword's match, ended before this one
        out.append(m)
        if m.start(group) > word_start:
            break  # the keyword is before the value: this keyword's own match
    return out


def _searched(regex: re.Pattern[str], s: str, at: int, word_start: int, window: int
              ) -> Iterator[re.Match[str]]:
    """The matches starting from `at` to `word_start`, searched for up to `window`."""
    while (m := regex.search(s, at, window)) is not None and m.start() <= word_start:
        at = m.start() + 1
        if m.end() >= window < len(s):
            m = regex.match(s, m.start()) or m  # the value may go on past the window
        yield m


def _quoted_past(s: str, after_separator: int, window: int) -> bool:
    """Whether a quoted value opens after the separator and runs on past `window`."""
    quote = _OPENS_QUOTE.match(s, after_separator)
    if quote is None:
        return False
    escapes = len(quote.group(1))
    closing = string_end(s, quote.end(), quote.group(2), escapes)
    return closing is None or closing + escapes >= window


def _named_matches(rule: FieldTextRule, s: str) -> Iterator[re.Match[str]]:
    """The matches of a field regex's text rule whose name the field regex finds something
    in. Another name's value is searched too (`"note": "acme-ref=..."`; a value that turns
    out to be none, `'acme-ref=\''` closing its string, may seem to hold the next name), so
    the search goes on after each name, not after its value."""
    assert rule.names is not None
    at = 0
    while (m := rule.regex.search(s, at)) is not None:
        if _at_an_escapes_letter(s, m.start()):
            at = m.start() + 1  # the name starts after it (`\\\\nX-Acme-Ref`, a level down)
            continue
        name = m.group("fname")
        parted = _parted(name) if "\\" in name else None
        if parted is not None:  # the name ends at, or starts after, that escape
            at = m.start() + parted
            continue
        if rule.names.search(_unescaped(name)):
            yield m
        at = m.end("fname")


#: a `\\u` escape in a name, its backslash escaped again or not
_U_ESCAPE = re.compile(r"\\+u([0-9a-fA-F]{4})")


def _unescaped(name: str) -> str:
    """A name as a dict key holds it: its `\\u` escapes (JSON writes characters that are
    not ASCII so) decoded, a pair of surrogates into one character."""
    if "\\" not in name:
        return name
    units = _U_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), name)
    return units.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


_WORD_START, _IN_A_WORD = re.compile(r"[^\W\d]"), re.compile(r"[\w.-]")


def _parted(name: str) -> int | None:
    """Where the first `\\u` escape in `name` of a character no word (no such name) holds
    ends, if any: `\\u2014x-acme-ref` is a dash, then the name."""
    for m in _U_ESCAPE.finditer(name):
        char = _unescaped(name[m.start():m.end()])
        if not (_IN_A_WORD if m.start() else _WORD_START).fullmatch(char):
            return m.end()
    return None


def _at_an_escapes_letter(s: str, at: int) -> bool:
    """Whether a name found at `at` starts with the letter of an escape (`\\\\n`, a line
    break in JSON inside JSON: `NAME_START` excludes only one backslash before it)."""
    return at > 0 and s[at - 1] == "\\" and s[at] in "nrtbf"


#: what stands before a name written after a `\\u` escape
_U_ESCAPE_BEFORE = re.compile(r"\\u([0-9a-fA-F]{4})")
_JOINS_A_WORD = re.compile(r"[\w.<-]")


def _after_a_word_escape(s: str, at: int) -> bool:
    """Whether the name at `at` goes on a word from before it: a `\\u` escape of a word
    character (`\\u00e9x-acme-ref` is `éx-acme-ref`), which `NAME_START` cannot tell."""
    m = _U_ESCAPE_BEFORE.fullmatch(s, at - 6, at) if at >= 6 else None
    return m is not None and _JOINS_A_WORD.match(chr(int(m.group(1), 16))) is not None


def _named(rule: FieldTextRule, text: str) -> bool:
    return next(_named_matches(rule, text), None) is not None


def _matches(regex: re.Pattern[str], text: str, seen: dict[str, bool]) -> bool:
    key = "\x00re:" + regex.pattern  # rules may share a screen, or screen with another's rule
    hit = seen.get(key)
    if hit is None:
        hit = seen[key] = regex.search(text) is not None
    return hit
