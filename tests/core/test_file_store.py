"""The JSONL file store: readable files, exports replayable without a database."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from agentreplay_core import Run, RunNotFound, RunStatus, StoreError, open_store
from agentreplay_core._spool import Spool
from agentreplay_core.stores._backend import RunFinish
from agentreplay_core.stores._file import FileBackend, pending_from_step


def test_run_file_is_one_readable_line_per_step(tmp_path: Path) -> None:
    with open_store(f"file:{tmp_path}") as store, store.record(name="diffable") as rec:
        rec.record("tool", "search", {"q": "paris"}, {"hits": ["a", "b"]})
        rec.record("llm", "m", {"messages": ["hi"]}, "hello")
    lines = (tmp_path / f"{rec.run_id}.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["t"] for r in records] == ["run", "step", "step", "finish"]
    assert records[1]["input"] == {"q": "paris"}
    assert records[1]["output"] == {"hits": ["a", "b"]}
    assert records[0]["format"] == "agentreplay-jsonl"


def test_single_file_replays_without_database(tmp_path: Path) -> None:
    path = tmp_path / "bug-report.jsonl"
    with open_store(f"file:{path}") as store, store.record(name="export") as rec:
        rec.record("tool", "t", {"x": 1}, [1, 2, 3])
    with open_store(str(path)) as again:
        assert again.verify(rec.run_id).ok
        with again.replay(rec.run_id) as player:
            assert player.next("tool", "t", {"x": 1}) == [1, 2, 3]


def record_lines(tmp_path: Path, steps: int) -> tuple[UUID, Path, list[bytes]]:
    """A run recorded into a file store, and the lines of its file."""
    with open_store(f"file:{tmp_path}") as store, store.record() as rec:
        for i in range(steps):
            rec.record("tool", "t", {"i": i}, i)
    path = tmp_path / f"{rec.run_id}.jsonl"
    return rec.run_id, path, path.read_bytes().split(b"\n")


def whole_lines(path: Path) -> list[dict[str, object]]:
    content = path.read_bytes()
    assert content.endswith(b"\n")
    return [json.loads(line) for line in content.splitlines()]


@pytest.mark.parametrize("cut", ["half", "after the input object"])
def test_torn_last_line_is_ignored(tmp_path: Path, cut: str) -> None:
    run_id, path, lines = record_lines(tmp_path, 2)
    step2 = lines[2]
    torn = step2[: len(step2) // 2] if cut == "half" else step2[: step2.index(b',"output"')]
    # keep the header and step 1, then part of step 2: a writer killed mid-line
    path.write_bytes(b"\n".join(lines[:2]) + b"\n" + torn)
    with open_store(f"file:{tmp_path}") as store:
        run = store.get_run(run_id)
        assert run.status == RunStatus.RECORDING or run.status == RunStatus.INCOMPLETE
        assert [s.step for s in store.load_steps(run_id)] == [1]
        assert store.verify(run_id).ok


KILLED = textwrap.dedent("""
    import sys, time
    from agentreplay_core import open_store
    store = open_store(f"file:{sys.argv[1]}")
    with store.record(name="doomed", durability="sync") as rec:
        for i in range(3):
            rec.record("tool", "t", {"i": i}, i)
        print(rec.run_id, flush=True)
        time.sleep(60)
