"""What redaction looks for: `RedactionRule` and the default rules, as data.

A rule either names fields (a regex searched, case-insensitively, in dict keys: the whole value
under a matching key is a secret) or describes a secret's shape (a regex on string values; a
group named `secret` limits the replacement to that part, as in `Bearer <token>`).

Scanning every recorded string with a dozen regexes would dominate the cost of recording, so a
rule may say what any match of it contains: `needles` (literal strings), a `screen` (a regex
that `re` can search fast, as it starts with a literal), `keywords` (words written right before
a `:` or `=`) or a `min_run` of token characters. Text that lacks them is never searched with
the rule's own regex (`_redact_scan`). These are optional hints: a rule without them simply
runs its regex on every new string.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

FIELDS_ENV = "AGENTREPLAY_REDACT_FIELDS"
PATTERNS_ENV = "AGENTREPLAY_REDACT_PATTERNS"
#: how a secret is stored: `<secret:RULE:12 hex digits of HMAC-SHA-256(key, secret)>`
PLACEHOLDER = re.compile(r"<secret:([A-Za-z0-9_.-]{1,40}):([0-9a-f]{12})>")
_RULE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}\Z")


@dataclass(frozen=True)
class RedactionRule:
    """One kind of secret.

    Args:
        name: label in the placeholder (`<secret:NAME:...>`): letters, digits, `_.-`.
        pattern: regex for secrets inside string values; a group named `secret` marks the
            part to replace (the rest, e.g. `password=`, stays readable).
        fields: regex searched case-insensitively in dict keys; every string under a
            matching key (at any depth) is a secret.
        needles: the rule only runs on text containing one of these (case-sensitive).
        keywords: ... and in which one of these words (any case) ends right before a `:` or
            `=`, after an optional quote and spaces: the context of `password: ...`.
        screen: ... and matching this regex (one search shared by the rules naming the same
            screen). Without keywords, the pattern itself is searched last. Without
            Hyperscan, the needles of a rule with a screen are not searched for one by one:
            only their rare characters, and then the screen.
        min_run: every match holds this many consecutive token characters (letters, digits,
            `_-.~+/=`): API keys and tokens do, prose mostly does not.
        min_length: shortest text the pattern can match; shorter strings are not scanned.
    """

    name: str
    pattern: str | re.Pattern[str] | None = None
    fields: str | re.Pattern[str] | None = None
    needles: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    screen: str | None = None
    min_run: int = 0
    min_length: int = 1
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)
    screen_regex: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _RULE_NAME.match(self.name):
            raise ValueError(f"redaction rule name {self.name!r} must be 1 to 40 letters, "
                             "digits, '_', '.' or '-' (it becomes part of the placeholder)")
        if (self.pattern is None) == (self.fields is None):
            raise ValueError(f"redaction rule {self.name!r} needs exactly one of pattern= "
                             "(a regex on string values) or fields= (a regex on dict keys)")
        source = self.fields if self.pattern is None else self.pattern
        text, flags = (source.pattern, source.flags) if isinstance(source, re.Pattern) \
            else (str(source), 0)
        if self.fields is not None:
            flags |= re.IGNORECASE
        try:
            regex = re.compile(text, flags)
        except re.error as exc:
            raise ValueError(f"redaction rule {self.name!r}: invalid regex {text!r}: {exc}"
                             ) from None
        object.__setattr__(self, "regex", regex)
        try:
            screen = re.compile(self.screen) if self.screen is not None else None
        except re.error as exc:
            raise ValueError(f"redaction rule {self.name!r}: invalid screen regex "
                             f"{self.screen!r}: {exc}") from None
        object.__setattr__(self, "screen_regex", screen)
        object.__setattr__(self, "needles", tuple(self.needles))
        object.__setattr__(self, "keywords", tuple(k.lower() for k in self.keywords))
        if self.pattern is not None and regex.search("") is not None:
            raise ValueError(f"redaction rule {self.name!r}: the pattern {regex.pattern!r} "
                             "matches the empty string, so it would redact everything")

    @property
    def is_field_rule(self) -> bool:
        return self.fields is not None


def field_rule(name: str, names: Iterable[str]) -> RedactionRule:
    """A rule for dict keys equal (case-insensitively) to one of `names`."""
    listed = _names(names)
    alternatives = "|".join(re.escape(n) for n in listed)
    return RedactionRule(name, fields=rf"\A(?:{alternatives})\Z")


def field_text_rule(name: str, names: Iterable[str]) -> RedactionRule:
    """The same fields written in text: `NAME: value`, `NAME=value`, `"NAME": "value"` (a
    header dump, JSON text a tool returned), the name whole and in any case, its characters
    that are not ASCII also as JSON escapes them. A quoted value is taken whole, as the
    field's value in a dict is (same placeholder)."""
    listed = _names(names)
    alternatives = "|".join(_as_written(n) for n in listed)
    # JSON text escapes what is not ASCII (`json.dumps` does by default; a keyword's escape
    # stands for any, in any case)
    escaped = {_u_escaped(n.lower()) for n in listed if not n.isascii()}
    return RedactionRule(name, pattern=rf"{NAME_START}(?i:{alternatives}){_ASSIGNED}",
                         needles=(":", "="), keywords=(*listed, *sorted(escaped)),
                         min_length=min(len(n) for n in listed) + 7)


