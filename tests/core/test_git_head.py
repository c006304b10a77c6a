"""The checked-out commit read from `.git` agrees with `git rev-parse HEAD` in every layout it
reads, without starting git; other layouts still get git's answer."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentreplay_core import _git_head
from agentreplay_core._git_head import git_revision


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=n",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    commit(path, "first")
    return path


@pytest.fixture
def no_git(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fails the test if git is started; yields the directories it would have been asked
    about, for the tests where it must be."""
    asked: list[str] = []
    monkeypatch.setattr(_git_head, "_from_git", asked.append)
    monkeypatch.delenv("GIT_DIR", raising=False)
    git_revision.cache_clear()
    yield asked
    git_revision.cache_clear()


def read(directory: Path) -> str | None:
    git_revision.cache_clear()
    return git_revision(str(directory))


def test_a_branch_loose_then_packed(repo: Path, no_git: list[str]) -> None:
    head = commit(repo, "second")
    assert read(repo) == head
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert read(repo) == head == git(repo, "rev-parse", "HEAD")
    assert no_git == []


def test_a_subdirectory_and_a_detached_head(repo: Path, no_git: list[str]) -> None:
    first = git(repo, "rev-parse", "HEAD")
    commit(repo, "second")
    (repo / "src" / "deep").mkdir(parents=True)
    git(repo, "checkout", "-q", "--detach", first)
    assert read(repo / "src" / "deep") == first == git(repo, "rev-parse", "HEAD")
    assert no_git == []


def test_a_linked_worktree_on_its_own_branch(repo: Path, tmp_path: Path,
                                             no_git: list[str]) -> None:
    main = commit(repo, "second")
    other = tmp_path / "other"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(other))
    feature = commit(other, "on the feature branch")
    assert (other / ".git").is_file()
    assert read(other) == feature == git(other, "rev-parse", "HEAD")
    assert read(repo) == main
    git(repo, "pack-refs", "--all")  # the worktree's branch now lives in the common packed-refs
    assert read(other) == feature
    assert no_git == []


def test_git_dir_from_the_environment(repo: Path, tmp_path: Path, no_git: list[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    assert read(elsewhere) == git(repo, "rev-parse", "HEAD")


def test_outside_any_checkout_nothing_and_no_git(tmp_path: Path, no_git: list[str]) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert read(plain) is None
    assert no_git == []


@pytest.mark.parametrize("layout", ["unborn branch", "reftable-like HEAD", "odd .git file"])
def test_what_the_files_do_not_tell_is_asked_of_git(tmp_path: Path, layout: str,
                                                    no_git: list[str]) -> None:
    path = tmp_path / "repo"
    path.mkdir()
    if layout == "odd .git file":
        (path / ".git").write_text("not a gitdir line\n")
    else:
        git(path, "init", "-q", "-b", "main")
        if layout == "reftable-like HEAD":
            commit(path, "first")
            (path / ".git" / "HEAD").write_text("ref: refs/heads/.invalid\n")
    assert read(path) is None  # what the stand-in for git answered
    assert no_git == [str(path)]


def test_the_fallback_is_git_itself(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A HEAD on a symbolic ref to a branch (a chain git follows and this reader does not):
    git is asked, and its answer is the revision."""
    monkeypatch.delenv("GIT_DIR", raising=False)
    asked: list[str] = []
    real = _git_head._from_git

    def spy(directory: str) -> str | None:
        asked.append(directory)
        return real(directory)

    monkeypatch.setattr(_git_head, "_from_git", spy)
    head = commit(repo, "second")
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/alias")
    assert git(repo, "rev-parse", "HEAD") == head
    assert read(repo) == head
    assert asked == [str(repo)]
