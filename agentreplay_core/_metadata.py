"""Run metadata filled in automatically: where and with what a run was recorded."""

from __future__ import annotations

import functools
import os
import platform
import socket
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata as importlib_metadata
from typing import TYPE_CHECKING, Any

from agentreplay_core._codec import encode
from agentreplay_core._git_head import git_revision
from agentreplay_core._keys import clean_label

if TYPE_CHECKING:
    from agentreplay_core._model import Run
    from agentreplay_core._redact import Redactor

#: distributions whose versions explain a recording (only read if installed, never imported)
TRACKED_DISTRIBUTIONS = (
    "agentreplay",
    "langchain-core",
    "langchain",
    "langgraph",
    "langchain-openai",
    "langchain-anthropic",
    "llama-index-core",
    "openai",
    "anthropic",
    "pydantic",
    "psycopg",
    "numpy",
)


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    found = {}
    for name in TRACKED_DISTRIBUTIONS:
        try:
            dist = importlib_metadata.distribution(name)
        except importlib_metadata.PackageNotFoundError:
            continue
        found[name] = _header_version(dist) or dist.version
    return found


def _header_version(dist: importlib_metadata.Distribution) -> str | None:
    """The Version field from the metadata's header, which `dist.version` finds by parsing
    the whole file as e-mail, long description included (half of a first run's 4 ms)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    for line in text.splitlines():
        if not line:  # the header ends at the first empty line
            break
        if line.startswith("Version:"):
            return line[len("Version:"):].strip() or None
    return None


@functools.lru_cache(maxsize=1)
def _platform_name() -> str:
    """What `platform.platform()` says, without the `uname -p` child process it starts
    (2-3 ms, a fork of the agent's process) for a processor name it leaves out on Linux."""
    system, release, machine = platform.system(), platform.release(), platform.machine()
    if system == "Darwin" and platform.mac_ver()[0]:
        system, release = "macOS", platform.mac_ver()[0]
    parts = [system, release, machine]
    if system == "Linux":
        libc, version = platform.libc_ver()
        if libc:
            parts += ["with", libc + version]
    return "-".join(part for part in parts if part)


def collect_metadata(user: dict[str, Any] | None = None) -> dict[str, Any]:
    """Automatic metadata merged with the user's (the user's keys win)."""
    auto: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": _platform_name(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "packages": dict(_versions()),
    }
    revision = git_revision(os.getcwd())
    if revision:
        auto["git_revision"] = revision
    hash_seed = os.environ.get("PYTHONHASHSEED")
    if hash_seed is not None:  # unset: str hashes, and so set order, differ in every process
        auto["python_hash_seed"] = hash_seed
    if user is not None and not isinstance(user, Mapping):
        raise TypeError(f"metadata= takes a dict, not {type(user).__name__}")
    if user:
        for key, value in user.items():
            if not isinstance(key, str):  # would turn all metadata into a tagged map
                raise TypeError(f"metadata keys must be strings, got {key!r}")
            auto[clean_label(key)] = value  # NUL made visible, like names
    return auto


def run_metadata(user: dict[str, Any] | None, tags: Iterable[str] | None, durability: str,
                 entropy: bool, redaction: Redactor | None) -> dict[str, Any]:
    """A new run's metadata as stored: the automatic and the user's, its tags, and what
    agentreplay itself reads back (encoded, and redacted like any recorded value)."""
    meta = collect_metadata(user)
    if isinstance(tags, (str, bytes)):  # would become one tag per character
        raise TypeError(f"tags= takes a list of strings, not a bare {type(tags).__name__}")
    tags = list(tags or ())  # None: no tags, as elsewhere in Python APIs
    for tag in tags:
        if not isinstance(tag, str):
            raise TypeError(f"tags must be strings, got {tag!r}")
    if tags:  # cleaned like names: a NUL could not be stored or searched for
        meta["tags"] = sorted({*meta.get("tags", ()), *map(clean_label, tags)})
    meta["agentreplay"] = {
        "durability": durability, "entropy": entropy,
        # who is recording, where the stale-run reaper looks (user keys cannot shadow it)
        "pid": os.getpid(), "host": socket.gethostname(),
        # which redaction rules made its placeholders (see `add_redaction_hint`)
        "redaction": None if redaction is None else redaction.rules_digest,
    }
    encoded: dict[str, Any] = encode(meta, path="metadata")  # user values: any encodable
    return encoded if redaction is None else redaction.redact_encoded(encoded)[0]


def meta_redaction(run: Run) -> str | None:
    """The digest of the redaction rules the run was recorded with (None: unknown, or none)."""
    own = run.metadata.get("agentreplay")
    found = own.get("redaction") if isinstance(own, dict) else None
    return found if isinstance(found, str) else None


def meta_entropy(run: Run) -> bool:
    """Whether the run recorded entropy (read defensively: metadata is plain stored JSON)."""
    own = run.metadata.get("agentreplay")
    return isinstance(own, dict) and bool(own.get("entropy"))


def hash_seed_difference(run: Run) -> str | None:
    """Why set order may differ from the recording, when the run was recorded with a fixed
    `PYTHONHASHSEED` that this process does not have; None otherwise."""
    recorded = run.metadata.get("python_hash_seed")
    if not isinstance(recorded, str) or not recorded.isdigit():  # unset, or "random"
        return None
    here = os.environ.get("PYTHONHASHSEED")
    if here == recorded:
        return None
    now = "unset" if here is None else repr(here)
    return (f"run {run.run_id} was recorded with PYTHONHASHSEED={recorded}, this process has "
            f"{now}: the iteration order of sets (and of dicts built from them) can differ "
            f"from the recording; run the replay with PYTHONHASHSEED={recorded}")
