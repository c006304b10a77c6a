"""Secret redaction: secrets become stable placeholders before anything is stored.

The recorder passes every step's encoded input and output through the store's `Redactor`
(and `store.record` the run's name and metadata), so what reaches PostgreSQL, the spool, the
JSONL files and exports never holds a secret, and the hash chain is computed over what is
stored. The player redacts each replayed request the same way before matching it, so a prompt
that contains an API key still matches its recording.

A secret becomes `<secret:RULE:H>`, `H` the first 12 hex digits of HMAC-SHA-256 of the secret
under the redaction key (see `_redact_key`): the same secret gives the same placeholder, so
match keys and diffs still work, but the placeholder reveals nothing without the key.

Example:
    >>> redactor = Redactor(key=b"k", fields=["x-acme-token"])
    >>> redacted = redactor.redact({"x-acme-token": "hunter2", "q": "weather in Paris"})
    >>> redacted["x-acme-token"] == redactor.placeholder("hunter2", "custom_field")
    True
    >>> redacted["q"]
    'weather in Paris'
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from agentreplay_core._codec import decode, encode
from agentreplay_core._codec_base import Json
from agentreplay_core._redact_json import JsonScreen, json_screen
from agentreplay_core._redact_json_text import JSON_TEXT_KEYS, json_keys, json_strings
from agentreplay_core._redact_key import resolve_key
from agentreplay_core._redact_memo import TextMemo, remembered
from agentreplay_core._redact_rules import (
    DEFAULT_RULES,
    FIELDS_ENV,
    PATTERNS_ENV,
    PLACEHOLDER,
    RedactionRule,
    env_rules,
    field_regex_text_rule,
    field_rule,
    field_text_rule,
)
from agentreplay_core._redact_scan import Scanner
from agentreplay_core._redact_walk import TreeTransform, collect_texts

__all__ = ["FIELDS_ENV", "PATTERNS_ENV", "RedactionRule", "Redactor"]

_DOMAIN = b"agentreplay/redact/v1\x00"
#: what `rules_digest` covers besides the rules: bump it when redaction changes otherwise
_RULES_FORMAT = 1
_MATCH_KEY_DOMAIN = b"agentreplay/redact/match-key/v1\x00"
#: scanners kept for the sets of candidate rules text turned up (a set of one to three rules
#: is typical, and building its scanner costs 15-20 us: more than searching a prompt with it)
_CANDIDATE_SCANNERS = 64


class _RedactWalk(TreeTransform):
    """One redaction of one tree, with the rules its text may match."""

    def __init__(self, redactor: Redactor, scanner: Scanner) -> None:
        self._redactor = redactor
        self._scanner = scanner

    def secret_field(self, key: str) -> str | None:
        return self._redactor.secret_field(key)

    def text(self, s: str) -> str:
        return self._redactor._text(s, self._scanner)

    def secret_text(self, s: str, rule: str) -> str:
        return self._redactor._secret_value(s, rule)

    def json_text(self, s: str) -> str:
        return self._redactor._json_text(s, self._scanner)


def _spliced(text: str, spans: Sequence[tuple[int, int, str]]) -> str:
    """`text` with each (start, end) span replaced by its replacement (`text` itself when
    there are none: callers tell "unchanged" by identity)."""
    if not spans:
        return text
    pieces: list[str] = []
    done = 0
    for start, end, replacement in spans:
        pieces.append(text[done:start])
        pieces.append(replacement)
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


class Redactor:
    """Finds secrets by shape and by field name and replaces them with keyed placeholders.

    Args:
        fields: more dict keys whose values are secrets (exact names, any case), e.g.
            ``["x-acme-token"]``, also written in text before a value (``X-Acme-Token: ...``,
            ``"x-acme-token": "..."``); placeholders say ``custom_field``.
        patterns: more regexes for secrets inside strings (a group named ``secret`` limits
            what is replaced); placeholders say ``custom``.
        rules: more `RedactionRule` objects (your own placeholder names, needles).
        defaults: keep the default rules (API keys of OpenAI, Anthropic, AWS, Google, GitHub,
            Slack, Stripe and Hugging Face, JWTs, bearer tokens, PEM private keys, passwords in
            URLs, ``password=...``-style assignments, and fields named like ``api_key``,
            ``password``, ``secret``, ``authorization``, ``cookie``, ``access_token``).
        key: the redaction key; default ``AGENTREPLAY_REDACTION_KEY``, else the store's HMAC
            key, else a key created once per user in the user config directory.
        key_file: where that per-user key lives (default: platformdirs' user config dir).
    """

    def __init__(
        self,
        *,
        fields: Iterable[str] = (),
        patterns: Iterable[str | re.Pattern[str]] = (),
        rules: Iterable[RedactionRule] = (),
        defaults: bool = True,
        key: bytes | str | None = None,
        key_file: str | os.PathLike[str] | None = None,
    ) -> None:
        chosen = list(DEFAULT_RULES) if defaults else []
        names = [f for f in fields if f]
        if names:  # as dict keys, and written in text
            chosen += [field_rule("custom_field", names), field_text_rule("custom_field", names)]
        chosen.extend(RedactionRule("custom", pattern=p) for p in patterns)
        rules = list(rules)
        chosen.extend(rules)
        # a field is a secret's name in text too (a tool's JSON result, a header dump)
        chosen.extend(field_regex_text_rule(r) for r in rules if r.is_field_rule)
        self.rules: tuple[RedactionRule, ...] = tuple(chosen)
        self._fields = [r for r in self.rules if r.is_field_rule]
        self._scanner = Scanner([r for r in self.rules if not r.is_field_rule])
        self._candidate_scanners: dict[tuple[int, ...], Scanner] = {}
        self._json_screen: JsonScreen | Literal[False] | None = False  # False: not built yet
        self._explicit_key = key.encode() if isinstance(key, str) else key
        self._fallback_key: bytes | None = None
        self._key_file = Path(key_file) if key_file is not None else None
        self._key: bytes | None = None
        self._lock = threading.Lock()
        self._reset_memo()

    def _reset_memo(self) -> None:
        self._texts = TextMemo()
        self._field_memo: dict[str, str | None] = {}
        self._key_memo: dict[str, bool] = {}
        self._json_memo: dict[str, bool] = {}
        self._digests: dict[str, str] = {}

    @classmethod
    def from_env(cls, **options: Any) -> Redactor:
        """The default rules plus `AGENTREPLAY_REDACT_FIELDS` (comma-separated field names)
        and `AGENTREPLAY_REDACT_PATTERNS` (one regex, or a JSON list of regexes).

        Raises:
            ValueError: a pattern in the environment is not a valid regex.
        """
        fields, patterns = env_rules()
        try:
            return cls(fields=[*fields, *options.pop("fields", ())],
                       patterns=[*patterns, *options.pop("patterns", ())], **options)
        except ValueError as exc:
            raise ValueError(f"{exc} (from {PATTERNS_ENV})") from None

    def bound_to_store(self, hmac_key: bytes | None) -> Redactor:
        """A redactor with these rules that falls back to the store's HMAC key (internal)."""
        bound = Redactor.__new__(Redactor)
        bound.__dict__.update(self.__dict__)
        bound._fallback_key = hmac_key
        bound._key = None
        bound._lock = threading.Lock()
        bound._reset_memo()
        return bound

    def __repr__(self) -> str:
        return f"<Redactor {len(self.rules)} rules: {', '.join(r.name for r in self.rules)}>"

    @functools.cached_property
    def rules_digest(self) -> str:
        """12 hex digits naming these rules (names, regexes, flags, with this version's
        handling of JSON text): stored with each run, so that a replay under other rules
        (another agentreplay, other `fields=` or `patterns=`) can say why a request holding a
        secret got another placeholder."""
        described = [[r.name, r.is_field_rule, r.regex.pattern, int(r.regex.flags)]
                     for r in self.rules]
        text = json.dumps([_RULES_FORMAT, sorted(JSON_TEXT_KEYS), described])
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]

    # -- the key and placeholders ---------------------------------------------------------------

    @property
    def key(self) -> bytes:
        """The redaction key (resolved, and a per-user key file created, on first use)."""
        if self._key is None:
            with self._lock:
                if self._key is None:
                    self._key = resolve_key(self._explicit_key, self._fallback_key,
                                            self._key_file)
        return self._key

    def _digest(self, secret: str) -> str:
        digest = self._digests.get(secret)
        if digest is None:
            return remembered(self._digests, secret, self.digest_of(secret))
        return digest

    def digest_of(self, secret: str) -> str:
        """The 12 hex digits of `secret`'s placeholder (not remembered: replay tries many
        candidate texts against a recorded placeholder)."""
        mac = hmac.new(self.key, _DOMAIN + secret.encode("utf-8", "surrogatepass"),
                       hashlib.sha256)
        return mac.hexdigest()[:12]

    def placeholder(self, secret: str, rule: str = "custom") -> str:
        """The placeholder `secret` becomes under the rule named `rule`."""
        return f"<secret:{rule}:{self._digest(secret)}>"

    def rekey(self, match_key: str) -> str:
        """A caller-computed match key of a request that held secrets, keyed: a plain hash of
        a request with a weak password in it could be brute-forced from the stored request."""
        mac = hmac.new(self.key, _MATCH_KEY_DOMAIN + match_key.encode("utf-8", "surrogatepass"),
                       hashlib.sha256)
        return mac.hexdigest()[:32]

    # -- redaction ------------------------------------------------------------------------------

    def redact(self, value: Any) -> Any:
        """`value` with its secrets replaced by placeholders (any value the codec encodes)."""
        if type(value) is str:
            return self.redact_text(value)
        redacted, changed = self.redact_encoded(encode(value, path="value"))
        return decode(redacted) if changed else value

    def redact_text(self, text: str) -> str:
        """`text` with the secrets found by the pattern rules replaced."""
        return self._text(text, self._scanner)

    def redact_pieces(self, pieces: Sequence[str], *, json_text: bool = False) -> list[str]:
        """The pieces of a streamed text (each chunk's delta) redacted as the text they make:
        a secret cut across pieces, which no piece shows whole, is taken out of each of them
        and its replacement put in the piece where it ends. Pieces without a secret come back
        as they were.

        `json_text`: the pieces make JSON (a tool call's streamed arguments). They are then
        redacted as the value they parse to is (a secret field's value whole, the pattern
        rules on each string as decoded: a PEM key's `\\n` is a line break), so that the
        call that reaches the tool matches its step; joined, they are what a tree's
        redaction makes of the text under an arguments key (`_redact_json_text`). Text that
        is no JSON object or array is redacted as text."""
        text = "".join(pieces)
        spans = self._json_spans(text) if json_text else None
        if spans is None:
            spans = [(first, last, self.placeholder(text[first:last], rule))
                     for first, last, rule in self._find(text)]
        if not spans:
            return list(pieces)
        out: list[str] = []
        start = 0
        for piece in pieces:
            end = start + len(piece)
            kept: list[str] = []
            cursor = start
            for first, last, replacement in spans:
                if last <= start or first >= end:
                    continue
                if first > cursor:
                    kept.append(text[cursor:first])
                if last <= end:  # the secret ends in this piece: its replacement goes here
                    kept.append(replacement)
                cursor = max(cursor, min(last, end))
            kept.append(text[cursor:end])
            out.append("".join(kept))
            start = end
        return out

    def _find(self, text: str) -> list[tuple[int, int, str]]:
        return self._scanner.find(text) if len(text) >= self._scanner.min_length else []

    def _json_text(self, s: str, scanner: Scanner) -> str:
        """JSON text redacted as the value it parses to (plain text if it is no JSON)."""
        spans = self._json_spans(s)
        return self._text(s, scanner) if spans is None else _spliced(s, spans)

    def _json_spans(self, text: str) -> list[tuple[int, int, str]] | None:
        """(start, end, replacement) of each secret in JSON text, found in its strings as a
        dict's redaction finds them; None if the text is no JSON."""
        strings = json_strings(text, self.secret_field)
        if strings is None:
            return None
        spans: list[tuple[int, int, str]] = []
        for string in strings:
            starts = string.starts
            if string.field is not None:
                whole = self._secret_value(string.text, string.field)
                if whole != string.text:
                    spans.append((starts[0], starts[-1], json.dumps(whole)[1:-1]))
                continue
            inner = self._json_spans(string.text) if string.under in JSON_TEXT_KEYS else None
            if inner is not None:  # JSON text in the JSON text, as a dict's redaction finds it
                spans.extend((starts[first], starts[last], json.dumps(replacement)[1:-1])
                             for first, last, replacement in inner)
                continue
            # clean strings are memoised: the same strings come again in every prompt
            spans.extend((starts[first], starts[last],
                          self.placeholder(string.text[first:last], rule))
                         for first, last, rule in self._found(string.text, self._scanner))
        return spans

    def may_hold_secrets(self, *canonical: bytes) -> bool:
        """False only if redacting the trees whose canonical JSON is `canonical` would change
        nothing: one Hyperscan pass over the bytes instead of walking the trees (see
        `_redact_json`). True where it cannot tell: then `redact_trees` decides."""
        screen = self._screen()
        return screen is None or screen.may_hold_secrets(canonical)

    def screen_each(self, pieces: Sequence[bytes]) -> list[bool | None] | None:
        """`may_hold_secrets(piece)` of each piece (canonical JSON, a step's input and output
        joined by a space) where one scan of them all decides it, else None for the piece;
        None for all when there is no screen, or a subclass screens in its own way."""
        if type(self).may_hold_secrets is not Redactor.may_hold_secrets:
            return None
        screen = self._screen()
        return None if screen is None else screen.screen_each(pieces)

    def _screen(self) -> JsonScreen | None:
        if self._json_screen is False:
            self._json_screen = json_screen(self.rules)
        return self._json_screen

    def redact_encoded(self, tree: Json) -> tuple[Json, bool]:
        """An encoded tree (as `encode` returns it) redacted, and whether anything changed."""
        (out,), changed = self.redact_trees([tree])
        return out, changed[0]

    def redact_trees(self, trees: Sequence[Json]) -> tuple[list[Json], list[bool]]:
        """Encoded trees (a step's input and output) redacted, and which of them changed.

        Their new text is screened at once (see `_redact_scan`); only if a rule can match, or
        a key names a secret field, are they walked and rewritten.
        """
        scanner = self._scanner
        texts: list[str] = []
        for tree in trees:
            found = collect_texts(tree, scanner.min_length, self._texts.clean, self._key_memo,
                                  self._key_needs_walk, self._json_needs_walk)
            if found is None:
                texts = []
                break
            texts += found
        else:
            if not texts:
                return list(trees), [False] * len(trees)
            candidates = scanner.candidates(texts[0] if len(texts) == 1 else "\x00".join(texts))
            if not candidates:
                self._texts.remember(texts, None)
                return list(trees), [False] * len(trees)
            scanner = self._scanner_of(candidates)
            # a keyword rule's candidates are often prose ("key: ..."): look closer first
            if all(self._text(t, scanner) is t for t in texts):
                return list(trees), [False] * len(trees)
        walk = _RedactWalk(self, scanner)
        out = [walk.walk(tree) for tree in trees]
        return out, [a is not b for a, b in zip(out, trees, strict=True)]

    def _scanner_of(self, candidates: list[RedactionRule]) -> Scanner:
        """A scanner for some of this redactor's rules (they live as long as it does, so
        their ids name them), without Hyperscan: it would take ~15 ms to compile."""
        ids = tuple(map(id, candidates))
        scanner = self._candidate_scanners.get(ids)
        if scanner is None:
            if len(self._candidate_scanners) >= _CANDIDATE_SCANNERS:
                self._candidate_scanners.clear()
            scanner = self._candidate_scanners[ids] = Scanner(candidates, fast=False)
        return scanner

    def _key_needs_walk(self, key: str) -> bool:
        """Whether a dict key names a secret field, holds a secret itself, or is one under
        which JSON text is redacted as JSON (memoised)."""
        return remembered(self._key_memo, key, key in JSON_TEXT_KEYS or (
            self.secret_field(key) is not None) or (
            len(key) >= self._scanner.min_length and self._text(key, self._scanner) is not key))

    def _json_needs_walk(self, key: str, value: Json) -> bool:
        """Whether JSON text under a key in `JSON_TEXT_KEYS` must be walked to be redacted:
        the key itself names a field, or one of the text's keys does (pattern secrets in it
        are found by the screen of all texts, as in any string). Memoised: a call's arguments
        come again in every later prompt."""
        if self.secret_field(key) is not None:
            return True
        if type(value) is not str:
            return False
        known = self._json_memo.get(value)
        if known is None:
            known = remembered(self._json_memo, value, any(
                self.secret_field(inner) is not None for inner in json_keys(value)))
        return known

    def secret_field(self, key: str) -> str | None:
        """The name of the field rule `key` matches, if any."""
        try:
            return self._field_memo[key]
        except KeyError:
            pass
        return remembered(self._field_memo, key,
                          next((r.name for r in self._fields if r.regex.search(key)), None))

    def _secret_value(self, s: str, rule: str) -> str:
        """A whole value under a secret field. Its pattern secrets are replaced first, so that
        a placeholder handed back by replay and then sent again gives the same placeholder."""
        if not s or PLACEHOLDER.fullmatch(s):
            return s
        inner = self._text(s, self._scanner)
        if PLACEHOLDER.fullmatch(inner):
            return inner
        return self.placeholder(inner, rule)

    def _text(self, s: str, scanner: Scanner) -> str:
        """`s` redacted with `scanner`'s rules (all the rules that can match it), memoised."""
        if s in self._texts.clean:  # the common case, first
            return s
        known = self._texts.dirty.get(s)
        if known is not None:
            return known
        spans = self._found(s, scanner)
        if not spans:
            return s
        out = _spliced(s, [(start, end, self.placeholder(s[start:end], name))
                           for start, end, name in spans])
        self._texts.remember([s], out)
        return out

    def _found(self, s: str, scanner: Scanner) -> list[tuple[int, int, str]]:
        """(start, end, rule name) of each secret in `s`; a text without any is remembered
        as clean, and not searched again."""
        memo = self._texts
        if s in memo.clean:
            return []
        if len(s) < scanner.min_length:
            if len(s) >= self._scanner.min_length:  # too short for all rules it could match
                memo.remember([s], None)
            return []
        spans = scanner.find(s)
        if not spans:
            memo.remember([s], None)
        return spans
