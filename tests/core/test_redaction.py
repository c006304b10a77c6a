"""Secrets become keyed placeholders before anything is stored; replay still matches them."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agentreplay_core import (
    RedactionRule,
    Redactor,
    ReplayDivergence,
    Store,
    decode,
    encode,
    match_key,
    open_store,
)
from agentreplay_core._redact_key import load_or_create_key
from agentreplay_core._redact_rules import PLACEHOLDER
from agentreplay_core._transfer import export_run
from tests.support.pgcluster import PgCluster
from tests.support.placeholders import documented_placeholder
from tests.support.secret_leaks import FakeSecret, fake_secrets, files_bytes, leaks, schema_bytes

KEY = b"test-redaction-key"
CI = settings(derandomize=True, database=None, deadline=None, max_examples=120,
              suppress_health_check=[HealthCheck.too_slow])


def expected_placeholder(secret: str, rule: str, key: bytes = KEY) -> str:
    """The documented placeholder, computed from its definition."""
    return documented_placeholder(key, secret, rule)


@pytest.fixture(autouse=True)
def _redaction_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores opened without a key use this one, not a key file in the real home."""
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", KEY.decode())


RULE_OF = {"openai": "openai", "anthropic": "anthropic", "aws_access_key": "aws",
           "google": "google", "github": "github", "github_oauth": "github",
           "github_pat": "github", "stripe": "stripe", "huggingface": "huggingface",
           "jwt": "jwt", "slack": "slack", "bearer": "bearer",
           "pem": "private_key", "password": "assignment", "url_password": "url_password",
           "cookie": "assignment", "credentials": "assignment", "long_cookie": "assignment"}


@pytest.mark.parametrize("fake", fake_secrets(), ids=lambda f: f.kind)
def test_each_kind_of_secret_becomes_its_keyed_placeholder(fake: FakeSecret) -> None:
    redacted = Redactor(key=KEY).redact_text(fake.in_text)
    # bearer, password and URL rules replace the secret and keep the words around it
    placeholder = expected_placeholder(fake.value, RULE_OF[fake.kind])
    assert redacted == fake.in_text.replace(fake.value, placeholder)
    assert fake.marker not in redacted


def test_placeholders_are_stable_per_key_and_differ_between_keys() -> None:
    secret = "sk-proj-" + "Zq9" * 10
    first, again = Redactor(key=KEY), Redactor(key=KEY)
    other = Redactor(key=b"another key")
    text = f"a {secret} b {secret}"
    assert first.redact_text(text) == again.redact_text(text)
    assert first.redact_text(text).count(expected_placeholder(secret, "openai")) == 2
    assert other.redact_text(text) != first.redact_text(text)


def test_fields_named_like_credentials_are_redacted_at_any_depth() -> None:
    value: dict[str, Any] = {
        "model": "gpt-x", "max_tokens": 256, "token": "Hello",  # not secrets
        "default_headers": {"Authorization": "Basic dXNlcjpwYXNz", "X-Api-Key": "k-1"},
        "openai_api_key": "opaque-key-1", "clientSecret": "cs-2", "DB_PASSWORD": "pw-3",
        "credentials": {"user": "u-4", "keys": ["k-5", "k-6"]},
        "password": 1234, "api_key": None, "secret": "",  # nothing to hide in these
    }
    redacted = Redactor(key=KEY).redact(value)
    for key in ("openai_api_key", "clientSecret", "DB_PASSWORD"):
        assert redacted[key] == expected_placeholder(value[key], "field")
    assert redacted["default_headers"] == {
        "Authorization": expected_placeholder("Basic dXNlcjpwYXNz", "field"),
        "X-Api-Key": expected_placeholder("k-1", "field")}
    assert redacted["credentials"] == {"user": expected_placeholder("u-4", "field"),
                                       "keys": [expected_placeholder("k-5", "field"),
                                                expected_placeholder("k-6", "field")]}
    kept = ("model", "max_tokens", "token", "password", "api_key", "secret")
    assert {k: redacted[k] for k in kept} == {k: value[k] for k in kept}


