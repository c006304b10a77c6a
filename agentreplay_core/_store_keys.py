"""The HMAC keys of a store: the key new runs are chained with and the retired keys that still
verify older runs (SECURITY.md, key rotation), from `Store(hmac_key=...)` or the environment."""

from __future__ import annotations

import os
from collections.abc import Sequence

from agentreplay_core._integrity import HMAC_ENV, HMAC_OLD_ENV


def hmac_key_from_env() -> bytes | None:
    """The HMAC key from `AGENTREPLAY_HMAC_KEY`, if set."""
    value = os.environ.get(HMAC_ENV)
    return value.encode("utf-8") if value else None


def hmac_old_keys_from_env() -> tuple[bytes, ...]:
    """Retired keys that still verify old runs: `AGENTREPLAY_HMAC_OLD_KEYS`, comma-separated."""
    value = os.environ.get(HMAC_OLD_ENV, "")
    return tuple(k.strip().encode("utf-8") for k in value.split(",") if k.strip())


def store_keys(hmac_key: bytes | str | Sequence[bytes | str] | None, *, from_env: bool
               ) -> tuple[bytes | None, tuple[bytes, ...]]:
    """(the key new runs are chained with, the retired keys): `hmac_key` is one key, None, or
    `[new, old, ...]`; `from_env` reads both from the environment instead."""
    keys: Sequence[bytes | str | None]
    if from_env:
        keys = [hmac_key_from_env(), *hmac_old_keys_from_env()]
    elif hmac_key is None or isinstance(hmac_key, (str, bytes)):
        keys = [hmac_key]
    else:
        keys = list(hmac_key)
    encoded = [k.encode() if isinstance(k, str) else k for k in keys]
    return (encoded[0] if encoded else None), tuple(k for k in encoded[1:] if k)
