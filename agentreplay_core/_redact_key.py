"""The redaction key: what makes placeholders stable, and unguessable without it.

Resolved once per `Redactor`, and only when a first secret is found: the key given in code,
else `AGENTREPLAY_REDACTION_KEY`, else the store's HMAC key (`AGENTREPLAY_HMAC_KEY`), else a
random key created once per user in the user config directory (mode 0600). Recording and
replaying a run that held secrets must use the same key, or the placeholders (and with them
the match keys) differ.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from pathlib import Path

import platformdirs

log = logging.getLogger("agentreplay")

REDACTION_KEY_ENV = "AGENTREPLAY_REDACTION_KEY"
KEY_FILE_NAME = "redaction.key"


def default_key_file() -> Path:
    return Path(platformdirs.user_config_dir("agentreplay")) / KEY_FILE_NAME


def key_from_env() -> bytes | None:
    value = os.environ.get(REDACTION_KEY_ENV)
    return value.encode("utf-8") if value else None


def _read(path: Path) -> bytes | None:
    try:
        text = path.read_bytes().strip()
    except FileNotFoundError:
        return None
    return text or None


def load_or_create_key(path: Path) -> bytes:
    """The key in `path`, created (32 random bytes, hex, mode 0600) if there is none.

    Creation is atomic (written to a private temporary file, then hard-linked into place), so
    processes starting together agree on one key and never read a half-written file.
    """
    existing = _read(path)
    if existing is not None:
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_hex(32).encode() + b"\n")
            out.flush()
            os.fsync(out.fileno())
        with contextlib.suppress(FileExistsError):  # another process was first: use its key
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    created = _read(path)
    if created is None:
        raise OSError(f"the redaction key file {path} is empty; delete it to get a new key")
    return created


def resolve_key(explicit: bytes | None, fallback: bytes | None, key_file: Path | None) -> bytes:
    """The key placeholders are derived with (see the module docstring for the order).

    Never raises: if the key file cannot be read or created, a random key for this process is
    used (secrets are still never stored, but their placeholders differ between processes)
    and a warning says how to fix it.
    """
    key = explicit or key_from_env() or fallback
    if key:
        return key
    path = key_file or default_key_file()
    try:
        return load_or_create_key(path)
    except OSError as exc:
        log.warning("agentreplay: cannot read or create the redaction key file %s (%s); using "
                    "a key for this process only, so placeholders of secrets will not match "
                    "other processes. Set %s to fix this.", path, exc, REDACTION_KEY_ENV)
        return secrets.token_bytes(32)
