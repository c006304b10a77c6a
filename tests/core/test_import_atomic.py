"""`import` lands a run whole or leaves the store as it was, and imports only the file's run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from uuid import UUID

import pytest

from agentreplay_core import RunStatus, StoreError, open_store
from agentreplay_core._transfer import export_run, import_run
from tests.core.test_cli_runs import agentreplay, one_line_error
from tests.support.pgfaults import reject_rows

STEPS = 1_600  # four import batches


@pytest.fixture(autouse=True)
def _own_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTREPLAY_SPOOL_DIR", str(tmp_path / "spool"))


def exported(tmp_path: Path, steps: int = STEPS, *, poison_at: int | None = None) -> Path:
    """A sealed run of `steps` steps exported to a file; step `poison_at` is named "poison"."""
    with open_store("memory:") as memory:
        with memory.record(name="big") as rec:
            for i in range(1, steps + 1):
                rec.record("tool", "poison" if i == poison_at else "lookup",
                           {"q": i, "pad": "x" * 100}, {"r": i})
        path = tmp_path / f"{rec.run_id}.jsonl"
        export_run(memory, rec.run_id, path)
    return path


def run_id_of(path: Path) -> UUID:
    return UUID(json.loads(path.read_bytes().split(b"\n", 1)[0])["run"]["run_id"])


def assert_whole(url: str, schema: str, run_id: UUID, steps: int) -> None:
    with open_store(url, schema=schema) as store:
        assert store.get_run(run_id).status == RunStatus.COMPLETE
        assert len(store.load_steps(run_id)) == steps
        assert store.verify(run_id).ok


def test_a_refused_step_mid_import_leaves_the_stored_copy(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    good = exported(tmp_path, poison_at=1_200)  # refused once the trigger is there
    run_id = run_id_of(good)
    with open_store(pg_dsn, schema=pg_schema) as store:
        import_run(store, good)
    reject_rows(pg_dsn, pg_schema, "run_log", "poison", "22023")
    with open_store(pg_dsn, schema=pg_schema) as store, \
            pytest.raises(StoreError, match="refused"):
        import_run(store, good, replace=True)
    assert_whole(pg_dsn, pg_schema, run_id, STEPS)  # the good copy was not deleted first


def test_a_refused_step_mid_import_stores_nothing(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    path = exported(tmp_path, poison_at=1_200)
    with open_store(pg_dsn, schema=pg_schema) as store:
        reject_rows(pg_dsn, pg_schema, "run_log", "poison", "22023")
        with pytest.raises(StoreError, match="refused"):
            import_run(store, path)
        assert store.list_runs() == []  # no `complete` run missing its steps


#: imports FILE into the schema with --replace, and sends itself SIGNAL after two batches
_INTERRUPTED = """
import os, signal, sys
from agentreplay_core import open_store
from agentreplay_core._transfer import import_run
url, schema, path, sig = sys.argv[1:]
# a Ctrl-C at a terminal: a test run started in the background inherits SIGINT ignored
signal.signal(signal.SIGINT, signal.default_int_handler)

def progress(done: int, total: int) -> None:
    if done >= 1000:
        os.kill(os.getpid(), getattr(signal, sig))

with open_store(url, schema=schema) as store:
    import_run(store, path, replace=True, progress=progress)
"""


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGINT"])
def test_an_import_killed_midway_leaves_the_stored_copy(
    pg_dsn: str, pg_schema: str, tmp_path: Path, sig: str
) -> None:
    path = exported(tmp_path)
    run_id = run_id_of(path)
    with open_store(pg_dsn, schema=pg_schema) as store:
        import_run(store, path)
    child = subprocess.run([sys.executable, "-c", _INTERRUPTED, pg_dsn, pg_schema, str(path),
                            sig], capture_output=True, text=True, timeout=120)
    assert child.returncode in (-signal.SIGKILL, -signal.SIGINT, 1), child.stderr
    assert_whole(pg_dsn, pg_schema, run_id, STEPS)


def test_a_second_replace_meanwhile_is_refused_cleanly(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    path = exported(tmp_path)
    run_id = run_id_of(path)
    midway, go_on = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first_import() -> None:
        def progress(done: int, total: int) -> None:
            if done == 500:
                midway.set()
                go_on.wait(60)

        try:
            with open_store(pg_dsn, schema=pg_schema) as store:
                import_run(store, path, replace=True, progress=progress)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=first_import)
    thread.start()
    try:
        assert midway.wait(60)
        with open_store(pg_dsn, schema=pg_schema) as store, \
                pytest.raises(StoreError, match=r"another import of run .* is under way"):
            import_run(store, path, replace=True)
    finally:
        go_on.set()
        thread.join(120)
    assert errors == []
    assert_whole(pg_dsn, pg_schema, run_id, STEPS)


def test_cli_replace_into_a_file_store_keeps_one_whole_copy(tmp_path: Path) -> None:
    path = exported(tmp_path, 30)
    url = f"file:{tmp_path / 'store'}"
    assert agentreplay("import", str(path), "--dsn", url).returncode == 0
    again = agentreplay("import", str(path), "--replace", "--dsn", url)
    assert again.returncode == 0, again.stderr
    assert "replacing the stored one" in again.stdout
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [path.name]
    with open_store(url) as store:
        assert len(store.load_steps(run_id_of(path))) == 30
        assert store.verify(run_id_of(path)).ok


def test_a_step_line_of_another_run_is_malformed(tmp_path: Path) -> None:
    """--no-verify imports the file's run as it is, never rows into another run."""
    victim, report = exported(tmp_path, 1), exported(tmp_path, 2)
    url = f"file:{tmp_path / 'store'}"
    assert agentreplay("import", str(victim), "--dsn", url).returncode == 0
    lines = report.read_text().splitlines()
    step = json.loads(lines[2])
    step["run_id"], step["step"] = str(run_id_of(victim)), 2
    lines[2] = json.dumps(step)
    report.write_text("\n".join(lines) + "\n")
    error = one_line_error(agentreplay("import", str(report), "--no-verify", "--dsn", url))
    assert "line 3" in error and str(run_id_of(victim)) in error
    with open_store(url) as store:
        assert len(store.load_steps(run_id_of(victim))) == 1
        assert store.verify(run_id_of(victim)).ok
        assert [r.run_id for r in store.list_runs()] == [run_id_of(victim)]


def unsealed_export(tmp_path: Path) -> Path:
    """A run exported while it was still recording (as from another host)."""
    with open_store("memory:") as memory:
        recording = memory.record(name="live", durability="sync")
        rec = recording.__enter__()
        rec.record("tool", "t", {"i": 1}, "so far")
        path = tmp_path / f"{rec.run_id}.jsonl"
        export_run(memory, rec.run_id, path)
        recording.__exit__(None, None, None)
    return path


@pytest.mark.parametrize("where", ["file", "postgres"])
def test_an_unsealed_snapshot_is_imported_incomplete(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    path = unsealed_export(tmp_path)
    if where == "file":
        args = ["--dsn", f"file:{tmp_path / 'store'}"]
    else:
        args = ["--dsn", request.getfixturevalue("pg_dsn"),
                "--schema", request.getfixturevalue("pg_schema")]
    result = agentreplay("import", str(path), *args)
    assert result.returncode == 0, result.stderr
    assert "unsealed" in result.stdout and "incomplete" in result.stdout
    listed = json.loads(agentreplay("runs", "--json", *args).stdout)
    assert [r["status"] for r in listed] == ["incomplete"]