def test_user_rules_from_code_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    custom = Redactor(key=KEY, fields=["x-acme-session"],
                      patterns=[r"acme_(?P<secret>[0-9a-f]{16})"],
                      rules=[RedactionRule("ticket", pattern=r"TKT-\d{6}")])
    out = custom.redact({"X-ACME-Session": "s1", "q": "id acme_0123456789abcdef TKT-123456"})
    assert out == {"X-ACME-Session": expected_placeholder("s1", "custom_field"),
                   "q": f"id acme_{expected_placeholder('0123456789abcdef', 'custom')} "
                        f"{expected_placeholder('TKT-123456', 'ticket')}"}
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", KEY.decode())
    monkeypatch.setenv("AGENTREPLAY_REDACT_FIELDS", "x-acme-session, internal_ref")
    monkeypatch.setenv("AGENTREPLAY_REDACT_PATTERNS", r'["acme_[0-9a-f]{16}"]')
    with open_store("memory:") as store, store.record() as rec:
        rec.record("tool", "t", {"internal_ref": "r-9"}, "acme_0123456789abcdef")
    (step,) = store.load_steps(rec.run_id)
    assert step.input == {"internal_ref": expected_placeholder("r-9", "custom_field")}
    assert step.output == expected_placeholder("acme_0123456789abcdef", "custom")
    monkeypatch.setenv("AGENTREPLAY_REDACT_PATTERNS", "acme_[0-9")
    with pytest.raises(ValueError, match="AGENTREPLAY_REDACT_PATTERNS"):
        open_store("memory:")
    with pytest.raises(ValueError, match="needs exactly one of"):
        RedactionRule("both", pattern="a", fields="b")
    with pytest.raises(ValueError, match="matches the empty string"):
        Redactor(patterns=["x*"])


