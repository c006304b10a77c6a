"""A request holding secrets replays under other redaction rules than it was recorded with
(a newer agentreplay, a laptop without production's `fields=`), as long as the redaction key
is the same: it is compared with its recording as sent, each placeholder's text its secret."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay_core import Redactor, ReplayDivergence, encode
from agentreplay_core._redact_match import Likeness, compare_redacted
from agentreplay_core._redact_replay import secret_verifier
from tests.support.placeholders import documented_digest
from tests.support.redaction_rules import first_word_rules
from tests.support.secret_leaks import fake_secrets

KEY = b"test-redaction-key"
CI = settings(derandomize=True, database=None, deadline=None, max_examples=80,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PASSPHRASE = "correct horse battery staple"


def _digest(secret: str, key: bytes = KEY) -> str:
    """A placeholder's digest, from its definition in SECURITY.md."""
    return documented_digest(key, secret)


#: the older rules: a quoted passphrase's first word only, no field names
OLD_RULES = first_word_rules(KEY)


def test_a_field_rule_the_replay_lacks_still_matches(stores: Any,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    # recorded where the deployment knew one more field name, replayed on a laptop without it
    request = {"headers": {"x-acme-session": "s3cr3t-session-value"}, "prompt": "hello"}
    recording = Redactor(key=KEY, fields=["x-acme-session"])
    with stores(recording).record() as rec:
        rec.record("llm", "m", request, "ok")
    laptop = stores(Redactor(key=KEY))
    (step,) = laptop.load_steps(rec.run_id)
    assert step.input["headers"]["x-acme-session"] == \
        f"<secret:custom_field:{_digest('s3cr3t-session-value')}>"
    with caplog.at_level(logging.INFO, logger="agentreplay"), \
            laptop.replay(rec.run_id) as player:
        assert player.next("llm", "m", request) == "ok"
    assert f"(redaction rules recorded: {recording.rules_digest}, in use: " \
        f"{Redactor(key=KEY).rules_digest})" in caplog.text


def test_a_field_rule_only_the_replay_has_still_matches(stores: Any) -> None:
    request = {"headers": {"x-acme-session": "s3cr3t-session-value"}, "prompt": "hello"}
    with stores(Redactor(key=KEY)).record() as rec:  # the session went in as it was
        rec.record("llm", "m", request, "ok")
    with stores(Redactor(key=KEY, fields=["x-acme-session"])).replay(rec.run_id) as player:
        assert player.next("llm", "m", request) == "ok"


def test_a_run_recorded_under_older_rules_replays_under_the_defaults(stores: Any) -> None:
    # older rules took a quoted passphrase's first word: the defaults take it whole, so every
    # model request below gets another key than its recording's
    config = f'DB_PASSWORD="{PASSPHRASE}"'
    read = json.dumps({"user": "ops", "password": PASSPHRASE})  # what the tool returned
    prompt = {"messages": [{"role": "user", "content": f"connect with {config}"}]}
    call = {"function": {"name": "read_config", "arguments": '{"path": "db.env"}'}}
    then = {"messages": [*prompt["messages"], {"role": "assistant", "tool_calls": [call]},
                         {"role": "tool", "content": read}]}
    with stores(OLD_RULES).record() as rec:
        rec.record("llm", "model", prompt, {"tool_calls": [call]})
        rec.record("tool", "read_config", {"path": "db.env"}, read)
        rec.record("llm", "model", then, "done")
    replaying = stores(Redactor(key=KEY))
    steps = replaying.load_steps(rec.run_id)
    assert f"<secret:assignment:{_digest('correct')}> horse" in steps[1].output
    with replaying.replay(rec.run_id) as player:
        assert player.next("llm", "model", prompt) == steps[0].output
        # the tool's result comes back as recorded, and the agent sends it on as it was live
        assert player.next("tool", "read_config", {"path": "db.env"}) == steps[1].output
        assert player.next("llm", "model", then) == "done"
    for step, request in ((steps[0], prompt), (steps[2], then)):
        assert encode(Redactor(key=KEY).redact(request)) != step.input


def test_sequential_replay_matches_under_other_rules_too(stores: Any) -> None:
    request = {"prompt": f'password: "{PASSPHRASE}"'}
    with stores(OLD_RULES).record() as rec:
        rec.record("llm", "m", request, "one")
        rec.record("llm", "m", {"prompt": "plain"}, "two")
    with stores(Redactor(key=KEY)).replay(rec.run_id, match="sequential") as player:
        assert player.next("llm", "m", request) == "one"
        assert player.next("llm", "m", {"prompt": "plain"}) == "two"


def test_another_secret_diverges_naming_the_step_it_is_and_never_shows_the_secret(
        stores: Any) -> None:
    # the rules are the same: the new secret's placeholder is simply not the recorded one
    old, new = PASSPHRASE, "tr0ub4dor and 3 more words"
    with stores(Redactor(key=KEY)).record() as rec:
        rec.record("llm", "m", {"prompt": "hello"}, "hi")
        rec.record("llm", "m", {"prompt": f'password: "{old}"'}, "ok")
    with pytest.raises(ReplayDivergence) as err, \
            stores(Redactor(key=KEY)).replay(rec.run_id) as player:
        player.next("llm", "m", {"prompt": "hello"})
        player.next("llm", "m", {"prompt": f'password: "{new}"'})
    message = str(err.value)
    assert "it is the request recorded at step 2 but for its secrets" in message
    assert "tr0ub4dor" not in message and "horse" not in message


def test_another_key_says_so(stores: Any) -> None:
    request = {"prompt": f'password: "{PASSPHRASE}"'}
    with stores(Redactor(key=KEY)).record() as rec:
        rec.record("llm", "m", request, "ok")
    with pytest.raises(ReplayDivergence) as err, \
            stores(Redactor(key=b"a laptop's own key")).replay(rec.run_id) as player:
        player.next("llm", "m", request)
    assert "but for its secrets" in str(err.value)
    assert "recorded with another redaction key" in str(err.value)
    assert "battery" not in str(err.value)


def test_another_key_never_shows_a_secret_only_the_recordings_rules_knew(stores: Any) -> None:
    # CI has neither production's key nor its field names: its rules leave the session as it
    # is, but the recording says where a secret stands, and the report masks it there
    request = {"headers": {"x-acme-session": "s3cr3t-session-value"}, "prompt": "hello"}
    with stores(Redactor(key=KEY, fields=["x-acme-session"])).record() as rec:
        rec.record("llm", "m", request, "ok")
    ci = Redactor(key=b"ci machine")
    with pytest.raises(ReplayDivergence) as err, stores(ci).replay(rec.run_id) as player:
        player.next("llm", "m", request)
    assert "but for its secrets" in str(err.value)
    assert "s3cr3t" not in str(err.value)
    # the diff shows the placeholder's digest under the key in use
    assert _digest("s3cr3t-session-value", b"ci machine") in str(err.value)


def test_a_request_that_differs_besides_its_secrets_still_diverges(stores: Any) -> None:
    with stores(OLD_RULES).record() as rec:
        rec.record("llm", "m", {"prompt": f'password: "{PASSPHRASE}", then summarise'}, "ok")
    with pytest.raises(ReplayDivergence) as err, \
            stores(Redactor(key=KEY)).replay(rec.run_id) as player:
        player.next("llm", "m", {"prompt": f'password: "{PASSPHRASE}", then translate'})
    assert "but for its secrets" not in str(err.value)
    assert "redaction rules" not in str(err.value)  # they are no cause: it was compared as sent


def test_a_caller_keyed_request_under_other_rules_diverges_with_a_hint_naming_them(
        stores: Any) -> None:
    # a key the caller computed cannot be compared as sent: the rules are a likely cause
    request = {"headers": {"x-acme-session": "s3cr3t-session-value"}, "prompt": "hello"}
    recording = Redactor(key=KEY, fields=["x-acme-session"])
    with stores(recording).record() as rec:
        rec.record("llm", "m", request, "ok", match_key="mine")
    with pytest.raises(ReplayDivergence) as err, \
            stores(Redactor(key=KEY)).replay(rec.run_id) as player:
        player.next("llm", "m", request, match_key="mine")
    assert f"other redaction rules than this replay's (rules {recording.rules_digest}" in \
        str(err.value)


# -- the comparison itself --------------------------------------------------------------------

def _ph(secret: str, rule: str = "custom", key: bytes = KEY) -> str:
    return f"<secret:{rule}:{_digest(secret, key)}>"


IS_SECRET = secret_verifier(Redactor(key=KEY, defaults=False))


@pytest.mark.parametrize(("recorded", "live", "likeness"), [
    # each placeholder ends where the text after it starts; several places may fit
    (f"a {_ph('x=1')} b {_ph('y')}", "a x=1 b y", Likeness.SAME),
    (f'"{_ph("a b")}", "{_ph("c")}"', '"a b", "c"', Likeness.SAME),
    (f"{_ph('ab')}{_ph('cd')}", "abcd", Likeness.SAME),  # side by side
    (f"k={_ph('s3cret')}", f"k={_ph('s3cret')}", Likeness.SAME),  # a placeholder handed back
    (f"k={_ph('s3cret')} and", f"k={_ph('s3cret')} and", Likeness.SAME),
    (f"k={_ph('s3cret')}", "k=s3cre7", Likeness.SECRETS_DIFFER),
    (f"k={_ph('s3cret', key=b'other')}", "k=s3cret", Likeness.SECRETS_DIFFER),
    (f"k={_ph('s3cret')}", "j=s3cret", Likeness.DIFFERENT),
    (f"k={_ph('s3cret')}!", "k=s3cret?", Likeness.DIFFERENT),
    (f"k={_ph('s3cret')}", "k=", Likeness.DIFFERENT),  # a secret is never empty
    ("plain", "plain!", Likeness.DIFFERENT),
    # JSON text: the escaped secret was hashed as the string it escapes
    (json.dumps({"p": _ph('say "hi"\n')}), json.dumps({"p": 'say "hi"\n'}), Likeness.SAME),
])
def test_texts_compare(recorded: str, live: str, likeness: Likeness) -> None:
    assert compare_redacted(recorded, live, IS_SECRET) is likeness


def test_trees_compare_by_type_length_and_keys() -> None:
    assert compare_redacted([1, "a"], [1, "a"], IS_SECRET) is Likeness.SAME
    assert compare_redacted([1], [1.0], IS_SECRET) is Likeness.DIFFERENT
    assert compare_redacted([1], [True], IS_SECRET) is Likeness.DIFFERENT
    assert compare_redacted([_ph("abc")], [["abc"]], IS_SECRET) is Likeness.DIFFERENT
    assert compare_redacted([_ph("abc")], ["abc", "d"], IS_SECRET) is Likeness.DIFFERENT
    assert compare_redacted({_ph("k3y"): 1, "b": 2}, {"k3y": 1, "b": 2}, IS_SECRET) \
        is Likeness.SAME  # a key that held a secret
    assert compare_redacted({_ph("k3y"): 1}, {"k3y": 2}, IS_SECRET) is Likeness.DIFFERENT
    assert compare_redacted({"a": _ph("abc"), "b": 1}, {"a": "abd", "b": 1}, IS_SECRET) \
        is Likeness.SECRETS_DIFFER
    assert compare_redacted({"a": _ph("abc"), "b": 1}, {"a": "abd", "b": 2}, IS_SECRET) \
        is Likeness.DIFFERENT


def test_a_field_value_is_compared_as_hashed_with_its_pattern_secrets_replaced() -> None:
    token = "xoxb-123456789012-" + "Ab9" * 8
    redactor = Redactor(key=KEY)
    value = f"slack {token}"
    recorded = encode(redactor.redact({"credentials": value}))
    assert compare_redacted(recorded, {"credentials": value}, secret_verifier(redactor)) \
        is Likeness.SAME


def _secret_trees() -> st.SearchStrategy[Any]:
    texts = st.sampled_from([s.in_text for s in fake_secrets()] + [
        f'DB_PASSWORD="{PASSPHRASE}"', "no secret here", "api_key=abcdef123456 password=hunter2x"])
    words = st.text(max_size=8)
    text = st.builds(lambda a, b, c: f"{a}{b}{c}", words, texts, words)
    leaves = st.one_of(text, st.integers(), st.builds(
        lambda t: json.dumps({"password": t, "note": "x"}), text))
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["arguments", "api_key", "note", "cookie"]), inner,
                        max_size=3)), max_leaves=8)


