"""`password=...`-style secrets: found wherever the rule's own regex finds them, however close
together, and taken whole when quoted (a passphrase has spaces)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_core import RedactionRule, Redactor
from agentreplay_core._redact_rules import DEFAULT_RULES, QUOTED_MAX
from agentreplay_core._redact_scan import Scanner
from tests.support.text_forms import json_nested, read_nested

KEY = b"assignments-test-key"
[ASSIGNMENT] = [r for r in DEFAULT_RULES if r.name == "assignment"]
#: the same regex without the keyword screen: searched over the whole text, the reference
PLAIN = RedactionRule("assignment", pattern=ASSIGNMENT.regex.pattern)

_NAMES = st.sampled_from(["password", "api_key", "DB_PASSWORD", "secret", "token", "note",
                          "Authorization", "x"])
#: how a value is written after its name: the separator, and the quote that ends it
_FORMS = st.sampled_from([("=", ""), (": ", ""), ('": "', '"'), ("='", "'"), (" = ", ""),
                          ('="', '"')])
_VALUES = st.sampled_from(["hunter2xyz", "abcdef123456", "correct horse battery staple",
                           "Bearer abcdefghijklmnop123456", "pw", 'he said \\"hi\\" ok', ""])
#: what comes between assignments: always a space or a comma, so a value never runs into the
#: next name (then which name a value belongs to is a matter of reading)
_GLUE = st.sampled_from([" ", ", ", "\n", "; ", " and the ", " " + "x" * 40 + " "])
_PARTS = st.tuples(_NAMES, _FORMS, _VALUES, _GLUE).map(
    lambda p: f"{p[0]}{p[1][0]}{p[2]}{p[1][1]}{p[3]}")


@settings(max_examples=300, deadline=None)
@given(st.lists(_PARTS, min_size=1, max_size=6).map("".join))
def test_the_keyword_screen_finds_what_the_rules_regex_finds(text: str) -> None:
    # before, a keyword within 32 characters after another's match was passed over:
    # `api_key=abcdef123456 password=hunter2xyz` kept the password. (The screen tries each
    # keyword, so it may find more: after an empty value, `password= password=Bearer x...`,
    # a left-to-right search reads the second name as the first one's value.)
    screened = Scanner([ASSIGNMENT]).find(text)
    for start, end, _ in Scanner([PLAIN]).find(text):
        assert any(a <= start and end <= b for a, b, _ in screened), (start, end, screened)


def test_two_assignments_side_by_side_are_both_redacted() -> None:
    redactor = Redactor(key=KEY)
    out = redactor.redact_text("api_key=abcdef123456 password=hunter2xyz")
    assert "abcdef123456" not in out and "hunter2xyz" not in out


def test_a_quoted_value_is_redacted_whole() -> None:
    redactor = Redactor(key=KEY)
    text = json.dumps({"db_password": "correct horse battery staple", "user": "bob"})
    assert redactor.redact_text(text) == json.dumps(
        {"db_password": redactor.placeholder("correct horse battery staple", "assignment"),
         "user": "bob"})
    assert redactor.redact_text('DB_PASSWORD="correct horse battery staple" USER=bob') == \
        f'DB_PASSWORD="{redactor.placeholder("correct horse battery staple", "assignment")}"' \
        " USER=bob"
    # unquoted, the value still ends at a space; a scheme in the quotes stays readable
    assert redactor.redact_text("password: hunter2-long and more") == \
        f"password: {redactor.placeholder('hunter2-long', 'assignment')} and more"
    assert "<secret:bearer:" in redactor.redact_text(
        'Authorization: "Bearer abcdefghijklmnop123456"')


def test_a_number_in_json_text_under_a_secrets_name_is_kept_as_the_dict_keeps_it() -> None:
    # before, `"pin": 12345678` became `"pin": <secret:...>`: JSON no reader could parse
    redactor = Redactor(key=KEY, fields=["pin"])
    value = {"password": 12345678, "pin": -1.5e-7, "api_key": 10**20, "secret": "s3cr3t-v4lue",
             "token": {"id": 1234567, "refresh": 7654321.25}}
    for text in (json.dumps(value), json.dumps(value, indent=2), repr(value),
                 json.dumps(json.dumps(value, indent=1))):
        redacted = redactor.redact(text)
        assert "s3cr3t-v4lue" not in redacted
        for number in ("12345678", "1.5e-07", str(10**20), "1234567", "7654321.25"):
            assert number in redacted
    parsed, as_dict = json.loads(redactor.redact(json.dumps(value))), redactor.redact(value)
    assert {k: v for k, v in parsed.items() if k != "secret"} == \
        {k: v for k, v in as_dict.items() if k != "secret"} == \
        {k: v for k, v in value.items() if k != "secret"}
    assert parsed["secret"][-13:] == as_dict["secret"][-13:]  # the same digest
    # where no quote says it is JSON, digits are a secret like any other (a PIN)
    assert "12345678" not in redactor.redact("password=12345678 and pin: 12345678")
    assert "1234567x" not in redactor.redact('"password": 1234567x')


def test_a_quoted_value_holding_angle_brackets_is_redacted_whole() -> None:
    # before, `<` or `>` anywhere in a quoted value made it no value: `"password":
    # "p@ss>word99"` in a tool's JSON result was stored in clear
    redactor = Redactor(key=KEY)
    for secret in ("abc<def123", "p@ss>word99", "<<hunter2>>", "a <b> c d e"):
        value = {"password": secret, "note": "kept"}
        for text in (json.dumps(value), repr(value), json.dumps(json.dumps(value))):
            redacted = redactor.redact(text)
            assert secret not in redacted and "kept" in redacted, text
            assert redactor.redact(redacted) == redacted  # placeholders are left alone
        digest = redactor.redact(value)["password"][-13:]
        assert redactor.redact(json.dumps(value)) == json.dumps(
            {"password": f"<secret:assignment:{digest}", "note": "kept"})


def test_a_long_quoted_value_is_redacted_whole() -> None:
    # before, a quoted value of more than 200 characters was no quoted value: a cookie header
    # in a tool's JSON result lost its first cookie only, the others were stored in clear
    redactor = Redactor(key=KEY)
    cookie = "; ".join(f"c{i}=v{i}-secret-value-{i}" for i in range(40))
    words = " ".join(["staple"] * 600)  # 4,199 characters: past any window the screen uses
    short = " ".join(["it"] * 1300)  # words too short to be a value on their own
    for value in ({"cookie": cookie}, {"password": words[:4000], "note": "kept"},
                  {"headers": {"Cookie": cookie}}, {"secret": short}):
        for text in (json.dumps(value), json.dumps(value, indent=2), repr(value)):
            redacted = redactor.redact(text)
            assert "secret-value" not in redacted and "staple" not in redacted, text
            assert "it it" not in redacted, text
        assert json.loads(redactor.redact(json.dumps(value))).keys() == value.keys()
    digest = redactor.redact({"cookie": cookie})["cookie"][-13:]
    assert redactor.redact(json.dumps({"cookie": cookie})) == \
        json.dumps({"cookie": f"<secret:assignment:{digest}"})


def test_a_quoted_value_past_4_kib_is_redacted_whole() -> None:
    # before, a quoted value longer than QUOTED_MAX lost its first word only (or nothing, if
    # its words were short): a session's cookie header of 9 KB was stored all but in clear
    redactor = Redactor(key=KEY)
    cookie = "; ".join(f"c{i}=v{i}-secret-value-{i}" for i in range(350))
    assert len(cookie) > 2 * QUOTED_MAX
    short = " ".join(["it"] * 3000)
    words = " ".join(["staple"] * 600)
    for value in ({"cookie": cookie}, {"headers": {"Cookie": cookie}, "status": 200},
                  {"secret": short}, {"password": words, "note": "kept"}):
        dict_placeholder = json.dumps(redactor.redact(value))
        for text in (json.dumps(value), json.dumps(value, indent=2), repr(value),
                     json.dumps(json.dumps(value)), "; ".join(f"{k}: {v!r}" for k, v in
                                                             value.items())):
            redacted = redactor.redact(text)
            assert "secret-value" not in redacted and "staple" not in redacted, text[:80]
            assert "it it" not in redacted, text[:80]
            assert redactor.redact(redacted) == redacted
        assert redactor.redact(json.dumps(value)) == dict_placeholder.replace(
            "<secret:field:", "<secret:assignment:")
        inner = json.loads(redactor.redact(json.dumps(json.dumps(value))))
        assert json.loads(inner).keys() == value.keys()
    # a quote whose end the text lost (a log line cut short): the rest of its line
    for cut in (f'cookie: "{cookie}', f'{{"password": "{words}\nnext line kept'):
        redacted = redactor.redact(cut)
        assert "secret-value" not in redacted and "staple" not in redacted, cut[:80]
    assert redacted.endswith("\nnext line kept")
    # ... and the screen's window counts from the quote (an authorization scheme inside it):
    # spaces before it move no part of the value past the window
    for spaced in (f'Cookie:{" " * 20}"{"w" * 4090} {cookie}"',
                   json.dumps({"authorization": f"Basic {'w' * 4090} {cookie}"})):
        assert "secret-value" not in redactor.redact(spaced)


def test_json_inside_json_keeps_quotes_inside_a_value_and_its_scalars() -> None:
    # a quote inside the value is escaped one level further down than the value's own: before,
    # it ended the value (`ab"cdefgh` was kept in clear, `00000"` left a stray `\"` that
    # broke the inner JSON), and an indented `false` read as the value `false\n`
    redactor = Redactor(key=KEY)
    for secret in ('ab"cdefgh', '00000"', 'a\\b\\"cdef', "plain-value-1"):
        for levels in (1, 2, 3):
            text = json_nested({"password": secret, "ok": False, "n": None}, levels, indent=2)
            parsed = read_nested(redactor.redact(text), levels)
            assert parsed["password"].startswith("<secret:assignment:"), (secret, levels)
            assert parsed["ok"] is False and parsed["n"] is None


@pytest.mark.parametrize("text", [
    "password\t: hunter2xyz",  # a tab before the separator
    "password:\n  hunter2xyz",  # the value on the next line (YAML)
    "db:\n  password: hunter2xyz\n  user: ann",  # ... and a line after the value
    "api_key :\r\n 'correct horse battery'",
    "DB_PASSWORD=hunter2xyz\nDB_USER=ann",  # an .env file
])
@pytest.mark.parametrize("levels", [0, 1])
def test_escaped_spaces_around_and_after_a_value_read_as_the_string_reads(
        text: str, levels: int) -> None:
    # JSON text writes a line break as `\n`: no space to the rules, so `password\t:` was no
    # assignment, and a value ran on over the line break into the next line
    redactor = Redactor(key=KEY)
    redacted = redactor.redact(json_nested({"content": text}, levels))
    assert "hunter2xyz" not in redacted and "correct horse" not in redacted
    assert read_nested(redacted, levels)["content"] == redactor.redact(text)
