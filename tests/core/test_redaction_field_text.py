"""A secret field's value is a secret in text too: a header dump (`X-Acme-Session: ...`) or
JSON text a tool returned (`{"cookie": "..."}`) holds it under the field's name."""

from __future__ import annotations

import json

import pytest

from agentreplay_core import Redactor, Store, open_store
from tests.support.placeholders import documented_placeholder
from tests.support.text_forms import json_nested, read_nested

KEY = b"field-text-key"
SESSION = "s3cr3t-session-value"


@pytest.fixture(autouse=True)
def _store_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores opened in these tests redact with this key and one custom field."""
    monkeypatch.setenv("AGENTREPLAY_REDACTION_KEY", KEY.decode())
    monkeypatch.setenv("AGENTREPLAY_REDACT_FIELDS", "x-acme-session")


def placeholder(secret: str, rule: str) -> str:
    """The documented placeholder, computed from its definition."""
    return documented_placeholder(KEY, secret, rule)


def test_a_custom_field_in_json_text_gets_the_placeholder_of_the_field_in_a_dict() -> None:
    redactor = Redactor(key=KEY, fields=["x-acme-session"])
    headers = {"x-acme-session": SESSION, "accept": "application/json"}
    text = redactor.redact(json.dumps({"headers": headers}))
    assert json.loads(text)["headers"] == redactor.redact(headers) == {
        "x-acme-session": placeholder(SESSION, "custom_field"), "accept": "application/json"}


@pytest.mark.parametrize(("text", "secret"), [
    (f"X-Acme-Session: {SESSION}\r\nAccept: */*", SESSION),  # a header dump, any case
    (f"x-acme-session={SESSION}&page=2", SESSION + "&page=2"),  # an unquoted value ends at a space
    ("x-acme-session: 'a passphrase of words'", "a passphrase of words"),  # quoted: whole
    (f'{{"X-ACME-SESSION":"{SESSION}"}}', SESSION),
])
def test_a_custom_field_written_in_text_is_redacted(text: str, secret: str) -> None:
    redacted = Redactor(key=KEY, fields=["x-acme-session"]).redact(text)
    assert redacted == text.replace(secret, placeholder(secret, "custom_field"))


@pytest.mark.parametrize("text", [
    f"my-x-acme-session: {SESSION}",  # another name that ends with the field's
    f"x-acme-session-id: {SESSION}",
    "x-acme-session: short",  # too short to be a secret (as for `password=`)
    "the x-acme-session header carries the session",
])
def test_other_names_and_prose_are_left_alone(text: str) -> None:
    assert Redactor(key=KEY, fields=["x-acme-session"]).redact(text) == text


def test_fields_from_the_environment_are_redacted_in_text_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTREPLAY_REDACT_FIELDS", "x-acme-session, x-tenant-key")
    text = f'{{"x-tenant-key": "tenant-key-123", "x-acme-session": "{SESSION}"}}'
    redacted = Redactor.from_env().redact(text)
    assert "tenant-key-123" not in redacted and SESSION not in redacted
    assert placeholder("tenant-key-123", "custom_field") in redacted


@pytest.mark.parametrize("name", ["cookie", "Set-Cookie", "id_token", "security_token",
                                  "oauth_token", "ad_token", "session_token", "client_secret"])
def test_default_field_names_in_json_text_are_redacted(name: str) -> None:
    value = "v4lue-0f-the-f1eld; Path=/"
    redactor = Redactor(key=KEY)
    assert redactor.redact({name: value})[name] != value  # a secret field in a dict
    text = json.dumps({name: value, "note": "kept"})
    assert json.loads(redactor.redact(text)) == {
        name: placeholder(value, "assignment"), "note": "kept"}


def test_placeholders_are_left_as_they_are_whatever_the_field_is_named() -> None:
    # a field named like the placeholders' own prefix: `<secret:...>` is no assignment
    redactor = Redactor(key=KEY, fields=["secret", "custom_field"])
    once = redactor.redact(f"secret: {SESSION} and custom_field={SESSION}")
    assert SESSION not in once and redactor.redact(once) == once


def test_json_text_inside_json_text_loses_its_secrets(any_store: Store) -> None:
    # a tool's JSON result whose field holds JSON text: its quotes come escaped (`\"`), and
    # the step is screened from its canonical JSON, where they are escaped once more
    config = {"password": "correct horse battery staple", "api_key": "abcdef123456",
              "cookie": "sessionid=k3bab-skewer; Path=/", "x-acme-session": SESSION,
              "note": "kept as it was"}
    result = json.dumps({"service": "db", "config": json.dumps(config)})
    with any_store.record(name="json in json") as rec:
        rec.record("tool", "read_config", {}, result)
    (step,) = any_store.load_steps(rec.run_id)
    inner = json.loads(json.loads(step.output)["config"])
    assert inner["note"] == "kept as it was"
    assert inner["password"] == placeholder("correct horse battery staple", "assignment")
    assert inner["api_key"] == placeholder("abcdef123456", "assignment")
    assert inner["cookie"] == placeholder("sessionid=k3bab-skewer; Path=/", "assignment")
    # a custom field, named by the store's redactor (AGENTREPLAY_REDACT_FIELDS here)
    assert inner["x-acme-session"] == placeholder(SESSION, "custom_field")


#: field names a user may list that are not ASCII: JSON text escapes them (`json.dumps` does
#: by default), in the case they are written in
OWN_NAMES = ["contraseña", "пароль", "clé-api", "key\U0001f511"]


@pytest.mark.parametrize("name", [*OWN_NAMES, "CONTRASEÑA", "Пароль", "CLÉ-API"])
@pytest.mark.parametrize("levels", [0, 1])
def test_a_field_name_json_escapes_is_found_escaped(name: str, levels: int) -> None:
    redactor = Redactor(key=KEY, fields=OWN_NAMES)
    text = json_nested({name: SESSION, "note": "kept"}, levels)
    assert "\\u" in text
    redacted = redactor.redact(text)
    assert SESSION not in redacted
    assert read_nested(redacted, levels) == redactor.redact({name: SESSION, "note": "kept"}) \
        == {name: placeholder(SESSION, "custom_field"), "note": "kept"}


@pytest.mark.parametrize("before", ["Host: a\n", "a\r\n", "\t", "\u2014", "\u00a0", "«"])
@pytest.mark.parametrize("ascii_", [True, False])
@pytest.mark.parametrize("levels", [0, 1])
def test_a_field_name_after_an_escape_in_json_text_is_found(before: str, ascii_: bool,
                                                            levels: int) -> None:
    # `\n` in JSON text is a backslash and an `n`: the name after it is no longer part of a
    # word there, as it is not in the string itself
    redactor = Redactor(key=KEY, fields=["x-acme-session", *OWN_NAMES])
    for name in ("X-Acme-Session", "contraseña"):
        line = f"{before}{name}: {SESSION}"
        text = json.dumps({"headers": line}, ensure_ascii=ascii_)
        text = json.dumps(text, ensure_ascii=ascii_) if levels else text
        redacted = redactor.redact(text)
        assert SESSION not in redacted
        assert read_nested(redacted, levels)["headers"] == redactor.redact(line) \
            == f"{before}{name}: {placeholder(SESSION, 'custom_field')}"


def test_a_name_joined_to_a_word_behind_an_escape_is_another_name() -> None:
    # `éx-acme-session` is not the field; in JSON text the `é` is `\u00e9`
    redactor = Redactor(key=KEY, fields=["x-acme-session"])
    line = f"\u00e9x-acme-session: {SESSION}"
    assert redactor.redact(line) == line
    assert redactor.redact(json.dumps({"h": line})) == json.dumps({"h": line})


def test_a_recorded_tools_json_text_loses_a_field_json_escaped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the recorder screens a step from its canonical JSON before walking it: there the
    # escaped name's backslash is escaped once more
    monkeypatch.setenv("AGENTREPLAY_REDACT_FIELDS", "contraseña")
    store = open_store("memory:")
    result = json.dumps({"usuario": "ana", "contraseña": SESSION, "nota": "l1\nx-acme: y"})
    with store.record(name="escaped names") as rec:
        rec.record("tool", "read_config", {}, result)
        rec.record("tool", "read_env", {}, json.dumps({"env": f"USER=ana\nPASSWORD={SESSION}"}))
    config, env = store.load_steps(rec.run_id)
    assert SESSION not in config.output and SESSION not in env.output
    assert json.loads(config.output)["contraseña"] == placeholder(SESSION, "custom_field")
    password = placeholder(SESSION, "assignment")
    assert json.loads(env.output)["env"] == f"USER=ana\nPASSWORD={password}"
