"""Whether a step can hold a secret, answered from its canonical JSON in one Hyperscan pass.

Redaction walks a step's encoded trees, gathers their new text and screens it
(`Redactor.redact_trees`): about 30 us for a 3 KB chat step, most of it Python walking the
trees. The recorder makes the step's canonical JSON anyway, and most steps hold no secret.
One scan of those bytes that finds nothing any rule needs proves that redaction would change
nothing, and the walk is skipped.

The scan must answer "maybe" whenever the walk could change something. JSON escapes a string
character by character, so whatever a string holds appears in the bytes in its JSON form:

- each pattern rule's needles, in their JSON form; for a rule with keywords, the keyword's
  context, with the quotes and whitespace between keyword and separator in the forms orjson
  writes them (`\\"`, `\\n`, `\\u001c`, raw UTF-8 for the rest);
- each field rule's regex, when it is made only of ASCII letters, digits and the few other
  characters JSON leaves as they are (the default rule, `fields=[...]` names): it is searched
  in the whole JSON, keys and all;
- a tagged value whose text the walk must decode first (bytes, a string with NUL, an
  unencodable value's description): its tag;
- the characters that `str.lower()` or case-insensitive `re` equate with ASCII letters.

Anything else found is a false alarm, and the walk decides as before. A rule the scan cannot
stand in for (a pattern without needles or keywords, a field regex outside that subset), or
no Hyperscan, makes the answer always "maybe".
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Sequence

import orjson

from agentreplay_core._codec_base import TAG
from agentreplay_core._redact_fast import (
    Compiled,
    alternatives,
    compiled,
    hex_pattern,
    hyperscan,
    keyword_pattern,
)
from agentreplay_core._redact_rules import URL_PASSWORD, RedactionRule
from agentreplay_core._redact_walk import OPAQUE_TAGS, PLAIN_TAGS

#: characters that lower-case to ASCII (U+0130, U+212A) or that case-insensitive `re` matches
#: to an ASCII letter (also U+0131, U+017F); a test checks every code point
FOLDS_TO_ASCII = ("\u0130", "\u0131", "\u017f", "\u212a")
#: how a tagged value starts in canonical JSON (sorted keys: the tag comes first)
_TAG_START = b'"' + TAG.encode() + b'":"'
_TAG_ID = 0
_SAFE_TAGS = frozenset(t.encode() for t in PLAIN_TAGS | OPAQUE_TAGS)
#: alarms after which a batch scan stops (each is a call back into Python, with the GIL)
_MOST_ALARMS = 16
_SINGLEMATCH = hyperscan.HS_FLAG_SINGLEMATCH if hyperscan is not None else 0
#: a field regex whose meaning on JSON bytes is its meaning on a key: ASCII letters, digits,
#: `_`, `-`, groups, alternatives, optional parts, classes of those, and escaped punctuation
#: that JSON leaves as it is (all but `"` and `\`)
_SAFE_FIELD_REGEX = re.compile(
    r"(?:[A-Za-z0-9_|?*+()-]|\(\?:|\\[ !#$%&'()*+,./:;<=>?@\[\]^_`{|}~-]"
    r"|\[[A-Za-z0-9_\\-]+\])*\Z")


def _json_form(text: str) -> bytes:
    """`text` as it appears inside a JSON string written by orjson."""
    return orjson.dumps(text)[1:-1]


def _field_pattern(rule: RedactionRule) -> bytes | None:
    """The rule's regex, anywhere: in values too (words like "secret" in prose raise a few
    false alarms; checking that a match lies in a key cost more scan time than they do)."""
    text = rule.regex.pattern
    if rule.regex.flags & ~(re.IGNORECASE | re.UNICODE):
        return None
    text = text.removeprefix(r"\A").removesuffix(r"\Z")  # keys sit inside the JSON
    return text.encode() if _SAFE_FIELD_REGEX.match(text) else None


#: the shapes of default rules in canonical JSON, where their needles are common (URLs):
#: each a superset of the JSON form of every match (classes let `\\` escapes through)
_JSON_SHAPES = {URL_PASSWORD: rb"://[^ :/@\"'<>]+:[^ /@\"'<>]+@"}


def _rule_patterns(rule: RedactionRule) -> list[tuple[bytes, bool]] | None:
    """(pattern, caseless) of what any change `rule` makes leaves in the JSON, or None."""
    if rule.is_field_rule:
        field = _field_pattern(rule)
        return None if field is None else [(field, True)]
    shape = _JSON_SHAPES.get(rule.regex.pattern)
    if shape is not None:
        return [(shape, False)]
    keywords = keyword_pattern(rule.keywords, _json_form)
    if keywords is not None:
        return [(keywords, True)]
    if not rule.needles:
        return None
    try:
        return [(hex_pattern(_json_form(n)), False) for n in rule.needles]
    except orjson.JSONEncodeError:  # a lone surrogate: never in canonical JSON as text
        return None


class JsonScreen:
    """The JSON screen for one set of rules."""

    def __init__(self, database: Compiled,
                 patterns: Sequence[tuple[bytes, int]] = ()) -> None:
        self._database = database
        #: (expression, flags) of `database`, for the batch screen's database
        self._patterns = tuple(patterns)
        self._every: Compiled | bool | None = False  # False: not compiled yet

    def may_hold_secrets(self, canonical: Sequence[bytes]) -> bool:
        """False only if redacting the trees whose canonical JSON is `canonical` changes
        nothing (one scan of them all: a call costs about what a scan of 2 KB does)."""
        data = canonical[0] if len(canonical) == 1 else b" ".join(canonical)
        alarms: list[int] = []

        def found(match_id: int, _start: int, end: int, *_: object) -> None:
            if _alarms(data, match_id, end):
                alarms.append(match_id)

        # a failed scan proves nothing: walk the trees
        return not self._database.scanned(data, found) or bool(alarms)

    def screen_each(self, pieces: Sequence[bytes]) -> list[bool | None]:
        """`may_hold_secrets([piece])` of each piece, from one scan of them all; None for a
        piece the scan could not decide (`may_hold_secrets` decides it then).

        A scan releases the GIL, and the thread that takes it meanwhile (the agent's) keeps it
        until the scanning thread forces a switch back: each scan costs the agent a switch of
        threads, more than the scan itself. One scan for many steps costs one.

        The pieces are scanned joined by spaces, with a database that reports every match
        (the single-match flags of the step's screen would hide a later piece's match behind an
        earlier one's). Every pattern matches the same bytes wherever they stand (no anchors,
        no assertions), so each piece gets every match it would alone; a match across two
        pieces is only a false alarm, for the piece its last byte is in. Matches come in no
        guaranteed order: after too many alarms the scan stops, and the pieces it did not
        flag are left undecided.
        """
        every = self._every_match()
        if every is None or not pieces:
            return [None] * len(pieces)
        data = b" ".join(pieces)
        starts = list(itertools.accumulate((len(p) + 1 for p in pieces[:-1]), initial=0))
        flagged: set[int] = set()
        halted = False

        def found(match_id: int, _start: int, end: int, *_: object) -> bool:
            nonlocal halted
            if _alarms(data, match_id, end):
                # the piece holding the match's last byte (a separator: the piece before it)
                flagged.add(bisect.bisect_right(starts, end - 1) - 1)
                halted = len(flagged) >= _MOST_ALARMS
            return halted

        if not every.scanned(data, found):
            return [None] * len(pieces)
        undecided = None if halted else False
        return [True if i in flagged else undecided for i in range(len(pieces))]

    def _every_match(self) -> Compiled | None:
        if self._every is False:
            self._every = compiled([(e, f & ~_SINGLEMATCH) for e, f in self._patterns]) \
                if self._patterns and hyperscan is not None else None
        return self._every if isinstance(self._every, Compiled) else None


def _alarms(data: bytes, match_id: int, end: int) -> bool:
    """Whether a match is one the walk must look at: any but a tag whose value the walk
    leaves as it is."""
    return match_id != _TAG_ID or data[end:data.find(b'"', end)] not in _SAFE_TAGS


@functools.lru_cache(maxsize=16)
def json_screen(rules: tuple[RedactionRule, ...]) -> JsonScreen | None:
    """The screen for `rules`, or None if one of them has nothing it could look for (or
    Hyperscan is missing): every step is walked then. Shared by redactors with equal rules."""
    if hyperscan is None:
        return None
    single, caseless = hyperscan.HS_FLAG_SINGLEMATCH, hyperscan.HS_FLAG_CASELESS
    # every tag is reported, as any of them may be one whose value the walk decodes
    patterns = [(hex_pattern(_TAG_START), 0),
                (alternatives(c.encode() for c in FOLDS_TO_ASCII), single)]
    for rule in rules:
        found = _rule_patterns(rule)
        if found is None:
            return None
        patterns += [(p, single | caseless if c else single) for p, c in found]
    database = compiled(patterns)
    return None if database is None else JsonScreen(database, patterns)