def _u_escaped(text: str) -> str:
    """`text` with each character that is not ASCII written as JSON's `\\u` escapes."""
    return "".join(c if c.isascii() else json.dumps(c)[1:-1] for c in text)


def _as_written(name: str) -> str:
    """A regex of `name` as text writes it: each character that is not ASCII as itself or as
    JSON escapes it in ASCII (`\\u00f1`, `\\u00d1` for `Ñ`), after any backslashes (one
    level down in JSON inside JSON: `\\\\u00f1`)."""
    out = []
    for c in name:
        if c.isascii():
            out.append(re.escape(c))
            continue
        forms = sorted({f for f in (c, c.lower(), c.upper()) if len(f) == 1})
        escapes = {"".join(rf"\\+u{unit[2:]}" for unit in _UNITS.findall(_u_escaped(f)))
                   for f in forms}
        out.append(f"(?:{c}|{'|'.join(sorted(escapes))})")
    return "".join(out)


_UNITS = re.compile(r"\\u[0-9a-f]{4}")


@dataclass(frozen=True)
class FieldTextRule(RedactionRule):
    """A `fields=` rule of a user's, written in text: a name before `:`/`=` whose whole the
    rule's regex finds something in (as it searches a dict key) takes the value after it, as
    `field_text_rule` does for listed names. Made by `Redactor` for each such rule."""

    names: re.Pattern[str] | None = None


def field_regex_text_rule(rule: RedactionRule) -> FieldTextRule:
    """The text form of the `fields=` rule `rule`: any name written as a word (letters,
    digits, `_.-`) before a value, kept by the scanner only if `rule.regex` finds something
    in it. Screened by the rule's regex over the whole text where that is sound."""
    return FieldTextRule(rule.name, pattern=rf"{_FIELD_NAME}{_ASSIGNED}", needles=(":", "="),
                         screen=_text_screen(rule.regex), min_length=8, names=rule.regex)


def _text_screen(names: re.Pattern[str]) -> str | None:
    """A search over a whole text that finds something in any text holding a key `names`
    finds something in: `names` itself, without the anchors at its ends (`^x-acme-` is
    `x-acme-` in a text), which only ever narrow a search, or where it may find a character
    that is not ASCII, any `\\u` escape (JSON text writes such a name with them). None
    when it asserts anything else (`\\b`, lookarounds; `[^...]` too, to keep this simple)
    or has flags a pattern string would lose: each name is then checked on its own, which
    costs more."""
    core = re.sub(r"(?<!\\)(?:\$|\\[Zz])\Z", "", re.sub(r"\A(?:\^|\\A)", "", names.pattern))
    if names.flags & ~(re.IGNORECASE | re.UNICODE) or not core or \
            re.search(r"[$^]|\\[AZzbBG]|\(\?", core):
        return None
    escaped = rf"|{ESCAPED_CHAR}" if _MAY_FIND_NON_ASCII.search(core) else ""
    return f"(?i:{core}){escaped}"


#: a regex that may find a character that is not ASCII: it holds one, a class (`\\w`, `.`,
#: `[...]`) or an escape for one
_MAY_FIND_NON_ASCII = re.compile(r"[^\x00-\x7f]|\\[wWSDuUxN]|(?<!\\)[.\[]")


def _names(names: Iterable[str]) -> list[str]:
    listed = sorted({n for n in names if n})
    if not listed:
        raise ValueError("field_rule needs at least one field name")
    return listed


