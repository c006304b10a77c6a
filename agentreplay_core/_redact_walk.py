"""One copy-on-write walk over encoded trees, for redacting secrets and for restoring them.

The walk visits what the codec stored as data and leaves its structure alone: the tag key and
tag names, class references, dtypes, shapes and the numbers of tagged scalars are never
touched, so a redacted tree decodes exactly as before except for the replaced text. Bytes are
decoded (Latin-1, so any byte sequence round-trips), transformed as text and encoded again: a
PEM file read as bytes is redacted like one read as text. A subtree that did not change is
returned as the same object, so callers can tell "nothing to redact" by identity.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from agentreplay_core._codec_base import TAG, Json
from agentreplay_core._redact_json_text import JSON_TEXT_KEYS

#: tags whose payload holds no text (numbers, dates, class references, raw vectors)
OPAQUE_TAGS = frozenset({"float", "int", "floats", "datetime", "date", "time", "timedelta",
                         "decimal", "uuid", "complex", "enum", "npscalar"})
_BYTES = frozenset({"bytes", "bytearray"})
#: tags whose data sits under "v" (a list, dict or tagged value) next to structural fields
_DATA_UNDER_V = frozenset({"tuple", "set", "frozenset", "ext", "path"})


class TreeTransform:
    """Applies `text` to every string of an encoded tree (keys included), `secret_text` to
    every string below a key for which `secret_field` returns a rule name, and `json_text` to
    a string under a key that holds JSON text."""

    def text(self, s: str) -> str:
        return s

    def secret_text(self, s: str, rule: str) -> str:
        return s

    def secret_field(self, key: str) -> str | None:
        return None

    def json_text(self, s: str) -> str:
        """A string under a key that holds JSON text (a tool call's arguments)."""
        return self.text(s)

    def bytes_text(self, text: str, secret: str | None) -> str:
        """Bytes seen as Latin-1 text; the result must stay within Latin-1."""
        return self.secret_text(text, secret) if secret else self.text(text)

    def walk(self, node: Json, secret: str | None = None) -> Json:
        t = type(node)
        if t is str:
            return self.secret_text(node, secret) if secret else self.text(node)
        if t is dict:
            return self._tagged(node, secret) if TAG in node else self._mapping(node, secret)
        if t is list:
            return self._list(node, secret)
        return node

    def _mapping(self, d: dict[str, Json], secret: str | None) -> dict[str, Json]:
        out: dict[str, Json] | None = None
        for k, v in d.items():
            new_key = self.text(k)
            if secret is None and type(v) is str and k in JSON_TEXT_KEYS:
                new_value = self.json_text(v)
            else:
                new_value = self.walk(v, secret or self.secret_field(k))
            if out is None:
                if new_key is k and new_value is v:
                    continue
                out = {}
                for before, value in d.items():  # the unchanged entries so far
                    if before == k:
                        break
                    out[before] = value
            out[new_key] = new_value
        return d if out is None else out

    def _list(self, items: list[Json], secret: str | None) -> list[Json]:
        out: list[Json] | None = None
        for i, v in enumerate(items):
            new = self.walk(v, secret)
            if out is None:
                if new is v:
                    continue
                out = items[:i]
            out.append(new)
        return items if out is None else out

    def _pairs(self, pairs: Json, secret: str | None) -> Json:
        """The [key, value] pairs of a `map` (a dict with keys JSON objects cannot hold)."""
        if type(pairs) is not list:
            return self.walk(pairs, secret)
        out = []
        for pair in pairs:
            if type(pair) is list and len(pair) == 2:
                key, value = pair
                inner = secret or (self.secret_field(key) if type(key) is str else None)
                new_key, new_value = self.walk(key), self.walk(value, inner)
                pair = pair if new_key is key and new_value is value else [new_key, new_value]
            out.append(pair)
        return pairs if all(a is b for a, b in zip(out, pairs, strict=True)) else out

    def _tagged(self, d: dict[str, Json], secret: str | None) -> Json:
        tag = d[TAG]
        if tag in OPAQUE_TAGS:
            return d
        if tag == "str":  # text with NUL or lone surrogates: runs of text between code points
            if secret:
                text = "".join(p if type(p) is str else chr(p) for p in d["v"])
                new = self.secret_text(text, secret)
                return d if new == text else new
            return self._replace(d, "v", self._list(d["v"], None))
        if tag in _BYTES:
            return self._bytes(d, secret)
        if tag == "dict":  # a plain dict that holds the tag key as data
            return self._replace(d, "v", self._mapping(d["v"], secret)
                                 if type(d["v"]) is dict else d["v"])
        if tag == "map":
            return self._replace(d, "v", self._pairs(d["v"], secret))
        if tag in ("pydantic", "dataclass", "namedtuple"):
            out = self._replace(d, "v", self.walk(d["v"], secret))
            return self._replace(out, "extra", self.walk(d["extra"], secret)) \
                if "extra" in d else out
        if tag in _DATA_UNDER_V:
            return self._replace(d, "v", self.walk(d["v"], secret))
        if tag == "ndarray":
            return self._replace(d, "items", self.walk(d["items"], secret)) \
                if "items" in d else d
        # an unencodable marker (its repr and error text) or a tag of a newer version: every
        # value but the tag itself may hold text
        out = d
        for k, v in d.items():
            if k != TAG:
                out = self._replace(out, k, self.walk(v, secret))
        return out

    def _bytes(self, d: dict[str, Json], secret: str | None) -> Json:
        encoded = d.get("v")
        if type(encoded) is not str:
            return d
        try:
            raw = base64.b64decode(encoded.encode("ascii"), validate=True)
        except (binascii.Error, ValueError):
            return d
        text = raw.decode("latin-1")
        new = self.bytes_text(text, secret)
        if new is text:
            return d
        return self._replace(d, "v", base64.b64encode(new.encode("latin-1")).decode("ascii"))

    @staticmethod
    def _replace(d: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
        if d.get(key) is value:
            return d
        out = dict(d)
        out[key] = value
        return out


#: tags whose data `collect_texts` can reach without decoding anything
_PLAIN_DATA = ("v", "extra", "items")
PLAIN_TAGS = frozenset({"tuple", "set", "frozenset", "ext", "pydantic", "dataclass",
                        "namedtuple", "ndarray"})


def collect_texts(tree: Json, min_length: int, known: set[str], keys: dict[str, bool],
                  key_needs_walk: Callable[[str], bool],
                  json_needs_walk: Callable[[str, Json], bool]) -> list[str] | None:
    """The string values of an encoded tree that may hold a secret: long enough and not
    `known` to be clean. None means "walk it all instead": a key names a secret field or holds
    a secret itself (`key_needs_walk`, memoised in `keys`), a key's JSON text may hold a secret
    field (`json_needs_walk`, asked of keys in `JSON_TEXT_KEYS`), or text hides in a form that
    must be decoded first (bytes, text with NUL, an unencodable marker's repr).

    This runs for every recorded value: one loop over an explicit stack (no recursion, no
    closures, nothing copied); a key costs one dictionary lookup once seen.
    """
    out: list[str] = []
    append = out.append
    key_state = keys.get
    stack = [tree]
    push = stack.append
    pop = stack.pop
    while stack:
        node = pop()
        t = type(node)
        if t is dict:
            if TAG in node:
                tag = node[TAG]
                if tag in OPAQUE_TAGS:
                    continue
                if tag not in PLAIN_TAGS:
                    return None
                for k in _PLAIN_DATA:
                    if k in node:
                        push(node[k])
                continue
            for k, v in node.items():
                attention = key_state(k)
                if attention is not False and (attention or key_needs_walk(k)) and (
                        k not in JSON_TEXT_KEYS or json_needs_walk(k, v)):
                    return None
                tv = type(v)
                if tv is str:
                    if len(v) >= min_length and v not in known:
                        append(v)
                elif tv is dict or tv is list:
                    push(v)
        elif t is list:
            for v in node:
                tv = type(v)
                if tv is str:
                    if len(v) >= min_length and v not in known:
                        append(v)
                elif tv is dict or tv is list:
                    push(v)
        elif t is str and len(node) >= min_length and node not in known:
            append(node)
    return out
