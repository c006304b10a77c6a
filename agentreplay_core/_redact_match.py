"""Does a live request match a recorded one whatever the redaction rules were?

Replay redacts each request and looks its key up, so a request holding a secret matches only
if replay redacts it exactly as the recorder did. Rules change (a newer agentreplay finds a
quoted passphrase whole where an older one took its first word; a laptop lacks production's
`fields=`), and then a request that is the same as the recorded one, secret and all, would
diverge. Here the recorded request is compared with the live one *before* redaction: they
match when they are equal except where the recording holds a placeholder, and the live text
there is the secret the placeholder was made of (its keyed digest is the placeholder's). That
holds under any rules, and only with the redaction key the run was recorded with.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterator
from typing import Any

from agentreplay_core._redact_rules import PLACEHOLDER

#: candidate secrets tried per request before giving up (a long prompt with many places a
#: secret could end, and adjacent placeholders, could otherwise take a while)
_BUDGET = 20_000


class Likeness(enum.IntEnum):
    """How a live request compares with a recorded one (ordered: worst last)."""

    SAME = 0  #: equal, each placeholder's text its secret
    SECRETS_DIFFER = 1  #: equal but for the text at placeholders, which is not their secret
    DIFFERENT = 2


#: whether a candidate text is the secret of a placeholder digest (12 hex digits); the flag
#: says the text is a whole string, or a whole string of JSON text (what a secret field's
#: value can be)
Verifier = Callable[[str, str, bool], bool]


def compare_redacted(recorded: Any, live: Any, is_secret: Verifier) -> Likeness:
    """How `live` (an encoded request, not redacted) compares with `recorded` (an encoded
    request as stored, redacted)."""
    return _Comparison(is_secret).tree(recorded, live)


class _Comparison:
    def __init__(self, is_secret: Verifier) -> None:
        self._is_secret = is_secret
        self._budget = _BUDGET

    def tree(self, recorded: Any, live: Any) -> Likeness:
        if type(recorded) is str:
            if type(live) is not str:
                return Likeness.DIFFERENT
            return self.text(recorded, live)
        if type(recorded) is not type(live):
            return Likeness.DIFFERENT
        if type(recorded) is dict:
            return self._mapping(recorded, live)
        if type(recorded) is list:
            if len(recorded) != len(live):
                return Likeness.DIFFERENT
            return self._all(zip(recorded, live, strict=True))
        return Likeness.SAME if recorded == live else Likeness.DIFFERENT

    def _all(self, pairs: Any) -> Likeness:
        worst = Likeness.SAME
        for recorded, live in pairs:
            worst = max(worst, self.tree(recorded, live))
            if worst is Likeness.DIFFERENT:
                break
        return worst

    def _mapping(self, recorded: dict[str, Any], live: dict[str, Any]) -> Likeness:
        if len(recorded) != len(live):
            return Likeness.DIFFERENT
        if recorded.keys() == live.keys():  # the common case
            return self._all((value, live[k]) for k, value in recorded.items())
        # a key can hold a secret too: the recorded one is then a placeholder's text
        only_recorded = [k for k in recorded if k not in live]
        only_live = [k for k in live if k not in recorded]
        worst = self._all((recorded[k], live[k]) for k in recorded if k in live)
        for key in only_recorded:
            if worst is Likeness.DIFFERENT:
                break
            best, paired = Likeness.DIFFERENT, ""
            for other in only_live:
                likeness = max(self.text(key, other), self.tree(recorded[key], live[other]))
                if likeness < best:
                    best, paired = likeness, other
            if best is not Likeness.DIFFERENT:
                only_live.remove(paired)
            worst = max(worst, best)
        return worst

    def text(self, recorded: str, live: str) -> Likeness:
        if recorded == live:
            return Likeness.SAME
        if "<secret:" not in recorded:
            return Likeness.DIFFERENT
        literals, placeholders = _parts(recorded)
        if not placeholders or _spans(literals, live) is None:
            return Likeness.DIFFERENT
        if self._fill(literals, placeholders, live, 0, len(literals[0])):
            return Likeness.SAME
        return Likeness.SECRETS_DIFFER

    def _fill(self, literals: list[str], placeholders: list[tuple[str, str, str]], live: str,
              index: int, start: int) -> bool:
        """Whether placeholders from `index` on, the first at `start` in `live`, can each be
        given its secret with the literals between them in place (backtracking over where
        each secret ends)."""
        if index == len(placeholders):
            return start == len(live)
        written, _, digest = placeholders[index]
        after = literals[index + 1]
        last = index == len(placeholders) - 1
        for end in _ends(live, start, after, last):
            self._budget -= 1
            if self._budget < 0:
                return False
            secret = live[start:end]
            whole = (start == 0 and end == len(live)) or (
                live[start - 1:start] == '"' and live[end:end + 1] == '"')
            if (secret == written or self._is_secret(secret, digest, whole)) and self._fill(
                    literals, placeholders, live, index + 1, end + len(after)):
                return True
        return False


def _parts(recorded: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The text around the placeholders of `recorded`, and each placeholder (as written, its
    rule, its digest)."""
    literals: list[str] = []
    placeholders: list[tuple[str, str, str]] = []
    done = 0
    for m in PLACEHOLDER.finditer(recorded):
        literals.append(recorded[done:m.start()])
        placeholders.append((m.group(0), m.group(1), m.group(2)))
        done = m.end()
    literals.append(recorded[done:])
    return literals, placeholders