# Token characters of API keys; `(?<!...)` after the literal prefix (so the regex engine can
# search for the prefix quickly) keeps "task-force" or "disk-..." from counting as `sk-`.
_TOKEN = r"[A-Za-z0-9_-]"
#: a value after `password=` / `"api_key": "`: no quotes, spaces, brackets; not a placeholder
#: (and `(?<!<)` keeps the `secret:` inside a placeholder from reading as an assignment);
#: it does not end on a backslash, which may escape the quote after it (a first word taken
#: where a quoted value is none: too short, not closed) and JSON would break without it
_VALUE = r"""[^\s"'<>,;{}\[\]()`][^\s"'<>,;{}\[\]()`]{5,}(?<![\\])"""
#: ... or, in quotes, all of it up to the closing quote on the line (a passphrase has spaces:
#: `password: "correct horse battery staple"`), escapes, `<` and `>` and all (a value holding
#: a placeholder is left as it is: the scanner drops matches over placeholders). One longer
#: than 4 KiB (a session's cookie header) is taken to its closing quote, or to its line's end
#: when the quote is not there (a log line cut short): the first form is bounded, and the
#: second always matches where it can start, so a line of unclosed quotes does not cost the
#: square of its length. In JSON text inside JSON text (a tool's JSON result holding JSON)
#: the quotes are escaped, `\"`: the value ends at the quote escaped as its opening one was
#: (`esc`, e backslashes) after a whole number of this level's escaped backslashes (2e + 2
#: each); a quote after any other run of backslashes is one level down, inside the value
#: (`\"a\\\"b\"`: `a\\\"b`). Such a run is taken whole (a lookahead and its
#: backreference), so that no backtracking splits it into a closing quote that is none
QUOTED_MAX = 4096


def _in_escaped(n: int) -> str:
    """A character of a quoted value whose quotes are escaped: one of this level's escaped
    backslashes, or the rest of a run of backslashes, shorter than that and no closing
    quote's, whole, with the quote after it (one level down). A quote after fewer
    backslashes than the value's own, or none, ends a string the value is inside: the value
    cannot go on past it. Only one of these can match at any point, so that a value that is
    no value fails in linear time (group names end in `n`: the pattern occurs twice)."""
    unit = r"(?:(?P=esc)(?P=esc)\\\\)"
    return (rf"(?:(?!(?P=quote))[^\n\\]|(?!(?P=esc)(?P=quote)){unit}"
            rf"|(?!{unit}|(?P=esc)(?P=quote)|(?!(?P=esc))\\*(?P=quote))"
            rf"(?=(?P<run{n}>\\+))(?P=run{n})(?P=quote)?)")


#: a character of a quoted value whose quotes are not escaped, or an escape (a value in
#: single quotes inside a string of JSON inside JSON ends with that string, whose closing
#: `\"` it may hold: `_redact_scan` cuts it there)
_IN_QUOTES = r"""(?:\\.|(?!(?P=quote))[^\n\\])"""
#: what stands between two strings in JSON or a repr but commas: structure, spaces, line
#: breaks (escaped in JSON inside JSON), numbers (whole: `(?![\d.])` keeps a run of digits
#: from being split in exponentially many ways when what follows does not match) and the
#: other scalars
_BESIDES_COMMAS = (r"(?:[\s:\[\]{}]|\\+[nrt]|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\d.])"
                   r"|true|false|null|True|False|None)")
BETWEEN_STRINGS = rf"(?:{_BESIDES_COMMAS}|,)"
#: a quote after an unquoted name is no value's opening one when only that comes before the
#: next quote of its kind, or before one of the other kind after a comma (a repr's strings
#: take both quotes): it closes a string that ends `secret= `. (After a quoted name it opens
#: the next string, whatever that holds: where the name is inside a string, `_redact_scan`
#: finds the quote closing it)
_OPENS_A_VALUE = (rf"(?!{BETWEEN_STRINGS}*(?(esc)(?P=esc))(?P=quote)"
                  rf"|{_BESIDES_COMMAS}*,{BETWEEN_STRINGS}*(?(esc)(?P=esc))[\"'])")
_QUOTED = (rf"""(?(kq)|{_OPENS_A_VALUE})"""
           rf"""(?(esc)(?:{_in_escaped(1)}{{6,{QUOTED_MAX}}}(?=(?P=esc)(?P=quote))"""
           rf"""|{_in_escaped(2)}{{{QUOTED_MAX + 1},}})"""
           rf"""|(?:{_IN_QUOTES}{{6,{QUOTED_MAX}}}(?=(?P=quote))"""
           rf"""|{_IN_QUOTES}{{{QUOTED_MAX + 1},}}))""")
