"""The secret screens' compiled Hyperscan databases, kept on disk between processes.

What is loaded decides which text is searched for secrets, so the tests check that a cached
database answers as the compiler's own does, and that anything doubtful (a corrupt or
truncated file, one others may write, a cache turned off or unwritable) is compiled anew
rather than trusted, without an error reaching the caller.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import hyperscan
import pytest

from agentreplay_core import _screen_cache
from agentreplay_core._redact_fast import Compiled, compiled

#: a literal, a caseless keyword and a character class: matches reported with every end
PATTERNS = [(b"sk-", 0), (b"passw(?:or)?d\\s*[:=]", hyperscan.HS_FLAG_CASELESS),
            (b"[0-9]{4}", 0)]
TEXT = b"xx sk-1234 PASSWORD : 99 ... sk-"


def matches(database: Compiled, data: bytes = TEXT) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    assert database.scanned(data, lambda i, _s, end, *_: found.append((i, end)))
    return sorted(found)


def reference() -> list[tuple[int, int]]:
    """The matches of a database compiled here, with no cache involved."""
    database = hyperscan.Database()
    database.compile(expressions=[e for e, _ in PATTERNS], ids=[0, 1, 2],
                     flags=[f for _, f in PATTERNS])
    found: list[tuple[int, int]] = []
    database.scan(TEXT, match_event_handler=lambda i, _s, end, *_: found.append((i, end)))
    return sorted(found)


class NoCompiler:
    """Stands in for `hyperscan.Database` where a test must prove nothing was compiled."""

    def compile(self, **_: Any) -> None:
        raise AssertionError("compiled although the cache holds the database")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "screens"
    monkeypatch.setenv(_screen_cache.CACHE_ENV, str(directory))
    return directory


def cached_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*" + _screen_cache.SUFFIX))


def test_a_cached_database_answers_as_the_compiled_one(cache: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    expected = reference()
    assert len(expected) >= 4  # every pattern matched, `[0-9]{4}` more than once
    first = compiled(PATTERNS)
    assert first is not None and matches(first) == expected
    [stored] = cached_files(cache)
    assert stored.stat().st_mode & 0o077 == 0  # the user's alone
    monkeypatch.setattr(hyperscan, "Database", NoCompiler)
    loaded = compiled(PATTERNS)
    assert loaded is not None and matches(loaded) == expected


def test_other_patterns_or_flags_miss_the_cache(cache: Path) -> None:
    compiled(PATTERNS)
    case_sensitive = [(e, 0) for e, _ in PATTERNS]
    database = compiled(case_sensitive)
    assert database is not None
    assert 1 not in {i for i, _ in matches(database)}  # "PASSWORD" no longer matches
    reordered = compiled(PATTERNS[::-1])
    assert reordered is not None
    assert {i for i, _ in matches(reordered)} == {0, 1, 2}
    assert len(cached_files(cache)) == 3


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "empty", "not hyperscan"])
def test_a_damaged_file_is_compiled_anew_and_replaced(cache: Path, damage: str) -> None:
    compiled(PATTERNS)
    [stored] = cached_files(cache)
    good = stored.read_bytes()
    bad = {"flipped byte": good[:len(good) // 2] + bytes([good[len(good) // 2] ^ 0xFF])
           + good[len(good) // 2 + 1:],
           "truncated": good[:len(good) // 3], "empty": b"",
           "not hyperscan": b"\x00" * len(good)}[damage]
    stored.write_bytes(bad)
    database = compiled(PATTERNS)
    assert database is not None and matches(database) == reference()
    assert stored.read_bytes() != bad
    assert hyperscan.loadb(stored.read_bytes(), hyperscan.HS_MODE_BLOCK) is not None


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership and modes")
@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_file_others_may_write_is_not_trusted(cache: Path, where: str,
                                                monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    compiled(PATTERNS)
    [stored] = cached_files(cache)
    (stored if where == "file" else cache).chmod(0o666 if where == "file" else 0o777)
    monkeypatch.setattr(hyperscan, "Database", NoCompiler)
    with caplog.at_level(logging.WARNING, logger="agentreplay"):
        # not loaded, and compiling fails here: no screen, so the caller walks every text
        assert compiled(PATTERNS) is None
    assert "not private" in caplog.text


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership and modes")
def test_a_directory_others_may_write_is_neither_read_nor_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv(_screen_cache.CACHE_ENV, str(shared))
    with caplog.at_level(logging.WARNING, logger="agentreplay"):
        for _ in range(2):
            database = compiled(PATTERNS)
            assert database is not None and matches(database) == reference()
    assert list(shared.iterdir()) == []
    assert caplog.text.count("not private") == 1  # once a process, not once a database


def test_processes_starting_together_share_one_file_each(cache: Path) -> None:
    """Processes that find the cache empty at the same moment all compile and write; each
    file is replaced whole, so every one of them, and the next, gets a database that works."""
    program = (
        "import sys\n"
        "from agentreplay_core._redact_fast import compiled\n"
        f"patterns = {PATTERNS!r}\n"
        "found = []\n"
        "database = compiled(patterns)\n"
        f"assert database.scanned({TEXT!r}, lambda i, _s, end, *_: found.append((i, end)))\n"
        "print(sorted(found))\n"
    )
    env = {**os.environ, _screen_cache.CACHE_ENV: str(cache)}
    started = [subprocess.Popen([sys.executable, "-c", program], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for _ in range(4)]
    outputs = [p.communicate(timeout=120) for p in started]
    assert [p.returncode for p in started] == [0] * 4, outputs
    assert {out for out, _ in outputs} == {f"{reference()}\n"}
    assert [p.name for p in cache.iterdir()] == [
        _screen_cache.cache_key(hyperscan, PATTERNS) + _screen_cache.SUFFIX]  # no leftovers


def test_a_read_only_cache_is_still_used(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache baked into an image, on a read-only filesystem: the access time cannot be
    updated, the database loads all the same."""
    compiled(PATTERNS)
    expected = reference()

    def read_only(*_: object, **__: object) -> None:
        raise PermissionError("read-only file system")

    monkeypatch.setattr(os, "utime", read_only)
    monkeypatch.setattr(hyperscan, "Database", NoCompiler)
    loaded = compiled(PATTERNS)
    assert loaded is not None and matches(loaded) == expected


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership and modes")
@pytest.mark.parametrize(("owner", "mode", "trusted"), [
    (4242, 0o600, True), (4242, 0o644, True), (0, 0o644, True),  # this user's, or root's
    (4343, 0o600, False),  # another user's
    (4242, 0o620, False), (4242, 0o602, False), (0, 0o666, False),  # others may write it
])
def test_who_may_have_written_what_is_loaded(owner: int, mode: int, trusted: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    info = os.stat_result((0o100000 | mode, 0, 0, 1, owner, 0, 0, 0, 0, 0))
    assert _screen_cache._private(info) is trusted


def test_no_home_directory_means_no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the user has no home to expand, platformdirs answers a relative path: that
    would be the working directory, so nothing is kept."""
    import platformdirs

    monkeypatch.delenv(_screen_cache.CACHE_ENV, raising=False)
    monkeypatch.setattr(platformdirs, "user_cache_dir", lambda *_a, **_k: "~/.cache/agentreplay")
    assert _screen_cache.cache_dir() is None


def test_the_cache_turned_off_keeps_nothing(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_screen_cache.CACHE_ENV, "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # an empty setting taken as a path would write here
    database = compiled(PATTERNS)
    assert database is not None and matches(database) == reference()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_cache_that_cannot_be_written_only_costs_the_compile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(_screen_cache.CACHE_ENV, str(blocker / "screens"))
    database = compiled(PATTERNS)
    assert database is not None and matches(database) == reference()
    assert blocker.read_text() == "not a directory"


def test_old_files_are_pruned_newest_kept(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    olds = []
    for n in range(_screen_cache.MOST_FILES + 5):
        old = cache / f"{n:064x}{_screen_cache.SUFFIX}"
        old.write_bytes(b"old")
        os.utime(old, (1_000_000 + n, 1_000_000 + n))
        olds.append(old)
    compiled(PATTERNS)
    kept = cached_files(cache)
    assert len(kept) == _screen_cache.MOST_FILES
    new = cache / (_screen_cache.cache_key(hyperscan, PATTERNS) + _screen_cache.SUFFIX)
    assert new in kept
    assert set(kept) - {new} == set(olds[-(_screen_cache.MOST_FILES - 1):])


def test_the_batch_screen_loads_from_the_cache_in_a_new_process(cache: Path) -> None:
    """The default rules' batch screen, built in one process, is loaded whole by the next:
    the every-match database too, which is built only when a batch is screened."""
    program = (
        "import hyperscan, sys\n"
        "from agentreplay_core._redact_json import json_screen\n"
        "from agentreplay_core._redact_rules import DEFAULT_RULES\n"
        "if sys.argv[1] == 'warm':\n"
        "    class NoCompiler:\n"
        "        def compile(self, **_): raise SystemExit('compiled')\n"
        "    hyperscan.Database = NoCompiler\n"
        "screen = json_screen(tuple(DEFAULT_RULES))\n"
        "pieces = [b'{\"k\": \"password: hunter22hunter\"}', b'{\"k\": \"nothing here\"}']\n"
        "print(screen.may_hold_secrets(pieces), screen.screen_each(pieces))\n"
    )
    env = {**os.environ, _screen_cache.CACHE_ENV: str(cache)}
    cold = subprocess.run([sys.executable, "-c", program, "cold"], env=env,
                          capture_output=True, text=True, check=False)
    assert cold.returncode == 0, cold.stderr
    assert len(cached_files(cache)) == 2  # the first-match database and the every-match one
    warm = subprocess.run([sys.executable, "-c", program, "warm"], env=env,
                          capture_output=True, text=True, check=False)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout == cold.stdout