ORDINARY = [
    "The task-force met about disk-usage; ask-me-anything sessions resume next week.",
    "Bearer of bad news: the secret to good bread is time. Password reset mail was sent.",
    "Use max_tokens: 256 and a temperature of 0.2; the token budget is 4096.",
    "commit 3f9c2a1b7d4e5f60718293a4b5c6d7e8f9012345 by anna@example.com on 2024-05-01",
    "run-1b4e28ba-2fa1-11d2-883f-0016d3cca427 / call_8fJ2kL0pQ9rS1tU3vW5xY7zA",
    "https://docs.example.com/api/v2/keys?page=3#section-4",
    "AKIA is not a key on its own, nor is sk- or ghp_ or xoxb- or AIza or eyJ.",
    "aGVsbG8gd29ybGQsIHRoaXMgaXMgYSBwZXJmZWN0bHkgbm9ybWFsIHNlbnRlbmNlIGluIGJhc2U2NA==",
    "The API key rotation policy: every 90 days; credentials are managed by IT.",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert Redactor(key=KEY).redact_text(text) == text


@settings(CI)
@given(st.binary(min_size=16, max_size=600))
def test_base64_of_ordinary_data_is_left_alone(data: bytes) -> None:
    import base64

    text = base64.b64encode(data).decode()
    assert Redactor(key=KEY).redact_text(text) == text


@dataclasses.dataclass
class Conn:
    dsn: str
    retries: int


class Settings(BaseModel):
    name: str
    api_key: str


def test_tagged_values_keep_their_types_and_lose_their_secrets() -> None:
    token = "ghp_" + "A1b2" * 9
    value = {
        "tuple": ("ok", f"token {token}"), "set": {f"x {token}"}, "bytes": token.encode(),
        "nul": f"a\x00{token}", "model": Settings(name="n", api_key="k-9"),
        "dc": Conn(dsn="postgresql://u:pw-secret-1@h/db", retries=3),
        "escaped": {"__ar__": "mine", "authorization": "t-7"}, "map": {7: token},
    }
    redactor = Redactor(key=KEY)
    out = decode(redactor.redact_encoded(encode(value))[0])
    ph = expected_placeholder(token, "github")
    assert out["tuple"] == ("ok", f"token {ph}") and out["set"] == {f"x {ph}"}
    assert out["bytes"] == ph.encode() and out["nul"] == f"a\x00{ph}"
    assert out["model"] == Settings(name="n", api_key=expected_placeholder("k-9", "field"))
    assert out["dc"] == Conn(
        dsn=f"postgresql://u:{expected_placeholder('pw-secret-1', 'url_password')}@h/db",
        retries=3)
    assert out["escaped"] == {"__ar__": "mine",
                              "authorization": expected_placeholder("t-7", "field")}
    assert out["map"] == {7: ph}


def test_replay_matches_a_prompt_holding_a_secret_and_hands_back_the_placeholder(
        any_store: Store) -> None:
    fakes = fake_secrets()
    prompt = "\n".join(f.in_text for f in fakes)
    with any_store.record(name="with secrets") as rec:
        answer = rec.call("llm", "model", {"prompt": prompt}, lambda: f"echo: {prompt}")
    assert answer == f"echo: {prompt}"  # the agent itself sees its real values
    (step,) = any_store.load_steps(rec.run_id)
    stored = f"{step.input}{step.output}"
    assert not [f.kind for f in fakes if f.marker in stored]
    assert any_store.verify(rec.run_id).ok
    with any_store.replay(rec.run_id) as player:
        replayed = player.next("llm", "model", {"prompt": prompt})
    assert replayed == decode(step.output) and "<secret:" in replayed
    with any_store.replay(rec.run_id, secrets=[f.value for f in fakes]) as player:
        assert player.next("llm", "model", {"prompt": prompt}) == answer


def test_secrets_mapping_by_placeholder_and_custom_match_keys(any_store: Store) -> None:
    password = "pw-" + "x7Q" * 6
    with any_store.record() as rec:
        rec.record("tool", "login", {"password": password}, {"session": f"password={password}"},
                   match_key="my-key-1")
    (step,) = any_store.load_steps(rec.run_id)
    # a caller's key over a request with a secret is keyed as well (no offline guessing)
    assert step.match_key != "my-key-1"
    placeholder = step.input["password"]
    with any_store.replay(rec.run_id, secrets={placeholder: password}) as player:
        out = player.next("tool", "login", {"password": password}, match_key="my-key-1")
    assert out == {"session": f"password={password}"}
    with pytest.raises(ValueError, match="placeholders as stored"), \
            any_store.replay(rec.run_id, secrets={"not a placeholder": "x"}):
        pass


def test_a_placeholder_replay_handed_back_gives_the_recorded_custom_match_key(
        any_store: Store) -> None:
    token = "xoxp-2222222222-" + "Qz7" * 8
    redaction = any_store.redaction
    assert redaction is not None

    def key_of(request: dict[str, str]) -> str:  # as the docs say: over the redacted request
        return match_key("llm", "m", redaction.redact(request))

    with any_store.record() as rec:
        read = rec.call("tool", "read_config", {}, lambda: f"token {token}")
        request = {"prompt": f"summarise: {read}"}  # the real secret, from the live tool
        rec.record("llm", "m", request, "a summary", match_key=key_of(request))
    with any_store.replay(rec.run_id) as player:
        read = player.next("tool", "read_config", {})
        assert read == f"token {expected_placeholder(token, 'slack')}"
        request = {"prompt": f"summarise: {read}"}  # now the placeholder
        assert player.next("llm", "m", request, match_key=key_of(request)) == "a summary"


def test_another_redaction_key_diverges_with_a_hint_and_never_shows_the_secret(
        tmp_path: Path) -> None:
    secret = "sk-proj-" + "Kk8" * 10
    url = f"file:{tmp_path / 'runs'}"
    with open_store(url, redaction=Redactor(key=KEY)) as home, home.record() as rec:
        rec.record("llm", "m", {"prompt": f"key {secret}"}, "ok")
    with open_store(url, redaction=Redactor(key=b"ci machine")) as ci, \
            pytest.raises(ReplayDivergence) as err, ci.replay(rec.run_id) as player:
        player.next("llm", "m", {"prompt": f"key {secret}"})
    assert "another redaction key" in str(err.value) and secret not in str(err.value)
    with open_store(url, redaction=Redactor(key=KEY)) as same, same.replay(rec.run_id) as p:
        assert p.next("llm", "m", {"prompt": f"key {secret}"}) == "ok"


def test_metadata_name_tags_and_errors_are_redacted(any_store: Store) -> None:
    token = "xoxb-123456789012-" + "Ab9" * 8

    def fail() -> None:
        raise PermissionError(f"slack refused {token}")

    with any_store.record(name=f"bot {token}", metadata={"slack_token": token, "n": 1},
                          tags=[f"t {token}"]) as rec, pytest.raises(PermissionError):
        rec.call("tool", "post", {"text": "hi"}, fail)
    run = any_store.get_run(rec.run_id)
    (step,) = any_store.load_steps(rec.run_id)
    everything = f"{run.name}{run.metadata}{step.output}"
    assert token not in everything and expected_placeholder(token, "slack") in everything
    assert any_store.verify(rec.run_id).ok


def test_redaction_can_be_switched_off() -> None:
    secret = "sk-proj-" + "Nn1" * 10
    with open_store("memory:", redaction=None) as store, store.record() as rec:
        rec.record("tool", "t", {"k": secret}, "ok")
    assert store.load_steps(rec.run_id)[0].input == {"k": secret}


def test_the_key_comes_from_env_then_store_key_then_a_private_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "AKIA" + "Q7ZX" * 4
    monkeypatch.delenv("AGENTREPLAY_REDACTION_KEY", raising=False)
    key_file = tmp_path / "config" / "redaction.key"
    with open_store("memory:", hmac_key=b"chain-key") as store:
        assert store.redaction is not None
        assert store.redaction.redact_text(secret) == expected_placeholder(
            secret, "aws", b"chain-key")
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", "env-key")
    assert Redactor().redact_text(secret) == expected_placeholder(secret, "aws", b"env-key")
    monkeypatch.delenv("AGENTREPLAY_REDACTION_KEY")
    created = Redactor(key_file=key_file).redact_text(secret)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert created == expected_placeholder(secret, "aws", key_file.read_bytes().strip())
    assert Redactor(key_file=key_file).redact_text(secret) == created  # created once
    assert load_or_create_key(key_file) == key_file.read_bytes().strip()
    assert not [p for p in key_file.parent.iterdir() if p.name != "redaction.key"]


SECRETS = st.sampled_from(fake_secrets())
FILLER = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)