#: after a quoted name, a JSON number, true, false or null is no secret: a dict keeps them
#: under a secret's name, and replacing one would leave the JSON text unreadable (`"pin":
#: <secret:...>`; in indented JSON inside JSON, `false\n` reads as a value of 7 characters)
_JSON_SCALAR = (r"(?(kq)(?!(?:-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)"
                r"(?![^\s,}\]\\])))")
#: the names of `DEFAULT_FIELDS`, as written before a value in text (alternatives sharing a
#: first letter are grouped: `re` tries each alternative at every position of the text)
_SECRET_WORDS = (r"p(?:assw(?:or)?d|assphrase|rivate[_-]?key)|secret|api[_-]?key|"
                 r"c(?:redentials?|ookie)|authorization|(?:access|auth|api|bearer|refresh|"
                 r"session|id|ad|oauth|security)[_-]?token")
#: spaces around a separator, and the escapes JSON text writes for them (`password:\n  x`
#: in a string of JSON; one level down, `\\n`)
GAP = r"(?:\s|\\+[nrt])*"
#: what follows a secret's name in text: `: value`, `=value`, `": "quoted value"` (an
#: authorization scheme before the value is no secret), or an object or array (`open`),
#: whose strings are the secrets (`_redact_containers`; `kq` shows how its quotes are escaped).
#: Schemes may repeat (`Bearer Bearer abcdefghij`, a token prefixed twice)
_ASSIGNED = (rf"""(?:(?P<kq>\\*)["'])?{GAP}[:=]{GAP}(?:(?P<esc>\\+)?(?P<quote>["']))?"""
             r"(?:(?i:basic|bearer|token|digest)\s+)*(?!(?i:basic|bearer|token|digest)\s)"
             rf"(?P<secret>(?(quote)(?:{_QUOTED}|{_VALUE})|(?:{_JSON_SCALAR}{_VALUE}"
             r"|(?P<open>[{\[]))))")

#: where a name written in text starts: not inside a word (`x-acme-token` holds no field
#: `token`) nor at an escape's letter, but after an escape of JSON text: `\n` in
#: `"Host: a\nX-Acme-Token: ..."`, or a `\u` escape of a character no word goes on with
#: (`_redact_scan` checks which; a backslash escaped before the letter, one level down in
#: JSON inside JSON, too)
NAME_START = r"(?:(?<![\w.<-])(?<!(?<!\\)\\)|(?<=\\[nrtbf])|(?<=\\u[0-9a-fA-F]{4}))"
#: a character of a name that JSON text escapes (not ASCII, in `json.dumps`'s default), its
#: backslash escaped again a level down
ESCAPED_CHAR = r"\\+u[0-9a-fA-F]{4}"

#: a name written before a value as a word, as a dict key could be (`x-acme-ref`, `db.pass`);
#: taken whole at once (a lookahead and its backreference: an atomic group before Python
#: 3.11), as `re` would otherwise try each shorter name before the next word
_FIELD_NAME = (rf"{NAME_START}(?=(?P<fname>(?:[^\W\d]|{ESCAPED_CHAR})(?:[\w.-]|{ESCAPED_CHAR})"
               r"{0,63}))(?P=fname)")

#: dict keys whose values are secrets, wherever they occur (headers, kwargs, configs)
DEFAULT_FIELDS = (
    r"api[_-]?key|apikey|secret|passw(?:or)?d|passphrase|credential|authorization|cookie"
    r"|private[_-]?key|(?:access|auth|api|bearer|refresh|session|id|ad|oauth|security)"
    r"[_-]?token"
)

#: what a bearer token looks like after the word (it has a digit: "Bearer authentication" is
#: prose)
_BEARER_TOKEN = r"\s+(?P<secret>(?=[A-Za-z._~+/-]*[0-9])[A-Za-z0-9._~+/-]{16,}=*)"
_OPENAI = rf"sk-(?<!{_TOKEN}sk-){_TOKEN}{{20,}}"
#: the prefixed tokens with an underscore: one search in Python for the needles of four rules
#: (Hyperscan looks for the needles themselves, all at once: see `_redact_scan`)
_UNDERSCORE = r"_(?:(?<=gh[pousr]_)|(?<=github_pat_)|(?<=hf_)|(?<=k_live_)|(?<=k_test_))"

