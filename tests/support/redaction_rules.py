"""Redaction rules of another version, for replays under other rules than a run's."""

from __future__ import annotations

from agentreplay_core import RedactionRule, Redactor


def first_word_rules(key: bytes) -> Redactor:
    """Rules that take a quoted value's first word only, as agentreplay did before it took
    them whole, and know no field names: the defaults redact every request holding
    `password: "a passphrase"` otherwise."""
    return Redactor(key=key, defaults=False, rules=[RedactionRule(
        "assignment",
        pattern=r"""(?i:password)["']?\s*[:=]\s*["']?(?P<secret>[^\s"'<>]{6,})""")])
