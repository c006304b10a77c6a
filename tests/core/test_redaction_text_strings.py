"""The strings of JSON text or a repr, found level by level (`TextStrings`): a name inside a
string is a word of it, and JSON text held in a string has strings of its own, one level
down, with their quotes escaped once more."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest

from agentreplay_core._redact_text_strings import TextString, TextStrings
from tests.support.text_forms import json_nested

VALUE = {"key": "hunter", "list": ["a", "b'c", 'd"e\\f'], "n": {"deep": "it's"}}


def _read(written: str, levels: int) -> str:
    """A string as written `levels` levels down, read back."""
    for _ in range(levels):
        written = json.loads(f'"{written}"')
    return str(json.loads(written))


def _levels(text: str) -> list[list[TextString]]:
    """The strings of `text`, level by level."""
    strings = TextStrings(text)
    levels = [strings.outermost()]
    while inner := [s for outer in levels[-1] for s in strings.inside(outer)]:
        levels.append(inner)
    return levels


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("levels", [0, 1, 2, 3])
def test_the_strings_of_json_inside_json_are_found_at_their_level(
        levels: int, indent: int | None) -> None:
    text = json_nested(VALUE, levels, indent)
    found = _levels(text)
    assert len(found) == levels + 1
    assert [_read(text[s.start:s.end], levels) for s in found[levels]] == _strings(VALUE)
    inner = found[levels][0]
    assert TextStrings(text).around(inner.body)[0] == inner


def test_a_reprs_strings_and_the_json_one_of_them_holds() -> None:
    value = {"a": "x'y", "result": json.dumps({"b": "it's", "c": 'q"r'}), "d": 'say "hi"'}
    text = repr(value)
    found = _levels(text)
    assert [ast.literal_eval(text[s.start:s.end]) for s in found[0]] == _strings(value)
    # written in a repr's string: its backslashes are doubled
    assert [json.loads(ast.literal_eval(f"'{text[s.start:s.end]}'")) for s in found[1]] \
        == ["b", "it's", "c", 'q"r']


@pytest.mark.parametrize("text", ["it's a 'test' of \"quotes\"", "password: 'x'", ""])
def test_text_that_is_no_json_nor_repr_has_no_strings(text: str) -> None:
    assert _levels(text) == [[]] and TextStrings(text).around(5) == (None, None)
