"""The local spool: rows parked while the store is down load later, once each, whatever happens."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentreplay_core import RunStatus, open_store
from agentreplay_core._model import Run
from agentreplay_core._spool import Spool, SpoolFlushError
from agentreplay_core.stores._backend import PendingStep, RunFinish
from agentreplay_core.stores._file import FileBackend, pending_from_step

Recorded = tuple[Run, list[PendingStep], RunFinish]


def recorded(tmp_path: Path, steps: int) -> Recorded:
    """A real recorded run, split into what a recorder spools: header, rows, seal."""
    with open_store("memory:", spool_dir=tmp_path / "unused") as memory:
        with memory.record(name="spooled") as rec:
            for i in range(steps):
                rec.record("tool", "t", {"i": i}, i * i)
        run = memory.get_run(rec.run_id)
        rows = [pending_from_step(s) for s in memory.load_steps(rec.run_id)]
    assert run.finished_at is not None
    finish = RunFinish(run.run_id, run.status, run.step_count, run.head_checksum,
                       run.finished_at)
    header = run.model_copy(update={"status": RunStatus.RECORDING, "step_count": 0,
                                    "head_checksum": None, "finished_at": None})
    return header, rows, finish


def spool_interleaved(spool: Spool, runs: Sequence[Recorded], batch: int,
                      pause: float = 0.0) -> None:
    for header, _, _ in runs:
        spool.write_run(header)
    for start in range(0, max(len(rows) for _, rows, _ in runs), batch):
        for _, rows, _ in runs:
            if rows[start:start + batch]:
                spool.write_rows(rows[start:start + batch], [])
                time.sleep(pause)
    for _, _, finish in runs:
        spool.write_finish(finish)


def assert_loaded_once(store_dir: Path, runs: Sequence[Recorded], tmp_path: Path) -> None:
    with open_store(f"file:{store_dir}", spool_dir=tmp_path / "unused") as store:
        for header, rows, _ in runs:
            steps = store.load_steps(header.run_id)
            assert [s.step for s in steps] == list(range(1, len(rows) + 1))  # no gap, no twin
            assert store.get_run(header.run_id).status == RunStatus.COMPLETE
            assert store.verify(header.run_id).ok


def test_flush_loads_a_run_into_a_file_store(tmp_path: Path) -> None:
    runs = [recorded(tmp_path, 5)]
    spool = Spool(tmp_path / "spool")
    spool_interleaved(spool, runs, batch=2)
    assert spool.flush(FileBackend(tmp_path / "runs")) == {runs[0][0].run_id: 5}
    assert spool.flush(FileBackend(tmp_path / "runs")) == {}
    assert_loaded_once(tmp_path / "runs", runs, tmp_path)


def test_one_run_that_cannot_load_does_not_stop_the_others(tmp_path: Path) -> None:
    runs = sorted((recorded(tmp_path, 3) for _ in range(3)), key=lambda r: str(r[0].run_id))
    spool = Spool(tmp_path / "spool")
    good = [runs[0], runs[2]]
    spool_interleaved(spool, good, batch=3)
    bad_id = runs[1][0].run_id
    spool.write_rows(runs[1][1], [])  # its header never made it: the store has no such run
    with pytest.raises(SpoolFlushError) as caught:
        spool.flush(FileBackend(tmp_path / "runs"))
    assert list(caught.value.failed) == [bad_id]
    assert "RunNotFound" in caught.value.failed[bad_id]
    assert str(bad_id) in str(caught.value)
    assert caught.value.loaded == {runs[0][0].run_id: 3, runs[2][0].run_id: 3}
    assert_loaded_once(tmp_path / "runs", good, tmp_path)
    assert spool.pending() == [bad_id]  # kept for a later flush


def test_a_row_the_database_rejects_fails_only_its_run(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    runs = sorted((recorded(tmp_path, 2) for _ in range(3)), key=lambda r: str(r[0].run_id))
    header, rows, _ = runs[1]
    rows[1].input_json = b'"NUL \\u0000 is no text for jsonb"'
    spool = Spool(tmp_path / "spool")
    spool_interleaved(spool, runs, batch=2)
    with open_store(pg_dsn, schema=pg_schema, spool_dir=tmp_path / "unused") as store:
        with pytest.raises(SpoolFlushError) as caught:
            spool.flush(store.backend)
        assert list(caught.value.failed) == [header.run_id]
        assert set(caught.value.loaded) == {runs[0][0].run_id, runs[2][0].run_id}
        for other in (runs[0], runs[2]):
            assert store.get_run(other[0].run_id).status == RunStatus.COMPLETE
            assert store.verify(other[0].run_id).ok
        assert "set aside" in caught.value.failed[header.run_id]
    # the store refuses that data, so it is set aside rather than failing every later flush
    assert spool.pending() == []
    assert list((tmp_path / "spool").glob(f"{header.run_id}*.rejected"))


def test_torn_spool_line_then_more_rows_still_loads(tmp_path: Path) -> None:
    header, rows, finish = recorded(tmp_path, 3)
    spool = Spool(tmp_path / "spool")
    spool.write_run(header)
    spool.write_rows(rows[:1], [])
    path = tmp_path / "spool" / f"{header.run_id}.jsonl"
    with path.open("ab") as f:  # a recorder killed in the middle of a line
        f.write(b'{"t": "rows", "steps": [{"run_id": "')
    spool.write_rows(rows[1:], [])
    spool.write_finish(finish)
    assert spool.flush(FileBackend(tmp_path / "runs")) == {header.run_id: 3}
    assert_loaded_once(tmp_path / "runs", [(header, rows, finish)], tmp_path)


def test_rows_spooled_after_an_interrupted_load_are_loaded_too(tmp_path: Path) -> None:
    header, rows, finish = recorded(tmp_path, 4)
    spool = Spool(tmp_path / "spool")
    spool.write_run(header)
    spool.write_rows(rows[:2], [])
    live = tmp_path / "spool" / f"{header.run_id}.jsonl"
    # What a flush killed mid-load leaves: the renamed file, while the recorder went on.
    live.rename(live.with_name(live.name + ".loading"))
    spool.write_rows(rows[2:], [])
    spool.write_finish(finish)
    assert spool.load_into(FileBackend(tmp_path / "runs"), header.run_id) == 4
    assert_loaded_once(tmp_path / "runs", [(header, rows, finish)], tmp_path)
    assert not list((tmp_path / "spool").glob("*.jsonl*"))


def test_two_loader_threads_load_every_row_once_while_a_third_spools(tmp_path: Path) -> None:
    runs = [recorded(tmp_path, 40) for _ in range(3)]
    spool_dir, store_dir = tmp_path / "spool", tmp_path / "runs"
    done = threading.Event()
    totals: list[int] = []
    errors: list[BaseException] = []

    def loader() -> None:
        try:
            with open_store(f"file:{store_dir}", spool_dir=spool_dir) as store:
                total = 0
                while True:
                    last = done.is_set()
                    total += sum(store.flush_spool().values())
                    if last:
                        break
                totals.append(total)
        except BaseException as exc:
            errors.append(exc)

    loaders = [threading.Thread(target=loader) for _ in range(2)]
    for thread in loaders:
        thread.start()
    spool_interleaved(Spool(spool_dir), runs, batch=2, pause=0.001)
    done.set()
    for thread in loaders:
        thread.join(timeout=60)
    assert not errors, errors
    assert sum(totals) == 120
    assert_loaded_once(store_dir, runs, tmp_path)
    assert not list(spool_dir.glob("*.jsonl*"))


CHILD = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from agentreplay_core import open_store
    from agentreplay_core._spool import Spool

    spool_dir, store_dir, stop = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    stop_seen, total = False, 0
    with open_store(f"file:{store_dir}", spool_dir=spool_dir) as store:
        print("ready", flush=True)
        while not stop_seen:
            stop_seen = stop.exists()
            total += sum(store.flush_spool().values())
            time.sleep(0.001)
    print(total, flush=True)
""")


