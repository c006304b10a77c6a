"""A dict written as text the ways tools return it (JSON, indented, ASCII-escaped or not, JSON
inside JSON, a repr), and what redacting such text must keep: no string that a dict's secret
field would lose survives, JSON text stays readable, and redacting again changes nothing.
Shared by the property test of the text rules and their libFuzzer harness."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Collection
from typing import Any

from agentreplay_core import Redactor
from agentreplay_core._redact_rules import PLACEHOLDER

#: names the default rules treat as a secret's, in dicts and in text
SECRET_NAMES = ("password", "api_key", "cookie", "access_token", "Authorization",
                "credentials", "secret", "DB_PASSWORD", "private_key")
FORMS = ("json", "json in json", "repr")
_SCHEME = re.compile(r"\A(?:(?i:basic|bearer|token|digest)\s+)+")


def default_secret_name(name: str) -> bool:
    return name.lower() in _SECRET_NAMES


_SECRET_NAMES = {n.lower() for n in SECRET_NAMES}


def strings_of(value: Any, secret: bool = False,
               named: Callable[[str], bool] = default_secret_name) -> list[tuple[str, bool]]:
    """Every string of `value` (keys too), and whether a dict's secret field (a key `named`
    says is a secret's name) holds it."""
    if isinstance(value, str):
        return [(value, secret)]
    if isinstance(value, list):
        return [s for item in value for s in strings_of(item, secret, named)]
    if isinstance(value, dict):
        return [*((k, False) for k in value),
                *(s for k, v in value.items()
                  for s in strings_of(v, secret or named(k), named))]
    return []


def written(form: str, indent: int | None, ascii_: bool
            ) -> tuple[Callable[[Any], str], Callable[[str], Any]]:
    """How a value is written as text, and how such text is read back."""
    def dumps(v: Any) -> str:
        return json.dumps(v, indent=indent, ensure_ascii=ascii_)
    if form == "json":
        return dumps, json.loads
    if form == "json in json":
        return lambda v: dumps(dumps(v)), lambda t: json.loads(json.loads(t))
    return repr, ast.literal_eval


def json_nested(value: Any, levels: int, indent: int | None = None) -> str:
    """`value` as JSON text, inside JSON text `levels` times over."""
    text = json.dumps(value, indent=indent)
    for _ in range(levels):
        text = json.dumps(text)
    return text


def read_nested(text: str, levels: int) -> Any:
    """What `json_nested` wrote, read back."""
    for _ in range(levels):
        text = json.loads(text)
    return json.loads(text)


def assert_text_redacted(redactor: Redactor, value: dict[str, Any], form: str,
                         indent: int | None, ascii_: bool,
                         named: Callable[[str], bool] = default_secret_name,
                         name_rules: Collection[str] = ("assignment",)) -> None:
    """Redacting `value` written as `form` keeps no secret, stays readable, and is stable.
    `named`: which keys are secrets' names for `redactor`; `name_rules`: its rules that take
    the value after such a name in text."""
    write, read = written(form, indent, ascii_)
    redacted = redactor.redact(write(value))
    # JSON text stays JSON, a repr a Python literal; no string of it holds a secret
    # (a placeholder parts the text around it: what it replaced is not glued back together)
    kept = [_SCHEME.sub("", PLACEHOLDER.sub("\x00", s))
            for s, _ in strings_of(read(redacted), named=named)]
    assert redactor.redact(redacted) == redacted
    found = strings_of(value, named=named)
    elsewhere = [s for s, secret in found if not secret]
    for s, secret in found:
        # a secret of letters (digits could be part of a number), of the length the text
        # rules take, that no string outside a secret field holds; an authorization scheme
        # before it is kept in text
        s = _SCHEME.sub("", s) if secret else s
        if secret and len(s) >= 6 and any(c.isalpha() for c in s) and \
                not any(s in other for other in elsewhere):
            assert not any(s in k for k in kept), s
    # what a secret's name takes from a string on its own, it takes from it in the text too
    # (an object after a name in a string of JSON is one level down: its quotes are escaped
    # once more); an escape before a token's prefix changes what the pattern rules see, so
    # only the names' rule counts, and only in strings that no escape but a quote's changes
    def plain(s: str) -> bool:
        return s.replace("\n", " ").replace("\t", " ").isprintable()
    # (a string that is not plain may keep anything, as written in the text)
    alone = [PLACEHOLDER.sub("\x00", redactor.redact(s)) if plain(s) else s for s, _ in found]
    for s, _ in found:
        if not plain(s):
            continue
        for start, end, rule in redactor._find(s):
            taken = _SCHEME.sub("", s[start:end])
            if rule in name_rules and len(taken) >= 6 and any(c.isalpha() for c in taken) \
                    and not any(taken in other for other in alone):
                assert not any(taken in k for k in kept), (s, taken)
