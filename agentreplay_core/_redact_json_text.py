"""Where the strings of a JSON text are, and what they say: the text of a tool call's streamed
arguments redacted as the arguments will be once parsed.

A model streams a tool call's arguments as JSON text, and the framework parses the joined
text into the dict the tool is called with. That dict is redacted as a tree (a value under a
field such as `password` is a secret whole; pattern rules run on each string as decoded), so
the text must be redacted the same way, or the replay's parsed call gets other placeholders
than the tool's recorded step and diverges there. Scanning the text as one string does not:
a field's value (`"password": "correct horse battery staple"`) is no pattern's match, and a
`password=...` value runs on over a line break written `\\n`.

The same holds for such text stored whole (a message's tool calls in the next prompt, a
stream's last chunk): a string under one of `JSON_TEXT_KEYS` is redacted as the JSON it holds.

`json_strings` finds each string of a JSON object or array (a stream cut short leaves a
prefix: its last string may be open) with where each decoded character sits in the text and
the field rule of the keys it is under (none for a key itself, as a dict's keys are scanned
as text). Other text (a piece from the
middle of a stream, characters outside strings that JSON does not have there) gives None: the
caller scans it as plain text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

#: keys under which frameworks keep a tool call's arguments as JSON text: OpenAI-style
#: `function.arguments`, LangChain's tool call chunks and invalid tool calls (`args`),
#: Anthropic's `input_json_delta` (`partial_json`), LlamaIndex's `ToolCallBlock.tool_kwargs`
JSON_TEXT_KEYS = frozenset({"arguments", "args", "partial_json", "tool_kwargs"})
#: a JSON object or array's start
_OPENING = re.compile(r"\s*[{\[]")
#: a key: a string and the colon after it
_KEY = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:')
#: a string: its body and, unless the text ends inside it, the closing quote
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)("?)', re.DOTALL)
#: what JSON has outside strings: structure, numbers, true, false, null, whitespace
_BETWEEN = re.compile(r"[\s{}\[\],:0-9eE+\-.truefalsn]*\Z")
#: an escape (a surrogate pair, as `json.dumps` writes a character beyond U+FFFF, is one:
#: only a high surrogate's escape pairs with the next), or a run of plain text
_PIECE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
                    r"|\\u[0-9a-fA-F]{4}|\\.|[^\\]+|\\", re.DOTALL)


@dataclass(frozen=True)
class JsonString:
    """One string of a JSON text, decoded."""

    text: str
    #: where each character of `text` starts in the JSON text, and where the last one ends
    starts: list[int]
    #: the field rule of the outermost key it is under (as a dict's redaction applies it)
    field: str | None
    #: the key whose value it is (None for a key, or a string in an array)
    under: str | None


def json_strings(text: str, secret_field: Callable[[str], str | None]) -> list[JsonString] | None:
    """The strings of `text` (a JSON object or array, or the start of one), None if it is
    not one."""
    if not _OPENING.match(text):
        return None
    # one frame per open container: [is an object, a key comes next, the rule of its key,
    # its key]
    frames: list[list[object]] = []
    out: list[JsonString] = []
    at = 0
    while True:
        found = _STRING.search(text, at)
        between = text[at:found.start() if found else len(text)]
        if not _BETWEEN.match(between):
            return None
        _structure(between, frames)
        if found is None:
            return out
        body = found.start(1)
        decoded, starts = _decoded(found.group(1), body)
        in_object = bool(frames) and frames[-1][0] is True
        if in_object and frames[-1][1] is True:  # a key
            frames[-1][2], frames[-1][3] = secret_field(decoded), decoded
            field = under = None
        else:
            field = next((f[2] for f in frames if isinstance(f[2], str)), None)
            key = frames[-1][3] if in_object else None
            under = key if isinstance(key, str) else None
        out.append(JsonString(decoded, starts, field, under))
        at = found.end()


def json_keys(text: str) -> list[str]:
    """The keys of a JSON object or array's objects (none for other text): every string
    followed by a colon, which in JSON is a key (a few more in text that is no JSON)."""
    if not _OPENING.match(text):
        return []
    return [_decoded(key, 0)[0] if "\\" in key else key for key in _KEY.findall(text)]


def _structure(between: str, frames: list[list[object]]) -> None:
    for char in between:
        if char == "{":
            frames.append([True, True, None, None])
        elif char == "[":
            frames.append([False, False, None, None])
        elif char in "}]":
            if frames:
                frames.pop()
        elif frames and frames[-1][0] is True:
            if char == ",":
                frames[-1][1:] = [True, None, None]
            elif char == ":":
                frames[-1][1] = False


def _decoded(body: str, offset: int) -> tuple[str, list[int]]:
    """A string's body decoded, and the position in the text of each character's start."""
    if "\\" not in body:
        return body, list(range(offset, offset + len(body) + 1))
    parts: list[str] = []
    starts: list[int] = []
    for piece in _PIECE.finditer(body):
        written = piece.group()
        at = offset + piece.start()
        if written[0] != "\\":
            parts.append(written)
            starts.extend(range(at, at + len(written)))
            continue
        try:
            value = json.loads(f'"{written}"')
        except ValueError:  # an escape JSON has not, or one the stream cut: kept as written
            value = written
        parts.append(value)
        if len(value) == 1:
            starts.append(at)
        else:  # two \u escapes that are no pair, or an escape kept as written
            step = len(written) // len(value)
            starts.extend(at + step * i for i in range(len(value)))
    starts.append(offset + len(body))
    return "".join(parts), starts
