"""Redaction on the replay side: secrets handed back on request, requests matched to their
recording whatever the redaction rules were, and a hint when placeholders of secrets differ
from the recording's (the run was recorded under another redaction key)."""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from agentreplay_core._codec import canonical_bytes, decode
from agentreplay_core._codec_base import Json
from agentreplay_core._divergence import peek
from agentreplay_core._errors import ReplayDivergence
from agentreplay_core._model import Step
from agentreplay_core._redact import Redactor
from agentreplay_core._redact_match import (
    Likeness,
    Verifier,
    compare_redacted,
    masked,
    secret_forms,
)
from agentreplay_core._redact_rules import PLACEHOLDER
from agentreplay_core._redact_walk import TreeTransform


def secret_map(redactor: Redactor, secrets: Mapping[str, str] | Iterable[str]
               ) -> tuple[dict[str, str], set[str]]:
    """Placeholder digests -> secrets, from placeholders -> secrets or from the secrets alone
    (their placeholders derived with the redactor's key), and which of those digests are of a
    secret as JSON escapes it (that goes back into JSON text as it is).

    Raises:
        ValueError: a key of the mapping is no placeholder, or a listed secret is empty.
    """
    found: dict[str, str] = {}
    escapes: set[str] = set()
    if isinstance(secrets, Mapping):
        for placeholder, value in secrets.items():
            m = PLACEHOLDER.fullmatch(str(placeholder))
            if m is None or not isinstance(value, str):
                raise ValueError(
                    "secrets= maps placeholders as stored (e.g. '<secret:openai:1a2b3c4d5e6f>') "
                    f"to their values, not {placeholder!r}; to give only the secrets, pass them "
                    "as a list")
            found[m.group(2)] = value
        return found, escapes
    for value in secrets:
        if not isinstance(value, str) or not value:
            raise ValueError(f"secrets= lists secrets as non-empty strings, not {value!r}")
        found[redactor.digest_of(value)] = value
        # a value redacted as a whole field had its pattern secrets replaced first
        inner = redactor.redact_text(value)
        if inner is not value:
            found[redactor.digest_of(inner)] = value
        # a secret inside JSON text that is not a tool call's arguments (a tool's JSON string
        # result) was redacted as it is written there, escapes and all: it goes back so
        for escaped in {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}:
            if escaped != value:
                digest = redactor.digest_of(escaped)
                if digest not in found:
                    found[digest] = escaped
                    escapes.add(digest)
    return found, escapes


class Restorer(TreeTransform):
    """Puts secrets back where their placeholders are (replay with `secrets=`)."""

    def __init__(self, digests: Mapping[str, str], escapes: set[str] | None = None) -> None:
        self._digests = dict(digests)
        self._escapes = escapes or set()

    def _sub(self, m: re.Match[str]) -> str:
        return self._digests.get(m.group(2), m.group(0))

    def _sub_json(self, m: re.Match[str]) -> str:
        # a tool call's arguments were redacted as parsed: the secret goes back JSON-escaped
        secret = self._digests.get(m.group(2))
        if secret is None:
            return m.group(0)
        return secret if m.group(2) in self._escapes else \
            json.dumps(secret, ensure_ascii=False)[1:-1]

    def _sub_bytes(self, m: re.Match[str]) -> str:
        # the secret goes back as its UTF-8 bytes (seen as Latin-1, like the rest)
        secret = self._digests.get(m.group(2))
        return m.group(0) if secret is None else \
            secret.encode("utf-8", "surrogatepass").decode("latin-1")

    def text(self, s: str) -> str:
        if "<secret:" not in s:
            return s
        out = PLACEHOLDER.sub(self._sub, s)
        return s if out == s else out

    def json_text(self, s: str) -> str:
        if "<secret:" not in s:
            return s
        out = PLACEHOLDER.sub(self._sub_json, s)
        return s if out == s else out

    def bytes_text(self, text: str, secret: str | None) -> str:
        if "<secret:" not in text:
            return text
        out = PLACEHOLDER.sub(self._sub_bytes, text)
        return text if out == text else out


def restore_secrets(steps: list[Step], secrets: Mapping[str, str] | Iterable[str],
                    redactor: Redactor | None) -> list[Step]:
    """The steps with the given secrets back in their outputs (inputs stay as recorded).

    Raises:
        ValueError: `secrets` is malformed, or lists bare secrets while redaction is off (their
            placeholders cannot be derived without the redaction key).
    """
    if redactor is None and not isinstance(secrets, Mapping):
        raise ValueError("secrets= as a list of secrets needs the store's redaction key to "
                         "find their placeholders, but the store was opened with "
                         "redaction=None; pass a mapping {placeholder: secret} instead")
    digests, escapes = secret_map(redactor or Redactor(defaults=False), secrets)
    if not digests:
        return steps
    restorer = Restorer(digests, escapes)
    out = []
    for step in steps:
        output = restorer.walk(step.output)
        out.append(step if output is step.output else step.model_copy(update={"output": output}))
    return out


def secret_verifier(redactor: Redactor) -> Verifier:
    """Whether a text is the secret of a placeholder's digest under `redactor`'s key, in any
    form the recorder may have hashed it in (`secret_forms`)."""
    def is_secret(text: str, digest: str, whole: bool) -> bool:
        return any(redactor.digest_of(form) == digest
                   for form in secret_forms(text, whole, redactor.redact_text))
    return is_secret