#: a password in a URL (`scheme://user:password@host`)
URL_PASSWORD = r"://[^\s:/@\"'<>]+:(?P<secret>[^\s/@\"'<>]+)@"

# Every pattern below starts with a literal (the boundary check comes after it), so `re` can
# search for it quickly; the needle's rarest character is looked for before that.
DEFAULT_RULES: tuple[RedactionRule, ...] = (
    RedactionRule("field", fields=DEFAULT_FIELDS),
    RedactionRule("private_key", pattern=(
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"),
        needles=("-----BEGIN",), min_length=30),
    # an Anthropic key also has the OpenAI shape: only looked for where that one matched
    RedactionRule("anthropic", pattern=rf"sk-ant-(?<!{_TOKEN}sk-ant-){_TOKEN}{{20,}}",
                  needles=("sk-",), screen=_OPENAI, min_run=27, min_length=27),
    RedactionRule("openai", pattern=_OPENAI, needles=("sk-",), min_run=23, min_length=23),
    RedactionRule("aws", pattern=r"A(?<![A-Za-z0-9]A)(?:KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])",
                  needles=("AKIA", "ASIA"), min_run=20, min_length=20),
    RedactionRule("google", pattern=rf"AIza(?<!{_TOKEN}AIza){_TOKEN}{{35}}(?!{_TOKEN})",
                  needles=("AIza",), min_run=39, min_length=39),
    RedactionRule("github", pattern=r"gh(?<![A-Za-z0-9_]gh)[pousr]_[A-Za-z0-9]{36,}",
                  needles=("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), screen=_UNDERSCORE,
                  min_run=40, min_length=40),
    RedactionRule("github", pattern=(
        r"github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{22,}"),
        needles=("github_pat_",), screen=_UNDERSCORE, min_run=33, min_length=33),
    RedactionRule("slack", pattern=r"xox(?<![A-Za-z0-9]xox)[abposre]-[A-Za-z0-9-]{10,}",
                  needles=("xox",), min_run=15, min_length=15),
    RedactionRule("stripe", pattern=r"(?<![A-Za-z0-9])[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",
                  needles=("k_live_", "k_test_"), screen=_UNDERSCORE, min_run=24, min_length=24),
    RedactionRule("huggingface", pattern=r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{30,}",
                  needles=("hf_",), screen=_UNDERSCORE, min_run=33, min_length=33),
    RedactionRule("jwt", pattern=(
        r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        needles=("eyJ",), min_run=32, min_length=32),
    RedactionRule("bearer", pattern=rf"earer(?<![A-Za-z][Bb]earer)(?<=[Bb]earer){_BEARER_TOKEN}",
                  needles=("earer",), min_run=16, min_length=23),
    RedactionRule("bearer", pattern=rf"BEARER(?<![A-Za-z]BEARER){_BEARER_TOKEN}",
                  needles=("BEARER",), min_run=16, min_length=23),
    RedactionRule("url_password", pattern=URL_PASSWORD,
                  needles=("://",), min_length=7),
    RedactionRule("assignment", pattern=rf"(?<!<)(?i:{_SECRET_WORDS}){_ASSIGNED}",
                  needles=(":", "="),
                  keywords=("password", "passwd", "passphrase", "secret", "key", "credential",
                            "credentials", "authorization", "cookie", "token"),
                  min_length=12),
)


def env_rules() -> tuple[list[str], list[str]]:
    """The field names of `AGENTREPLAY_REDACT_FIELDS` (comma-separated) and the regexes of
    `AGENTREPLAY_REDACT_PATTERNS` (one regex, or a JSON list of them).

    Raises:
        ValueError: the patterns variable starts a JSON list that is not a list of strings.
    """
    fields = [f.strip() for f in os.environ.get(FIELDS_ENV, "").split(",") if f.strip()]
    raw = os.environ.get(PATTERNS_ENV, "").strip()
    if not raw.startswith("["):
        return fields, [raw] if raw else []
    try:
        loaded = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{PATTERNS_ENV} starts with '[' but is not a JSON list of regexes: "
                         f"{exc}") from None
    if not isinstance(loaded, list) or not all(isinstance(p, str) for p in loaded):
        raise ValueError(f"{PATTERNS_ENV} must be one regex or a JSON list of strings")
    return fields, loaded
