"""Placeholders computed from their definition in SECURITY.md, not by the code under test:
`<secret:RULE:H>`, H the first 12 hex digits of HMAC-SHA-256(key, domain + secret)."""

from __future__ import annotations

import hashlib
import hmac


def documented_digest(key: bytes, secret: str) -> str:
    mac = hmac.new(key, b"agentreplay/redact/v1\x00" + secret.encode(), hashlib.sha256)
    return mac.hexdigest()[:12]


def documented_placeholder(key: bytes, secret: str, rule: str) -> str:
    return f"<secret:{rule}:{documented_digest(key, secret)}>"
