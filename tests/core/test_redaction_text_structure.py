"""Redacting text keeps its structure: a value after a secret's name is read as far as it
goes and no further, whatever escapes, quotes and brackets stand around it. Each case is one
that libFuzzer (tests/fuzz/fuzz_redaction_text.py) found breaking JSON or keeping a secret."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest

from agentreplay_core import Redactor
from agentreplay_core._redact_rules import PLACEHOLDER
from tests.support.text_forms import FORMS, json_nested, read_nested, written

REDACTOR = Redactor(key=b"text-structure")


@pytest.mark.parametrize("levels", [0, 1, 2, 3])
@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("value", [
    {"password": 'sk-\\"'},  # backslashes before a quote one level down
    {"password": "abcdef\\"},  # ... and before the value's own closing quote
    {"secret": {"cookie": "\\"}, "n": 0},  # an object's string of backslashes only
    {"password": "sk-" + "\\" * 40},  # more backslashes than the value has characters
    {"cookie": "password" + '\\"' * 1600},  # past 4 KiB: read to its end in one way only
    {"access_token": "password" + "\x00" * 1000},  # escapes (`\u0000`) past 4 KiB, too
])
def test_backslashes_before_a_quote_end_the_value_where_json_does(
        value: dict[str, Any], indent: int | None, levels: int) -> None:
    # before, a run of backslashes was split where a closing quote could be read, or a
    # value too short to be one lost its first word up to a backslash, whose quote then had
    # no escape: the JSON text was broken (or, for the last, its secret kept in clear)
    redacted = read_nested(REDACTOR.redact(json_nested(value, levels, indent)), levels)
    assert redacted.keys() == value.keys()
    assert "sk-\\\\\\\\" not in json.dumps(redacted)
    assert redacted.get("n", 0) == 0


@pytest.mark.parametrize("levels", [0, 1, 2])
@pytest.mark.parametrize("value", [
    {"access_token": ["secret= "], "next": 0},  # a string ends where a value could open
    {"note": ["a", "password: ", 0, 0], "cookie": ["password: ", 1, 2], "x": 0},
    {"items": ["token= ", "kept-value"], "n": [1, 2, 3]},
])
def test_a_quote_that_ends_a_string_opens_no_value(value: dict[str, Any], levels: int) -> None:
    # before, the closing quote of a string ending `secret= ` opened a "value" that ran over
    # the JSON after it (`,\n  ],\n  `), and replacing it broke the text
    kept = {k: v for k, v in value.items() if k not in ("access_token", "cookie")}
    for indent in (None, 2):
        redacted = read_nested(REDACTOR.redact(json_nested(value, levels, indent)), levels)
        assert redacted.keys() == value.keys()
        assert {k: redacted[k] for k in kept} == kept


@pytest.mark.parametrize("levels", [0, 1])
def test_a_name_inside_a_secret_opens_nothing(levels: int) -> None:
    # before, `password: [` inside a credentials value was read as an array after a secret's
    # name: its "strings" ran past the value over the JSON after it
    value = {"credentials": 'password: ["', "other": "kept", "n": 0}
    for indent in (None, 2):
        redacted = read_nested(REDACTOR.redact(json_nested(value, levels, indent)), levels)
        assert PLACEHOLDER.fullmatch(redacted["credentials"])
        assert (redacted["other"], redacted["n"]) == ("kept", 0)


def test_authorization_schemes_may_repeat() -> None:
    # a token prefixed twice (`Bearer Bearer ...`) kept its value in clear: no value may start
    # with a scheme's word, and only one scheme was skipped
    for text in ("Authorization: Bearer Bearer abcdefghij",
                 json.dumps({"authorization": "Basic basic abcdefghij"}),
                 repr({"Authorization": "Bearer  Token abcdefghij"})):
        redacted = REDACTOR.redact(text)
        assert "abcdefghij" not in redacted and PLACEHOLDER.search(redacted), text


def test_a_quoted_value_whose_escapes_double_its_length_is_redacted_whole() -> None:
    # `\"` is one character of the value: a value of them ran past the text the screen first
    # looked at, and no part of it was taken
    value = {"cookie": "Bearer sk-" + '"' * 3000, "n": 0}
    for text in (json.dumps(value), repr(value), json_nested(value, 1)):
        redacted = REDACTOR.redact(text)
        assert '\\"\\"\\"' not in redacted and "\"\"\"" not in redacted, text[:40]
    assert ast.literal_eval(REDACTOR.redact(repr(value)))["n"] == 0


def test_a_repr_keeps_its_structure_when_a_string_ends_after_a_secrets_name() -> None:
    # the closing quote of a string ending `password: ` was read as a value's opening one,
    # the value ran on over `], 'DB_PASSWORD': ` and the repr could no longer be read
    for note in ("sk-password: ", "it's my password: "):  # quoted as '...', or as "..."
        value = {"x": [["a"], note], "DB_PASSWORD": '"starts-with-a-quote', "n": 0}
        redacted = ast.literal_eval(REDACTOR.redact(repr(value)))
        assert (redacted["x"], redacted["n"]) == (value["x"], 0)
        assert PLACEHOLDER.fullmatch(redacted["DB_PASSWORD"])


def test_a_secrets_name_inside_a_long_quoted_value_does_not_cut_it_short() -> None:
    # the value's own words named a secret (`password: ...`): the search from that name saw
    # only the first 256 characters after it, in which the quoted value had no end, and its
    # shorter reading (the first word) was kept in place of the whole
    value = {"cookie": "password: " + "hunter2-secret " * 100, "n": 0}
    for text in (repr(value), json.dumps(value), json_nested(value, 1)):
        redacted = REDACTOR.redact(text)
        assert "hunter2" not in redacted, text[:40]


def test_values_that_look_like_the_start_of_json_are_still_values() -> None:
    # what may stand between two strings is read one way only (a run of digits is one
    # number), so a value that merely starts so is read on in linear time; and a value that
    # starts with structure and a quote of the other kind, no comma between, is a value
    for value in ({"password": "1" * 40 + "x"}, {"credentials": {"id": "1" * 40 + "a"}},
                  {"cookie": ': "' + "passw0rd" * 10}, {"secret": "[1, 2, " * 200 + "x"},
                  {"cookie": '\n["passw0rd-sk-'}):
        for text in (json.dumps(value), repr(value), json_nested(value, 1)):
            redacted = REDACTOR.redact(text)
            assert PLACEHOLDER.search(redacted) and "111111" not in redacted, text[:40]
            assert "passw0rd" not in redacted and "[1, 2, [1" not in redacted, text[:40]


def test_a_bracket_inside_a_string_opens_nothing_at_the_texts_end() -> None:
    # `password: {` inside the last string: its closing quote was read as a string opening
    # to the end of the text, and the JSON's closing brace was taken as a secret
    value = {"note": ": password: {password"}
    for text in (json.dumps(value), json.dumps(value, indent=2), repr(value)):
        assert REDACTOR.redact(text) == text


@pytest.mark.parametrize("levels", [0, 1])
def test_a_name_inside_a_value_hides_no_object_after_it(levels: int) -> None:
    # `password=[` inside the api_key's value was scanned as an array running on over the
    # object after it, whose own name was then skipped as inside it: its strings were kept
    value = {"api_key": "password=[", "access_token": {"inner": {"note": "hunter2-value"}}}
    for indent in (None, 2):
        text = json_nested(value, levels, indent)
        redacted = REDACTOR.redact(text)
        assert "hunter2" not in redacted and REDACTOR.redact(redacted) == redacted
        assert read_nested(redacted, levels).keys() == value.keys()


@pytest.mark.parametrize("levels", [1, 2])
def test_a_value_inside_a_string_ends_where_that_string_ends(levels: int) -> None:
    # `password: \"` in JSON inside JSON reads as a name and a quote three levels down; that
    # value has no end at its level, and it ran on over the JSON after the string holding it
    value = {"note": {"k": 'password: \\"'}, "private_key": "pem-" * 1100, "n": 0}
    for indent in (None, 2):
        redacted = read_nested(REDACTOR.redact(json_nested(value, levels, indent)), levels)
        assert (redacted["note"], redacted["n"]) == (value["note"], 0)
        assert PLACEHOLDER.fullmatch(redacted["private_key"])


def test_what_follows_a_name_inside_a_reprs_string_ends_with_that_string() -> None:
    # a repr's strings hold either quote unescaped: `["` in a string opened an array whose
    # string ran over the rest of the repr, and a quoted value in a string ran past its end
    for value in ({"x": [[True, '[password: ["'], ["", True]], "y": -1},
                  {"n": 'password: "hunter2 xyz', "x": "d'ef"},
                  {"n": 'credentials: {"user": "xq", "pass": "hunter2-xyz"}', "k": 1}):
        redacted = REDACTOR.redact(repr(value))
        parsed = ast.literal_eval(redacted)
        assert "hunter2" not in redacted and parsed.keys() == value.keys()
        assert {k: v for k, v in parsed.items() if k != "n"} == \
            {k: v for k, v in value.items() if k != "n"}


def test_a_value_that_is_none_hides_no_object_after_it() -> None:
    # `password: '` in an object's string read as a value quoted with `'` running to the
    # text's end; dropped in the end, it had first hidden every object after it: their strings
    # were kept in clear, and redacting the text again took them
    value = {"secret": {"cookie": ["password: '", "x", ""]},
             "cookie": {"inner": {"password": "hunter2-one", "private_key": "pem-" * 1100}}}
    for indent in (None, 2):
        text = json_nested(value, 1, indent)
        redacted = REDACTOR.redact(text)
        assert "hunter2" not in redacted and "pem-pem" not in redacted
        assert REDACTOR.redact(redacted) == redacted
        assert read_nested(redacted, 1).keys() == value.keys()


def test_an_apostrophe_in_json_inside_json_opens_no_string_of_an_object() -> None:
    # `password: {` in a string of JSON inside JSON, then an apostrophe: read as an object of
    # repr strings, its "string" ran from the apostrophe over the JSON to the next one
    value = {"note": "password: {{'hunter", "access_token": "sk-passwordpassword",
             "Authorization": {"k'": 0, "": 0}}
    for indent in (None, 2):
        redacted = read_nested(REDACTOR.redact(json_nested(value, 1, indent)), 1)
        assert redacted["note"] == value["note"]
        assert redacted["Authorization"] == value["Authorization"]
        assert PLACEHOLDER.fullmatch(redacted["access_token"])


@pytest.mark.parametrize("levels", [0, 1])
def test_a_bracket_in_a_string_hides_no_secrets_object_after_it(levels: int) -> None:
    # `password: [` in a note's string scanned on to the end of the next array and hid it
    # from its own name: the cookie's strings were kept in clear
    value = {"note": "password: [", "cookie": ["hunter2-cookie-value", "other"], "n": 0}
    for indent in (None, 2):
        redacted = read_nested(REDACTOR.redact(json_nested(value, levels, indent)), levels)
        assert redacted["note"] == value["note"] and redacted["n"] == 0
        assert all(PLACEHOLDER.fullmatch(v) for v in redacted["cookie"])


def test_a_value_in_single_quotes_ends_with_the_json_string_it_is_in() -> None:
    # in JSON inside JSON, `password='...` in a string ran on past that string's `\"` (to the
    # text's end, when longer than 4 KiB) over the JSON after it
    for secret in ("p" * 5000, "hunter2 and more", "it's"):
        value = {"note": f"password='{secret}", "x": "it's kept", "n": 0}
        for indent in (None, 2):
            redacted = read_nested(REDACTOR.redact(json_nested(value, 1, indent)), 1)
            assert (redacted["x"], redacted["n"]) == ("it's kept", 0)
            assert "hunter2" not in redacted["note"] and "ppppp" not in redacted["note"]


def test_a_value_after_escaped_quotes_in_a_reprs_string_ends_with_it() -> None:
    # `'password: \\"'` (a backslash and a quote, as a repr writes them) read as a value
    # quoted with two backslashes, which ran on to the next such quote in a later string
    value = {"a": 'password: \\"', "b": "", "c": 'x\\"y', "cmd": 'curl -d pw=\\"hunter2x\\"'}
    redacted = ast.literal_eval(REDACTOR.redact(repr(value)))
    assert {k: redacted[k] for k in "abc"} == {k: value[k] for k in "abc"}
    command = {"cmd": 'curl -d password=\\"hunter2\\"', "k": "kept"}
    redacted = ast.literal_eval(REDACTOR.redact(repr(command)))
    assert "hunter2" not in redacted["cmd"] and redacted["k"] == "kept"


@pytest.mark.parametrize("secret", ["{{{hunter2", "p" * 5000, "hunter2 it is"])
def test_a_quote_after_a_name_inside_a_reprs_string_is_no_name_of_its_own(secret: str) -> None:
    # `"password'='..."`: the apostrophe after the name was read as the closing quote of a
    # quoted name, and the value it opened ran past its string to the next apostrophe (in
    # a later string, or past 4 KiB the text's end), breaking the repr
    for quotes in ("'='", "':'", "' = '"):
        value = {"note": f"password{quotes}{secret}", "other": "x'y", "n": 0}
        redacted = ast.literal_eval(REDACTOR.redact(repr(value)))
        assert (redacted["other"], redacted["n"]) == ("x'y", 0)
        assert redacted["note"].startswith(f"password{quotes}")
        assert "hunter2" not in redacted["note"] and "ppppp" not in redacted["note"]


@pytest.mark.parametrize("levels", [0, 1, 2])
def test_an_object_after_a_name_in_a_json_string_is_one_level_down(levels: int) -> None:
    # its quotes are escaped once more than the string's: before, they were looked for with
    # the name's own (none), and the object's strings were kept in clear in JSON text, while
    # the same string alone lost them
    note = 'password: {"user": "ann", "pass": "hunter2-xyz"}, "access_token": ["hunter3-abc"]'
    for value in ({"note": note, "n": 0}, note, [note, "it's"]):
        for indent in (None, 2):
            redacted = REDACTOR.redact(json_nested(value, levels, indent))
            assert "hunter" not in redacted and "ann" not in redacted
            assert read_nested(redacted, levels) == \
                read_nested(json_nested(REDACTOR.redact(value), levels, indent), levels)


def test_an_apostrophe_after_a_name_in_json_inside_json_opens_no_string() -> None:
    # `password:[{` in a string of JSON inside JSON, then an apostrophe in a later string:
    # read as the opening quote of a repr's string, it ran over the JSON to the next one
    value = {"a": [["password:[{"], {"b": "'"}], "y": [["'}"]], "n": 0}
    for indent in (None, 2):
        assert read_nested(REDACTOR.redact(json_nested(value, 1, indent)), 1) == value


def test_an_object_in_a_reprs_string_reads_its_escapes_as_the_repr_writes_them() -> None:
    # a repr writes the object's `\"` as `\\"`: before, that read as the closing quote of
    # the object's string, whose rest then stood where no object has anything, and the
    # object was dropped with its secret
    note = 'password: {"pass": "hun\\"ter2-xyz", "user": "it\'s"}'
    redacted = REDACTOR.redact(repr({"note": note, "n": 0}))
    assert "ter2-xyz" not in redacted
    # (each secret is hashed as written: the repr's escapes give other placeholders)
    assert PLACEHOLDER.sub("", ast.literal_eval(redacted)["note"]) == \
        PLACEHOLDER.sub("", REDACTOR.redact(note)) == 'password: {"pass": "", "user": ""}'


@pytest.mark.parametrize("key", ["n", "\u0130"])
def test_a_value_that_is_none_hides_no_name_after_it(key: str) -> None:
    # `password='` closing its string seemed to open a value running to the next
    # apostrophe, over the cookie's name; dropped, it hid that name where the text is
    # searched whole (lower-casing İ makes two characters), and the cookie was kept
    value = {key: 0, "note": ["password='"], "cookie": ["hunter'2x"]}
    redacted = json.loads(REDACTOR.redact(json.dumps(value, ensure_ascii=False)))
    assert (redacted[key], redacted["note"]) == (0, ["password='"])
    assert PLACEHOLDER.fullmatch(redacted["cookie"][0])


@pytest.mark.parametrize("levels", [0, 1, 2])
def test_a_value_in_single_quotes_may_hold_a_double_quote(levels: int) -> None:
    # in JSON text a `\"` ended a value in single quotes (it may close the string of JSON
    # inside JSON the value is in), so `password='pa"ss word'` was no value, and kept
    for secret in ('pa"ss word', '"sword', 'x\\"y z"'):
        note = f"set password='{secret}' now"
        redacted = read_nested(REDACTOR.redact(json_nested({"note": note}, levels)), levels)
        # (hashed as written: its escapes give another placeholder)
        assert PLACEHOLDER.sub("", redacted["note"]) == "set password='' now"


@pytest.mark.parametrize("levels", [0, 1])
def test_json_after_prose_in_a_string_keeps_its_strings_apart(levels: int) -> None:
    # the strings of JSON text after prose in a string (`"Result: {\"note\": ...}"`) are
    # found too: a value in single quotes in one of them ends with it, not at the next
    # apostrophe, in another
    inner = json.dumps({"note": "password='abcdefg", "x": "y'z", "n": 0})
    redacted = read_nested(REDACTOR.redact(json_nested({"r": f"Result: {inner}"}, levels)),
                           levels)
    parsed = json.loads(redacted["r"].removeprefix("Result: "))
    assert (parsed["x"], parsed["n"]) == ("y'z", 0) and "abcdefg" not in parsed["note"]


def test_a_string_that_starts_with_a_quote_holds_no_apostrophes_strings() -> None:
    # in JSON inside JSON a string starting `\\\"` was read as holding JSON, so its
    # apostrophes were strings' quotes: `'secret'` read as a quoted name, whose value ran
    # over the JSON after it to the next apostrophe
    value = {"a": "\"'''secret'='", "y": {"b": {"c": "'"}}, "n": 0}
    for indent in (None, 2):
        assert read_nested(REDACTOR.redact(json_nested(value, 1, indent)), 1) == value


@pytest.mark.parametrize("levels", [0, 1, 2])
def test_an_object_in_a_string_is_read_as_that_string_alone_is(levels: int) -> None:
    # an object after a name in a string is what the string holds, not the text's structure:
    # a string of it followed by another (`{"" "hunter2...`) made it none in JSON text, while
    # the string alone lost its secret
    note = 'password: {"" "hunter2-xyz'
    for indent in (None, 2):
        redacted = read_nested(REDACTOR.redact(json_nested({"n": [note]}, levels, indent)),
                               levels)
        assert PLACEHOLDER.sub("", redacted["n"][0]) == PLACEHOLDER.sub("", REDACTOR.redact(note))
        assert "hunter2" not in redacted["n"][0]


@pytest.mark.parametrize("secret", [",'hunter2x", ', "x": 12345678', ", 'it': 'hunter2'"])
def test_a_value_after_a_quoted_name_may_start_with_a_comma_and_a_quote(secret: str) -> None:
    # read as the gap between two strings (as where a string ending `secret= ` closes),
    # such a value was kept; after a quoted name the quote opens the string that follows
    value = {"secret": secret, "n": 1, "x": "it's"}
    for text in (repr(value), json.dumps(value), json_nested(value, 1)):
        redacted = REDACTOR.redact(text)
        assert secret not in redacted and "hunter2" not in redacted
    assert ast.literal_eval(REDACTOR.redact(repr(value)))["n"] == 1
    assert read_nested(REDACTOR.redact(json_nested(value, 1)), 1)["x"] == "it's"


def test_what_follows_a_quoted_name_in_a_string_ends_with_that_string() -> None:
    # a repr's string holding JSON (`'{"password":"'`): the name is its own string inside
    # it, and the value after it ran past the repr's string to a quote in a later one
    for note in ('{"password":"', '{"password": "', '{"password": ['):
        value = {"a": note, "Authorization": {"b": '"""sk-x'}, "n": 0}
        redacted = ast.literal_eval(REDACTOR.redact(repr(value)))
        assert (redacted["a"], redacted["n"]) == (note, 0)
        assert PLACEHOLDER.fullmatch(redacted["Authorization"]["b"])
    value = {"a": '{"password": "hunter2 x", "b": 1}', "c": "it's"}
    redacted = ast.literal_eval(REDACTOR.redact(repr(value)))
    assert json.loads(redacted["a"])["b"] == 1 and "hunter2" not in redacted["a"]


@pytest.mark.parametrize("line", [
    "password'='\npassword'='s3cr3t-value",  # the fuzzer's seed 56, in a repr
    'password: "\npassword: "s3cr3t-value',  # a quote left open on one line, a name on the next
    "note: 'one\ntwo' and api_key: 's3cr3t-value'",
])
@pytest.mark.parametrize("form", FORMS)
def test_a_quoted_value_in_a_string_ends_at_its_line_as_the_string_alone_reads_it(
        line: str, form: str) -> None:
    # a quote in a string of JSON or a repr opened a value that ran over the escaped line
    # break, hiding the next line's name, whose secret was kept; the string alone takes it
    redactor = REDACTOR
    write, read = written(form, None, True)
    redacted = redactor.redact(write({"x": line}))
    assert "s3cr3t-value" not in redacted
    assert read(redacted)["x"] == redactor.redact(line)