class SecretMatcher:
    """Finds the recorded step of a request that holds secrets when its redaction now gives
    another key than the recording's (see `_redact_match`)."""

    def __init__(self, redactor: Redactor, steps: Sequence[Step]) -> None:
        self._redactor = redactor
        self._is_secret = secret_verifier(redactor)
        self._steps = steps
        #: steps whose requests hold placeholders, by (kind, name): built on first use
        self._holding: dict[tuple[str, str], list[Step]] | None = None
        #: where each of those lists' first step not known to be consumed is
        self._heads: dict[tuple[str, str], int] = {}
        #: how many requests `find` matched (its caller logs the first)
        self.matched = 0

    @property
    def rules_digest(self) -> str:
        return self._redactor.rules_digest

    def pending(self, kind: str, name: str, consumed: Container[int]) -> list[Step]:
        """The steps of this call whose requests hold placeholders and are not consumed, in
        step order (those consumed at the front are skipped once and for all)."""
        if self._holding is None:
            self._holding = {}
            for step in self._steps:
                if _digests(step.input):
                    self._holding.setdefault((step.kind, step.name), []).append(step)
        holding = self._holding.get((kind, name))
        if not holding:
            return []
        head = self._heads.get((kind, name), 0)
        while head < len(holding) and holding[head].step in consumed:
            head += 1
        self._heads[(kind, name)] = head
        return holding[head:]

    def find(self, request: Json, candidates: Iterable[Step]) -> tuple[Step | None, Step | None]:
        """(the first candidate whose recorded request is `request` (encoded, not redacted)
        with each placeholder's secret in its place, else None; the first that is `request`
        but for the text at its placeholders, else None)."""
        near = None
        for step in candidates:
            likeness = compare_redacted(step.input, request, self._is_secret)
            if likeness is Likeness.SAME:
                self.matched += 1
                return step, None
            if likeness is Likeness.SECRETS_DIFFER and near is None:
                near = step
        return None, near

    def shown(self, near: Step, request: Json) -> Any:
        """`request` (encoded, as sent) as a divergence report shows it when it is `near`'s
        request but for its secrets: redacted, and its text where the recording holds
        placeholders given placeholders too, though the rules in use may not know it as a
        secret (a field the recording's rules named)."""
        redactor = self._redactor
        redacted, _ = redactor.redact_encoded(masked(near.input, request, redactor.placeholder))
        return shown_request(redacted)


def shown_request(redacted: Json) -> Any:
    """A redacted request as a divergence report shows it (decoded where possible)."""
    try:
        return decode(redacted)
    except Exception:
        return peek(redacted)


def _digests(tree: Json) -> set[str]:
    try:
        text = canonical_bytes(tree).decode("utf-8", "replace")
    except Exception:
        return set()
    return {m.group(2) for m in PLACEHOLDER.finditer(text)} if "<secret:" in text else set()


def add_redaction_hint(diverged: ReplayDivergence, redacted: Json, recorded: Sequence[Step],
                       rules: tuple[str | None, str], *, near: Step | None = None,
                       compared: bool = False) -> None:
    """Say why a request that holds secrets, or whose recorded calls of this name held some,
    may have diverged.

    `near`: a recorded step that is this request but for the text at its placeholders, which
    is not their secret under this replay's key: another redaction key, or another secret.
    `compared`: the request was compared with its recorded calls as sent (`SecretMatcher`),
    so other redaction rules (`rules`: the digest of those it was recorded with, None if it
    does not say, and of those in use) are no cause; otherwise they may be, as may another
    key when the request's placeholders are not the recording's while it holds others.
    """
    recorded_rules, current_rules = rules
    if near is not None:
        diverged.detail += (
            f"; it is the request recorded at step {near.step} but for its secrets: the text "
            "where the recording holds placeholders (<secret:...>) is not their secret under "
            "this replay's redaction key. Either the run was recorded with another redaction "
            "key (replay with the key it was recorded with: AGENTREPLAY_REDACTION_KEY, else "
            "AGENTREPLAY_HMAC_KEY, else the recording user's redaction.key file), or the "
            "secret differs now (a rotated key, another password). To replay without that "
            "key, let placeholders match any text: check_secrets=False, "
            "AGENTREPLAY_CHECK_SECRETS=0 or `agentreplay replay --no-check-secrets`")
        diverged.args = (diverged._message(),)
        return
    if compared:  # neither other rules nor another key alone can be the cause
        return
    mine = _digests(redacted) if redacted is not None else set()
    theirs: set[str] = set()
    for step in recorded:
        theirs |= _digests(step.input)
    if recorded_rules is not None and recorded_rules != current_rules:
        if not (mine or theirs):
            return
        diverged.detail += (
            "; the run was recorded with other redaction rules than this replay's (rules "
            f"{recorded_rules}, now {current_rules}: another agentreplay version, or other "
            "fields=, patterns= or AGENTREPLAY_REDACT_* settings), and a secret in a request "
            "keyed by its caller (match_key=) can be redacted otherwise under them. Replay "
            "with the rules it was recorded with, or record it again")
    elif mine and theirs and mine - theirs:
        diverged.detail += (
            "; the request holds secrets whose placeholders (<secret:...>) the recording does "
            "not: if the secrets are the same, the run was recorded with another redaction key"
            + ("" if recorded_rules is not None else
               " (or, as this run does not say which rules it was recorded with, by an "
               "agentreplay whose redaction rules differ)")
            + ". Replay with the key it was recorded with (AGENTREPLAY_REDACTION_KEY, else "
            "AGENTREPLAY_HMAC_KEY, else the recording user's redaction.key file)")
    else:
        return
    diverged.args = (diverged._message(),)
