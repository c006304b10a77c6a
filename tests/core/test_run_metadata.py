"""The automatic metadata's process facts, read without a child process or a full parse."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, NoReturn

import pytest

from agentreplay_core import _metadata


def no_child(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError(f"a child process was started: {args!r}")


def test_platform_name_starts_no_child_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # uname read anew, as a new process reads it
    monkeypatch.setattr(platform, "_uname_cache", None, raising=False)
    monkeypatch.setattr(subprocess, "Popen", no_child)
    mine = _metadata._platform_name.__wrapped__()
    monkeypatch.undo()
    # platform.platform() names the processor too when `uname -p` tells one apart from the
    # machine; on the machines this project runs on it does not, and the two must agree
    processor = platform.processor()
    if processor in ("", platform.machine()):
        assert mine == platform.platform(terse=True)
    else:
        assert mine.startswith(f"{platform.system()}-{platform.release()}-{platform.machine()}")


def test_versions_agree_with_importlib_for_every_installed_distribution() -> None:
    seen = 0
    for dist in importlib_metadata.distributions():
        assert _metadata._header_version(dist) == dist.version, dist.metadata["Name"]
        seen += 1
    assert seen > 10  # the test environment, not an empty path
    found = _metadata._versions.__wrapped__()
    assert found == {name: importlib_metadata.version(name)
                     for name in _metadata.TRACKED_DISTRIBUTIONS if name in found}
    assert {"agentreplay", "pydantic", "psycopg"} <= found.keys()


def distribution(tmp_path: Path, metadata: str) -> importlib_metadata.Distribution:
    info = tmp_path / "thing-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(metadata, encoding="utf-8")
    return importlib_metadata.PathDistribution(info)


def test_a_version_in_the_description_is_not_the_distributions(tmp_path: Path) -> None:
    body = "\nThe changelog:\nVersion: 9.9\n"
    assert _metadata._header_version(distribution(
        tmp_path / "a", "Metadata-Version: 2.1\nName: thing\nVersion: 1.2.3\n" + body)) == "1.2.3"
    # no Version in the header: none is made up from the body (the caller asks importlib)
    assert _metadata._header_version(distribution(
        tmp_path / "b", "Metadata-Version: 2.1\nName: thing\n" + body)) is None