@settings(CI)
@given(SECRETS, FILLER, FILLER)
def test_property_no_secret_survives_and_redaction_is_idempotent(
        fake: FakeSecret, before: str, after: str) -> None:
    redactor = Redactor(key=KEY)
    text = f"{before} {fake.in_text} {after}"
    once = redactor.redact_text(text)
    assert fake.marker not in once or fake.marker in f"{before}{after}"
    assert redactor.redact_text(once) == once


JSONISH: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.integers() | FILLER,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(FILLER, inner, max_size=4),
    max_leaves=12)


@settings(CI)
@given(JSONISH, SECRETS, st.sampled_from(["api_key", "Authorization", "note"]))
def test_property_trees_lose_their_secrets_and_stay_decodable(
        tree: Any, fake: FakeSecret, field: str) -> None:
    redactor = Redactor(key=KEY)
    value = {"data": tree, field: fake.in_text, "list": [fake.in_text, tree]}
    encoded, changed = redactor.redact_encoded(encode(value))
    assert changed and fake.marker not in repr(decode(encoded))
    assert redactor.redact_encoded(encoded) == (encoded, False)


def test_the_key_file_is_never_group_or_world_readable(tmp_path: Path) -> None:
    path = tmp_path / "k" / "redaction.key"
    old = os.umask(0)
    try:
        load_or_create_key(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def record_everywhere(store: Store, fakes: list[FakeSecret]) -> UUID:
    """A run holding every secret in requests, results, an error, metadata and the name."""
    everything = " | ".join(f.in_text for f in fakes)

    def fail() -> None:
        raise RuntimeError(f"upstream said: {everything}")

    with store.record(name=f"leaky {fakes[0].in_text}", metadata={"notes": everything},
                      tags=[fakes[1].in_text]) as rec:
        for fake in fakes:
            rec.call("tool", "lookup", {"query": fake.in_text, "api_key": fake.value},
                     lambda f=fake: {"result": f.in_text, "raw": f.in_text.encode()})
        with pytest.raises(RuntimeError):
            rec.call("tool", "broken", {"q": "x"}, fail)
    return rec.run_id


def test_no_stored_byte_holds_a_secret(pg_dsn: str, pg_schema: str,
                                       private_cluster: PgCluster, tmp_path: Path) -> None:
    fakes = fake_secrets()
    with open_store(pg_dsn, schema=pg_schema, spool_dir=tmp_path / "unused") as pg:
        run_id = record_everywhere(pg, fakes)
        export_run(pg, run_id, tmp_path / "export.jsonl")
    with open_store(f"file:{tmp_path / 'files'}", spool_dir=tmp_path / "unused") as files:
        record_everywhere(files, fakes)
    down = open_store(private_cluster.dsn, schema="spooled", spool_dir=tmp_path / "spool")
    down._sink.retry_seconds = 0.3
    private_cluster.stop()
    spooled = record_everywhere(down, fakes)
    down.close()
    assert (tmp_path / "spool" / f"{spooled}.jsonl").exists()
    stored = schema_bytes(pg_dsn, pg_schema) + files_bytes(
        tmp_path / "export.jsonl", tmp_path / "files", tmp_path / "spool")
    assert leaks(stored, fakes) == []
    # the same run without redaction leaks every kind: the search above can find them
    with open_store(f"file:{tmp_path / 'plain'}", redaction=None) as plain:
        record_everywhere(plain, fakes)
    assert leaks(files_bytes(tmp_path / "plain"), fakes) == [f.kind for f in fakes]


def test_a_fork_of_a_replay_given_the_secrets_stores_them_redacted(any_store: Store) -> None:
    token = "ghp_" + "Fk4" * 12
    with any_store.record() as rec:
        rec.record("tool", "clone", {"repo": "a"}, f"cloned with {token}")
        rec.record("tool", "push", {"repo": "a"}, "pushed")
    with any_store.replay(rec.run_id, secrets=[token], on_divergence="live") as player:
        assert player.next("tool", "clone", {"repo": "a"}) == f"cloned with {token}"
        assert player.next("tool", "push", {"repo": "b"}, live=lambda: f"pushed {token}") \
            == f"pushed {token}"
        assert player.fork is not None
        fork_id = player.fork.run_id
    stored = [s.output for s in any_store.load_steps(fork_id)]
    placeholder = expected_placeholder(token, "github")
    assert stored == [f"cloned with {placeholder}", f"pushed {placeholder}"]


def test_secrets_written_escaped_in_json_text_are_handed_back_as_they_were_written(
        any_store: Store) -> None:
    # a tool that returns JSON as a string: a secret JSON escapes (a PEM key's newlines) is
    # redacted as it is written there, and handed back so, given the secret itself
    fakes = fake_secrets()
    result = json.dumps({"config": " and ".join(f.in_text for f in fakes)})
    with any_store.record(name="json text") as rec:
        rec.record("tool", "read_config", {}, result)
    (step,) = any_store.load_steps(rec.run_id)
    assert not [f.kind for f in fakes if f.marker in str(step.output)]
    with any_store.replay(rec.run_id, secrets=[f.value for f in fakes]) as player:
        assert player.next("tool", "read_config", {}) == result


def test_a_tool_calls_arguments_text_is_redacted_as_the_arguments_and_handed_back(
        any_store: Store) -> None:
    # a model's message holding a tool call's arguments as JSON text (OpenAI-style): they are
    # redacted as the dict they parse to is (a password argument whole, a PEM key as the
    # key, not as JSON writes it), and `secrets=` puts them back as JSON writes them
    fakes = fake_secrets()
    [pem] = [f.value for f in fakes if f.kind == "pem"]
    arguments = {"user": "ops", "password": "correct horse battery staple", "key": pem,
                 "note": " and ".join(f.in_text for f in fakes)}
    message = {"role": "assistant", "tool_calls": [
        {"id": "call_1", "function": {"name": "login", "arguments": json.dumps(arguments)}}]}
    with any_store.record(name="arguments") as rec:
        rec.record("llm", "model", {}, message)
        rec.record("tool", "login", arguments, "ok")
    chat, called = any_store.load_steps(rec.run_id)
    stored = chat.output["tool_calls"][0]["function"]["arguments"]
    assert json.loads(stored) == called.input  # what a replay's parsed call must match
    assert "horse" not in stored and not [f.kind for f in fakes if f.marker in stored]
    handed_back = json.dumps(arguments | {"password": called.input["password"]})
    with any_store.replay(rec.run_id, secrets=[f.value for f in fakes]) as player:
        replayed = player.next("llm", "model", {})
        # the agent parses the text it was handed and calls the tool with it
        assert player.next("tool", "login", json.loads(
            replayed["tool_calls"][0]["function"]["arguments"])) == "ok"
    assert replayed["tool_calls"][0]["function"]["arguments"] == handed_back


def test_a_secret_field_alone_in_json_text_is_redacted(any_store: Store) -> None:
    # nothing else in the step looks like a secret: no pattern rule has a candidate (a
    # cookie's value has no `password=` form), and the field is a key inside the text, not
    # one of the step's own dicts
    text = json.dumps({"user": "ops", "cookie": "correct horse battery staple"})
    with any_store.record(name="one field") as rec:
        rec.record("llm", "model", {}, {"function": {"name": "login", "arguments": text}})
    (step,) = any_store.load_steps(rec.run_id)
    stored = json.loads(step.output["function"]["arguments"])
    assert stored["user"] == "ops" and PLACEHOLDER.fullmatch(stored["cookie"])


def test_a_character_escaped_as_a_surrogate_pair_in_json_text_is_one_character() -> None:
    # `json.dumps` writes a character beyond U+FFFF as two \u escapes, which may follow
    # another \u escape: the text must give the placeholder the parsed dict gives
    redactor = Redactor(key=KEY)
    arguments = {"password": "tab\x1f\U0001f511key", "note": "\x1f\U0001f511 sk-proj-" + "Kk8" * 10}
    text = redactor.redact({"arguments": json.dumps(arguments)})["arguments"]
    assert "\\u001f\\ud83d\\udd11" in json.dumps(arguments)
    assert json.loads(text) == redactor.redact(arguments)