def test_two_loader_processes_load_every_row_once_while_a_third_spools(tmp_path: Path) -> None:
    runs = [recorded(tmp_path, 40) for _ in range(3)]
    spool_dir, store_dir, stop = tmp_path / "spool", tmp_path / "runs", tmp_path / "stop"
    script = tmp_path / "loader.py"
    script.write_text(CHILD)
    loaders = [
        subprocess.Popen([sys.executable, str(script), str(spool_dir), str(store_dir), str(stop)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=os.getcwd())
        for _ in range(2)
    ]
    for child in loaders:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    spool_interleaved(Spool(spool_dir), runs, batch=2, pause=0.002)
    stop.touch()
    totals = []
    for child in loaders:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        totals.append(int(out.strip()))
    assert sum(totals) == 120
    assert_loaded_once(store_dir, runs, tmp_path)
    assert not list(spool_dir.glob("*.jsonl*"))


SHORT_WRITE = textwrap.dedent("""
    import json, os, resource, signal, sys
    from pathlib import Path
    from agentreplay_core._spool import Spool
    from agentreplay_core.stores._file import FileBackend, pending_from_step

    from uuid import UUID

    spool_dir, source, run_id = Path(sys.argv[1]), FileBackend(sys.argv[2]), sys.argv[3]
    rows = [pending_from_step(s) for s in source.load_steps(UUID(run_id))]
    path = spool_dir / f"{run_id}.jsonl"
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # report EFBIG instead of dying
    resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 10, resource.RLIM_INFINITY))
    try:
        Spool(spool_dir).write_rows(rows, [])
    except OSError as exc:
        print(json.dumps({"errno": exc.errno}))
    else:
        print(json.dumps({"errno": None}))
""")


def test_a_write_cut_short_raises_and_the_next_append_repairs(tmp_path: Path) -> None:
    header, rows, finish = recorded(tmp_path, 2)
    source = FileBackend(tmp_path / "source")
    source.create_run(header)
    source.append(rows)
    spool = Spool(tmp_path / "spool")
    spool.write_run(header)
    script = tmp_path / "short.py"
    script.write_text(SHORT_WRITE)
    child = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "spool"), str(tmp_path / "source"),
         str(header.run_id)], capture_output=True, text=True, cwd=os.getcwd(), timeout=60,
    )
    assert child.returncode == 0, child.stderr
    # EFBIG: the caller learns of it (and spools or counts the loss) instead of a silent half line
    assert json.loads(child.stdout)["errno"] == errno.EFBIG
    spool.write_rows(rows, [])  # the 10 torn bytes are cut before this line is written
    spool.write_finish(finish)
    assert spool.flush(FileBackend(tmp_path / "runs")) == {header.run_id: 2}
    assert_loaded_once(tmp_path / "runs", [(header, rows, finish)], tmp_path)

