"""A secret streamed in pieces (each chunk's delta) is redacted as the text the pieces make."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay_core._redact import Redactor
from tests.support.secret_leaks import fake_secrets, leaks

KEY = b"pieces-test-key"
FAKES = fake_secrets()
TEXT = "the config says " + " and ".join(f.in_text for f in FAKES) + " and nothing else"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(TEXT)), max_size=400))
def test_pieces_join_to_the_redacted_text_and_hold_no_secret(cuts: list[int]) -> None:
    bounds = sorted({0, len(TEXT), *cuts})
    pieces = [TEXT[a:b] for a, b in itertools.pairwise(bounds)]
    redactor = Redactor(key=KEY)
    out = redactor.redact_pieces(pieces)
    assert len(out) == len(pieces)
    assert "".join(out) == redactor.redact_text(TEXT)
    assert "<secret:" in "".join(out)
    # no secret can be pieced together from what is kept
    assert leaks("".join(out).encode(), FAKES) == []
    # a piece that holds no part of a secret is kept as it was
    spans = redactor._scanner.find(TEXT)
    for (a, b), piece, kept in zip(itertools.pairwise(bounds), pieces, out,
                                   strict=True):
        if not any(first < b and last > a for first, last, _ in spans):
            assert kept == piece


def test_pieces_without_secrets_come_back_unchanged() -> None:
    pieces = ["a harmless ", "stream of ", "", "words"]
    assert Redactor(key=KEY).redact_pieces(pieces) == pieces


def test_a_secret_escaped_in_json_pieces_gets_the_placeholder_of_the_secret_itself() -> None:
    # a tool call's streamed arguments: the PEM key's newlines are written `\n` there, and
    # the call's parsed arguments (what the tool's step stores) hold the key itself
    [pem] = [f.value for f in FAKES if f.kind == "pem"]
    arguments = json.dumps({"key": pem, "note": 'a "quoted" word'})
    pieces = [arguments[i:i + 5] for i in range(0, len(arguments), 5)]
    redactor = Redactor(key=KEY)
    as_json = "".join(redactor.redact_pieces(pieces, json_text=True))
    assert json.loads(as_json) == {"key": redactor.placeholder(pem, "private_key"),
                                   "note": 'a "quoted" word'}
    assert json.loads(as_json) == redactor.redact(json.loads(arguments))
    # as plain text the placeholder is that of the text as written
    as_text = "".join(redactor.redact_pieces(pieces))
    assert as_text == redactor.redact_text(arguments) != as_json


#: keys a tool's arguments may have: fields the default rules call secret, and others
_KEYS = st.sampled_from(["password", "api_key", "Authorization", "note", "cmd", "to", "x",
                         "arguments"])
_WORDS = st.sampled_from([*(f.in_text for f in FAKES), "PASSWORD=hunter2-long\nls -la",
                          'say "hi"', "caf\u00e9 \U0001f600", "tab\there", "", "a\\b"])
_TEXTS = st.lists(_WORDS, max_size=3).map(" ".join)
#: JSON text in the arguments (a tool that takes another call's arguments, as text)
_NESTED = st.dictionaries(_KEYS, _TEXTS, max_size=3).map(json.dumps)
_VALUES = st.recursive(
    st.one_of(_TEXTS, _NESTED, st.integers(), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=5), st.booleans(),
       st.lists(st.integers(min_value=0, max_value=4000), max_size=60))
def test_json_pieces_parse_to_the_arguments_redacted_as_a_dict(
        arguments: dict[str, object], ascii_only: bool, cuts: list[int]) -> None:
    """What a tool's streamed arguments are redacted to, joined and parsed, is what their
    parsed form is redacted to: the tool's step, which a replay's call must match."""
    text = json.dumps(arguments, ensure_ascii=ascii_only)
    bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    redactor = Redactor(key=KEY)
    out = redactor.redact_pieces(pieces, json_text=True)
    assert len(out) == len(pieces)
    assert json.loads("".join(out)) == redactor.redact(arguments)
    assert leaks("".join(out).encode(), FAKES) == []
    # the text stored whole (a message's call in the next prompt) is redacted to the same
    assert redactor.redact({"function": {"arguments": text}}) == {
        "function": {"arguments": "".join(out)}}


def test_a_secret_field_cut_off_by_the_stream_is_redacted_whole() -> None:
    # a stream that ended inside the value (the model hit its token limit)
    text = '{"user": "ops", "password": "correct horse bat'
    redactor = Redactor(key=KEY)
    out = "".join(redactor.redact_pieces([text[:20], text[20:]], json_text=True))
    assert out == '{"user": "ops", "password": "' + redactor.placeholder(
        "correct horse bat", "field")


def test_pieces_that_make_no_json_are_redacted_as_text() -> None:
    text = 'login with password="correct-horse-battery" please'
    redactor = Redactor(key=KEY)
    out = "".join(redactor.redact_pieces([text[:25], text[25:]], json_text=True))
    assert out == redactor.redact_text(text) and "correct-horse" not in out
