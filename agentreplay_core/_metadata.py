"""Run metadata filled in automatically: where and with what a run was recorded."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata as importlib_metadata
from typing import Any

from agentreplay_core._keys import clean_label

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
    for dist in TRACKED_DISTRIBUTIONS:
        try:
            found[dist] = importlib_metadata.version(dist)
        except importlib_metadata.PackageNotFoundError:
            continue
    return found


@functools.lru_cache(maxsize=8)
def git_revision(directory: str) -> str | None:
    """The HEAD commit of the git checkout containing `directory`, if any."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True,
            timeout=2, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    revision = result.stdout.strip()
    return revision if result.returncode == 0 and revision else None


def collect_metadata(user: dict[str, Any] | None = None) -> dict[str, Any]:
    """Automatic metadata merged with the user's (the user's keys win)."""
    auto: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(terse=True),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "packages": dict(_versions()),
    }
    revision = git_revision(os.getcwd())
    if revision:
        auto["git_revision"] = revision
    if user:
        for key, value in user.items():
            if not isinstance(key, str):  # would turn all metadata into a tagged map
                raise TypeError(f"metadata keys must be strings, got {key!r}")
            auto[clean_label(key)] = value  # NUL made visible, like names
    return auto
