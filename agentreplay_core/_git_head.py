"""The commit a git checkout has checked out, for a run's metadata, read from its files.

`git rev-parse HEAD` would need a child process of the agent's process when its first run
opens: a few milliseconds, and a fork that some hosts forbid or handle badly (seccomp, a
SIGCHLD handler of their own). The answer is in `.git` for the usual layouts, which this
reads: a repository or a linked worktree (a `.git` file naming its git directory), a branch
ref loose or packed, a detached HEAD, SHA-1 or SHA-256. Anything else (the reftable format,
a layout this does not know) is asked of git as before.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


class _Unknown(Exception):
    """The files do not tell: ask git."""


def _git_dir(directory: Path) -> Path | None:
    """The git directory of the checkout holding `directory`, None outside any."""
    configured = os.environ.get("GIT_DIR")
    if configured:
        return (directory / configured).resolve()
    for candidate in (directory, *directory.parents):
        dot_git = candidate / ".git"
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():  # a linked worktree or a submodule: "gitdir: <path>"
            text = dot_git.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir:"):
                raise _Unknown(dot_git)
            return (candidate / text.removeprefix("gitdir:").strip()).resolve()
    return None


def _object_id(text: str) -> str:
    if not _OBJECT_ID.fullmatch(text):
        raise _Unknown(text)
    return text


def _ref(git_dir: Path, ref: str) -> str:
    """The commit `ref` (e.g. refs/heads/main) names: loose in the git directory or, for a
    worktree, in the common one, else in packed-refs."""
    common = git_dir
    if (git_dir / "commondir").is_file():
        common = (git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()).resolve()
    for base in dict.fromkeys((git_dir, common)):
        loose = base / ref
        if loose.is_file():
            return _object_id(loose.read_text(encoding="utf-8").strip())
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(encoding="utf-8").splitlines():
            object_id, _, name = line.partition(" ")
            if name == ref:
                return _object_id(object_id)
    raise _Unknown(ref)  # an unborn branch, or refs kept where this does not look


def _from_files(directory: Path) -> str | None:
    git_dir = _git_dir(directory)
    if git_dir is None:
        return None
    head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    if head.startswith("ref:"):
        return _ref(git_dir, head.removeprefix("ref:").strip())
    return _object_id(head)


def _from_git(directory: str) -> str | None:
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory,
                                capture_output=True, text=True, timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    revision = result.stdout.strip()
    return revision if result.returncode == 0 and revision else None


@functools.lru_cache(maxsize=8)
def git_revision(directory: str) -> str | None:
    """The HEAD commit of the git checkout containing `directory`, if any."""
    try:
        return _from_files(Path(directory))
    except (_Unknown, OSError, UnicodeDecodeError):
        return _from_git(directory)