@CI
@given(_secret_trees())
def test_redacted_under_any_rules_compares_same_with_the_same_key(tree: Any) -> None:
    # A secret field's value is hashed with the pattern secrets in it replaced: the replay
    # needs the recording's pattern rules for that one (not its field names)
    live = encode(tree)
    defaults, more_fields = Redactor(key=KEY), Redactor(key=KEY, fields=["note"])
    for recording, replaying in ((defaults, more_fields), (more_fields, defaults),
                                 (OLD_RULES, defaults), (OLD_RULES, more_fields)):
        recorded, changed = recording.redact_encoded(live)
        assert compare_redacted(recorded, live, secret_verifier(replaying)) is Likeness.SAME
        if changed:
            assert compare_redacted(recorded, live, secret_verifier(
                Redactor(key=b"other", defaults=False))) is Likeness.SECRETS_DIFFER


def _string_places(tree: Any, place: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if type(tree) is str:
        return [place]
    items = tree.items() if type(tree) is dict else enumerate(tree) if type(tree) is list else ()
    return [p for key, value in items for p in _string_places(value, (*place, key))]


def _changed(tree: Any, place: tuple[Any, ...], at: int, char: str) -> Any:
    if not place:
        return tree[:at] + char + tree[at:]
    copy = dict(tree) if type(tree) is dict else list(tree)
    copy[place[0]] = _changed(tree[place[0]], place[1:], at, char)
    return copy


@CI
@given(_secret_trees(), st.data())
def test_a_request_changed_anywhere_never_compares_same(tree: Any, data: st.DataObject) -> None:
    # one character more, in the text around a secret or inside one: the comparison that lets
    # a request replay under other rules must never take it for the recorded request
    live = encode(tree)
    places = _string_places(live)
    if not places:
        return
    place = data.draw(st.sampled_from(places))
    text = live
    for key in place:
        text = text[key]
    changed = _changed(live, place, data.draw(st.integers(0, len(text))),
                       data.draw(st.sampled_from(["Z", " ", '"', "\\", "é"])))
    recorded, _ = Redactor(key=KEY).redact_encoded(live)
    for replaying in (Redactor(key=KEY), Redactor(key=KEY, fields=["note"])):
        assert compare_redacted(recorded, changed, secret_verifier(replaying)) \
            is not Likeness.SAME
