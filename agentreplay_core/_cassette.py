"""What the pytest plugin decides per test, as pure functions: record modes, file names, plans.

A test's recording (its "cassette", in vcrpy's word) is one single-run JSONL file,
`<directory of the test file>/agentreplay/<test id>.jsonl`. The record mode and whether that
file exists decide what the test does:

=============  ======================  ================================================
mode           recording exists        no recording
=============  ======================  ================================================
none (default) replay it               fail, saying how to record it
once           replay it               record it
new_episodes   replay it; calls it     record it
               lacks go live and the
               file is rewritten
all            record it again         record it
=============  ======================  ================================================
"""

from __future__ import annotations

import enum
import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentreplay_core._named_mode import NamedMode

CASSETTE_DIR = "agentreplay"
SUFFIX = ".jsonl"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.,=+\-\[\]]+")
_MAX_NAME = 120


class RecordMode(NamedMode):
    """The record modes of vcrpy, with its meanings."""

    NONE = "none"
    ONCE = "once"
    NEW_EPISODES = "new_episodes"
    ALL = "all"

    @classmethod
    def what(cls) -> str:
        return "record mode"


MODE_NAMES: tuple[str, ...] = tuple(m.value for m in RecordMode)


class Plan(str, enum.Enum):
    """What the test does with its recording."""

    REPLAY = "replay"
    RECORD = "record"
    #: replay, sending calls the recording lacks live and rewriting the file with them
    EXTEND = "extend"
    #: no recording and the mode may not make one
    MISSING = "missing"


def plan(mode: RecordMode, exists: bool) -> Plan:
    """What a test does in `mode` when its recording does (not) exist."""
    if mode == RecordMode.ALL:
        return Plan.RECORD
    if exists:
        return Plan.EXTEND if mode == RecordMode.NEW_EPISODES else Plan.REPLAY
    return Plan.MISSING if mode == RecordMode.NONE else Plan.RECORD


def cassette_name(nodeid: str) -> str:
    """A file-system-safe, stable, readable name for the test `nodeid`.

    `tests/test_a.py::TestX::test_y[gpt-4/0.5]` gives `TestX.test_y[gpt-4_0.5]-<hash>`: the
    part after the file, `::` as `.`, unsafe runs of characters as `_`. Whenever a character had
    to be replaced, or the name was shortened, a short hash of the original id is appended, so
    that two ids never share a file.
    """
    parts = nodeid.split("::")
    test_id = ".".join(parts[1:]) if len(parts) > 1 else parts[0]
    safe = _UNSAFE.sub("_", test_id).strip(".")
    if safe == test_id and len(safe) <= _MAX_NAME:
        return safe
    digest = hashlib.sha256(test_id.encode("utf-8")).hexdigest()[:8]
    return f"{safe[:_MAX_NAME]}-{digest}"


def cassette_path(test_file: Path, nodeid: str, name: str | None = None) -> Path:
    """Where the recording of a test lives: `<test dir>/agentreplay/<name>.jsonl`.

    `name` (the marker's) replaces the name derived from the test id; it may contain `/` for a
    subdirectory, and `.jsonl` is added when missing.
    """
    base = test_file.parent / CASSETTE_DIR
    if name is None:
        return base / f"{cassette_name(nodeid)}{SUFFIX}"
    if not name.strip() or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"agentreplay recording name {name!r} must be a relative path inside "
                         f"{base} (e.g. 'checkout-flow')")
    file = base / name
    return file if file.suffix == SUFFIX else file.with_name(file.name + SUFFIX)


def record_command(nodeid: str, mode: RecordMode = RecordMode.ONCE) -> str:
    """The command that records the test `nodeid` (run from the pytest root directory)."""
    return f"pytest {shlex.quote(nodeid)} --agentreplay-mode={mode.value}"


def missing_message(nodeid: str, path: Path, root: Path) -> str:
    """Why a test without a recording fails in `none` mode, and how to record it."""
    where = shown(path, root)
    return (f"agentreplay: no recording for {nodeid}: {where} does not exist, and the record "
            f"mode is 'none' (replay only, so tests never call out).\n"
            f"Record it (this calls the live services once) from {root} with:\n"
            f"    {record_command(nodeid)}\n"
            f"then commit {where}.")


def unused_hint(nodeid: str) -> str:
    """What to do when a replayed test did not ask for every recorded step."""
    return ("hint: if the test no longer makes these calls, record it again with "
            f"`{record_command(nodeid, RecordMode.ALL)}`, or accept unused steps with "
            "@pytest.mark.agentreplay(allow_unused=True)")


def shown(path: Path, root: Path) -> str:
    """`path` as messages show it: relative to the pytest root directory when inside it."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


#: marker keywords passed to `Store.record` / `Store.replay`
RECORD_OPTIONS = ("entropy", "metadata", "tags")
REPLAY_OPTIONS = ("match", "allow_unused", "verify", "allow_hosts", "check_secrets")


@dataclass(frozen=True)
class MarkerOptions:
    """`@pytest.mark.agentreplay(name, **options)`, checked."""

    name: str | None = None
    record: dict[str, Any] = field(default_factory=dict)
    replay: dict[str, Any] = field(default_factory=dict)


def marker_options(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> MarkerOptions:
    """Check the marker's arguments; a ValueError says what is wrong and what is accepted."""
    options = dict(kwargs)
    if len(args) > 1 or (args and "name" in options):
        raise ValueError("@pytest.mark.agentreplay takes at most one positional argument, "
                         "the recording's name")
    name = args[0] if args else options.pop("name", None)
    if name is not None and not isinstance(name, str):
        raise ValueError(f"@pytest.mark.agentreplay: the recording's name must be a string, "
                         f"not {name!r}")
    unknown = sorted(set(options) - {*RECORD_OPTIONS, *REPLAY_OPTIONS})
    if unknown:
        raise ValueError(f"@pytest.mark.agentreplay: unknown "
                         f"{'option' if len(unknown) == 1 else 'options'} {', '.join(unknown)}; "
                         f"accepted: name, {', '.join((*RECORD_OPTIONS, *REPLAY_OPTIONS))}")
    return MarkerOptions(
        name=name,
        record={k: v for k, v in options.items() if k in RECORD_OPTIONS},
        replay={k: v for k, v in options.items() if k in REPLAY_OPTIONS},
    )
