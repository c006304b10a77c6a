"""The JSONL file store: readable files, exports replayable without a database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentreplay_core import RunStatus, StoreError, open_store


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


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    with open_store(f"file:{tmp_path}") as store, store.record() as rec:
        rec.record("tool", "t", {}, 1)
        rec.record("tool", "t", {}, 2)
    path = tmp_path / f"{rec.run_id}.jsonl"
    content = path.read_bytes()
    lines = content.split(b"\n")
    # keep the header and step 1, then half of step 2: a writer killed mid-line
    path.write_bytes(b"\n".join(lines[:2]) + b"\n" + lines[2][: len(lines[2]) // 2])
    with open_store(f"file:{tmp_path}") as store:
        run = store.get_run(rec.run_id)
        assert run.status == RunStatus.RECORDING or run.status == RunStatus.INCOMPLETE
        assert [s.step for s in store.load_steps(rec.run_id)] == [1]
        assert store.verify(rec.run_id).ok


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