def _spans(literals: list[str], live: str) -> list[tuple[int, int]] | None:
    """Where the secrets stand in `live` when the literals do, in order, the first at its
    start, the last at its end, with at least one character between each two (a secret is
    never empty); None if they cannot. Placing each middle literal leftmost is enough to
    know."""
    first, final = literals[0], literals[-1]
    if not live.startswith(first) or len(live) < len(first) + len(final) + len(literals) - 1:
        return None
    spans: list[tuple[int, int]] = []
    position = len(first)
    for literal in literals[1:-1]:
        found = live.find(literal, position + 1)
        if found < 0:
            return None
        spans.append((position, found))
        position = found + len(literal)
    end = len(live) - len(final)
    if not live.endswith(final) or end < position + 1:
        return None
    spans.append((position, end))
    return spans


def _ends(live: str, start: int, after: str, last: bool) -> Any:
    """Where a secret starting at `start` may end: before each place `after` follows (at the
    very end for the last placeholder)."""
    if last:
        end = len(live) - len(after)
        if end > start and live.endswith(after):
            yield end
        return
    if not after:  # two placeholders side by side: any split
        yield from range(start + 1, len(live))
        return
    found = live.find(after, start + 1)
    while found >= 0:
        yield found
        found = live.find(after, found + 1)


def masked(recorded: Any, live: Any, mask: Callable[[str, str], str]) -> Any:
    """`live` with the text where `recorded` holds a placeholder replaced by `mask(text,
    rule)`, where the two line up: a divergence report shows a request so when it is a
    recorded one but for its secrets, even those the rules in use do not know."""
    if type(recorded) is str and type(live) is str and "<secret:" in recorded:
        literals, placeholders = _parts(recorded)
        spans = _spans(literals, live)
        if spans is None:
            return live
        pieces, done = [], 0
        for (start, end), (_, rule, _) in zip(spans, placeholders, strict=True):
            pieces += [live[done:start], mask(live[start:end], rule)]
            done = end
        return "".join([*pieces, live[done:]])
    if type(recorded) is dict and type(live) is dict:
        return {k: masked(recorded[k], v, mask) if k in recorded else v for k, v in live.items()}
    if type(recorded) is list and type(live) is list and len(recorded) == len(live):
        return [masked(r, v, mask) for r, v in zip(recorded, live, strict=True)]
    return live


def secret_forms(text: str, whole: bool, redact_text: Callable[[str], str]) -> Iterator[str]:
    """What a placeholder's digest may have been made of, for `text` found where it stands,
    cheapest first: the text itself; in JSON text, the string it escapes (a tool call's
    arguments are redacted as the value they parse to); and, for a whole value, either with
    the pattern secrets in it replaced (a secret field's value is hashed so)."""
    yield text
    forms = [text]
    if "\\" in text:
        try:
            unescaped = json.loads(f'"{text}"')
        except ValueError:
            pass
        else:
            if type(unescaped) is str and unescaped != text:
                forms.append(unescaped)
                yield unescaped
    if whole:
        for form in forms:
            inner = redact_text(form)
            if inner != form:
                yield inner