""")


def test_killed_recorder_mid_line_leaves_an_incomplete_readable_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    script = tmp_path / "child.py"
    script.write_text(KILLED)
    child = subprocess.Popen([sys.executable, str(script), str(runs)], stdout=subprocess.PIPE,
                             text=True, cwd=os.getcwd())
    assert child.stdout is not None
    run_id = UUID(child.stdout.readline().strip())
    child.send_signal(signal.SIGKILL)
    child.wait()
    path = runs / f"{run_id}.jsonl"
    with path.open("ab") as f:  # SIGKILL while the fourth step was half written
        f.write(b'{"t":"step","run_id":"' + str(run_id).encode()[:9])
    with open_store(f"file:{runs}") as store:
        assert [(r.run_id, r.status) for r in store.list_runs()] == [
            (run_id, RunStatus.INCOMPLETE)]  # noticed dead, and marked so in the file
        assert [s.step for s in store.load_steps(run_id)] == [1, 2, 3]
        assert store.verify(run_id).ok
    assert [r["t"] for r in whole_lines(path)] == ["run", "step", "step", "step", "status"]
    with open_store(f"file:{runs}") as again:  # what the next reader sees
        assert again.get_run(run_id).status == RunStatus.INCOMPLETE


def test_mark_incomplete_changes_only_a_recording_run(tmp_path: Path) -> None:
    now = datetime.now(timezone.utc)
    backend = FileBackend(tmp_path)
    dead, sealed = Run(run_id=uuid4(), started_at=now), Run(run_id=uuid4(), started_at=now)
    backend.create_run(dead)
    backend.create_run(sealed)
    FileBackend(tmp_path).finish_run(RunFinish(sealed.run_id, RunStatus.COMPLETE, 0, None, now))
    assert backend.mark_incomplete(dead.run_id) is True
    assert backend.mark_incomplete(dead.run_id) is False
    assert backend.mark_incomplete(sealed.run_id) is False  # sealed by another writer: kept
    other = FileBackend(tmp_path)
    assert other.get_run(dead.run_id).status == RunStatus.INCOMPLETE
    assert other.get_run(sealed.run_id).status == RunStatus.COMPLETE
    # a spool flush that seals the run later wins over the reaper's mark
    other.finish_run(RunFinish(dead.run_id, RunStatus.COMPLETE, 0, None, now))
    assert backend.get_run(dead.run_id).status == RunStatus.COMPLETE
    with pytest.raises(RunNotFound):
        backend.mark_incomplete(uuid4())


def test_last_line_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    run_id, path, lines = record_lines(tmp_path, 2)
    path.write_bytes(b"\n".join(lines[:3]))  # header, step 1, step 2 without its newline
    backend = FileBackend(tmp_path)
    assert [s.step for s in backend.load_steps(run_id)] == [1, 2]
    assert backend.mark_incomplete(run_id) is True
    assert [s.step for s in backend.load_steps(run_id)] == [1, 2]
    assert [r["t"] for r in whole_lines(path)] == ["run", "step", "step", "status"]


def test_spool_load_after_a_torn_line_keeps_the_file_readable(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_id, path, lines = record_lines(runs, 3)
    backend = FileBackend(runs)
    run, steps = backend.get_run(run_id), backend.load_steps(run_id)
    # the store failed in the middle of step 2; steps 2-3 and the seal went to the spool
    path.write_bytes(b"\n".join(lines[:2]) + b"\n" + lines[2][:40])
    spool = Spool(tmp_path / "spool")
    spool.write_rows([pending_from_step(s) for s in steps[1:]], [])
    assert run.finished_at is not None
    spool.write_finish(RunFinish(run_id, run.status, run.step_count, run.head_checksum,
                                 run.finished_at))
    assert spool.flush(backend) == {run_id: 2}
    with open_store(f"file:{runs}") as store:
        assert [r.run_id for r in store.list_runs()] == [run_id]
        assert [s.step for s in store.load_steps(run_id)] == [1, 2, 3]
        assert store.get_run(run_id).status == RunStatus.COMPLETE
        assert store.verify(run_id).ok
    whole_lines(path)


def test_list_runs_skips_an_unreadable_file_and_names_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good, _, _ = record_lines(tmp_path, 1)
    broken = tmp_path / f"{uuid4()}.jsonl"
    broken.write_bytes(b"not json at all\n{}\n")
    with open_store(f"file:{tmp_path}") as store:
        with caplog.at_level(logging.WARNING, logger="agentreplay"):
            assert [r.run_id for r in store.list_runs()] == [good]
        assert broken.name in caplog.text
        assert "not valid JSON" in caplog.text
        with pytest.raises(StoreError, match=f"{broken}: line 1 is not valid JSON"):
            store.get_run(broken.stem)


SHORT_WRITE = textwrap.dedent("""
    import json, resource, signal, sys
    from pathlib import Path
    from uuid import UUID
    from agentreplay_core.stores._file import FileBackend, pending_from_step

    source, target, run_id = FileBackend(sys.argv[1]), FileBackend(sys.argv[2]), UUID(sys.argv[3])
    rows = [pending_from_step(s) for s in source.load_steps(run_id)]
    target.create_run(source.get_run(run_id))
    size = (Path(sys.argv[2]) / f"{run_id}.jsonl").stat().st_size
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # report EFBIG instead of dying
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 10, resource.RLIM_INFINITY))
    try:
        target.append(rows)
    except OSError as exc:
        print(json.dumps({"errno": exc.errno}))
    else:
        print(json.dumps({"errno": None}))
""")


def test_a_write_cut_short_raises_and_the_next_append_repairs(tmp_path: Path) -> None:
    run_id, _, _ = record_lines(tmp_path / "source", 2)
    script = tmp_path / "short.py"
    script.write_text(SHORT_WRITE)
    child = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "source"), str(tmp_path / "target"),
         str(run_id)], capture_output=True, text=True, cwd=os.getcwd(), timeout=60,
    )
    assert child.returncode == 0, child.stderr
    # the caller learns of it (and spools or counts the loss) instead of a silent half line
    assert json.loads(child.stdout)["errno"] == errno.EFBIG
    rows = [pending_from_step(s) for s in FileBackend(tmp_path / "source").load_steps(run_id)]
    target = FileBackend(tmp_path / "target")
    target.append(rows)  # the 10 torn bytes are cut before these lines are written
    assert [s.step for s in target.load_steps(run_id)] == [1, 2]
    whole_lines(tmp_path / "target" / f"{run_id}.jsonl")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json at all\n{}\n", "not valid JSON"),
        (b'{"t": "step"}\n', "no run header"),
        (b'{"t": "run", "format": "agentreplay-jsonl", "format_version": 99, "run": {}}\n',
         "newer agentreplay"),
        (b'{"t": "run", "format": "something-else", "format_version": 1, "run": {}}\n',
         "not an agentreplay run file"),
        (b'{"t": "run", "format": "agentreplay-jsonl", "format_version": 1, "run": {"x": 1}}\n',
         "malformed run file"),
    ],
)
def test_broken_files_give_clear_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_bytes(content)
    with open_store(str(path)) as store, pytest.raises(StoreError, match=message):
        store.list_runs()


def test_edited_file_fails_verification(tmp_path: Path) -> None:
    with open_store(f"file:{tmp_path}") as store, store.record() as rec:
        rec.record("tool", "t", {}, "original")
    path = tmp_path / f"{rec.run_id}.jsonl"
    path.write_text(path.read_text().replace('"original"', '"edited"'))
    with open_store(f"file:{tmp_path}") as store:
        report = store.verify(rec.run_id)
    assert not report.ok
    assert report.problems[0].step == 1
