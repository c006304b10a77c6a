"""Faults during load: the agents keep running, and every step is stored or counted lost.

4 processes x 4 threads (odd threads `sync`, even ones `batched`) record into a private
PostgreSQL while it is restarted, while its connections are killed, and while it is down and
the spool's disk is full. Figures are reported (printed, and appended to the file
`AGENTREPLAY_LOAD_REPORT` names), not asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest

from agentreplay_core import open_store
from agentreplay_core._spool import Spool
from agentreplay_core.stores._file import FileBackend
from tests.support.load import LoadConfig, LoadResult, LoadRun, audit, report
from tests.support.pgcluster import PgCluster

SECONDS = 12.0
AGENTREPLAY = Path(sys.executable).parent / "agentreplay"


def config(cluster: PgCluster, tmp_path: Path, **more: object) -> LoadConfig:
    return LoadConfig(cluster.dsn, "load", str(tmp_path / "spool"), processes=4, threads=4,
                      seconds=SECONDS, durability="mixed", **more)  # type: ignore[arg-type]


def wait_until(epoch: float, offset: float) -> None:
    time.sleep(max(0.0, epoch + offset - time.time()))


def steps_between(result: LoadResult, start: float, end: float) -> int:
    """Steps the agents finished in the whole seconds from `start` to `end` after release.

    When the server goes away, agents wait for the first writes' retries (up to about 4 s:
    2 s of retries, the last one waiting up to 2 s for a connection), then record on into the
    spool; a 6 s outage leaves its last 2 s to show that.
    """
    return sum(result.per_second[int(start):int(end)])


def spool_flush_cli(cluster: PgCluster, spool: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(AGENTREPLAY), "spool", "flush", "--dsn", cluster.dsn,
                           "--schema", "load"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AGENTREPLAY_SPOOL_DIR": str(spool)})


@pytest.mark.load
@pytest.mark.timeout(400)
def test_postgres_restarted_mid_load(private_cluster: PgCluster, tmp_path: Path) -> None:
    key = "load-test-key"
    with LoadRun(config(private_cluster, tmp_path, hmac_key=key), tmp_path) as load:
        epoch = load.start()
        wait_until(epoch, 2)
        down = time.time() - epoch
        private_cluster.stop()
        wait_until(epoch, 8)
        private_cluster.start()
        up = time.time() - epoch
        result = load.join()
    flushed = spool_flush_cli(private_cluster, tmp_path / "spool")
    assert flushed.returncode == 0, flushed.stderr
    report(result.summary(f"PostgreSQL stopped at {down:.1f} s, started at {up:.1f} s "
                          "(4 x 4, mixed durability, HMAC key)")
           + f"\n- `agentreplay spool flush` afterwards: {flushed.stdout.strip() or 'nothing'}")
    assert result.errors == []
    assert steps_between(result, up - 2, up) > 0  # recording again while it is still down
    assert result.stat("spooled") > 0  # (else the outage was not met at all)
    assert result.stat("lost") == 0
    assert not list((tmp_path / "spool").glob("*.jsonl*"))
    with open_store(private_cluster.dsn, schema="load", hmac_key=key) as store:
        assert audit(result, store, private_cluster.dsn, "load") == []


@pytest.mark.load
@pytest.mark.timeout(400)
def test_connections_terminated_mid_load(private_cluster: PgCluster, tmp_path: Path) -> None:
    killed = []
    with LoadRun(config(private_cluster, tmp_path), tmp_path) as load:
        epoch = load.start()
        with psycopg.connect(private_cluster.dsn, autocommit=True) as admin:
            for offset in (2, 4, 6, 8):
                wait_until(epoch, offset)
                killed.append(len(admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'").fetchall()))
        result = load.join()
    report(result.summary(f"pg_terminate_backend of every connection at 2, 4, 6, 8 s "
                          f"(4 x 4, mixed durability; {killed} connections killed)"))
    assert result.errors == []
    assert all(n > 0 for n in killed)
    assert result.stat("lost") == 0
    with open_store(private_cluster.dsn, schema="load", spool_dir=tmp_path / "spool") as store:
        store.flush_spool()
        assert audit(result, store, private_cluster.dsn, "load") == []
    assert not list((tmp_path / "spool").glob("*.jsonl*"))


@pytest.mark.load
@pytest.mark.timeout(400)
def test_spool_disk_full_while_postgres_is_down(private_cluster: PgCluster,
                                                tmp_path: Path) -> None:
    # 2 MiB hold about 450 spooled steps: the spool fills early in the outage
    settings = config(private_cluster, tmp_path, spool_bytes=2 * 1024 * 1024,
                      flush_spool_at_end=True)
    with LoadRun(settings, tmp_path) as load:
        epoch = load.start()
        wait_until(epoch, 2)
        down = time.time() - epoch
        private_cluster.stop()
        wait_until(epoch, 8)
        private_cluster.start()
        up = time.time() - epoch
        result = load.join()
    report(result.summary(f"PostgreSQL down from {down:.1f} s to {up:.1f} s, the spool's disk "
                          f"full (2 MiB per worker: {load.disk}; 4 x 4, mixed)")
           + "\n- first log records: " + "; ".join(result.log_samples[:3]))
    assert result.errors == []
    assert steps_between(result, up - 2, up) > 0  # recording again while it is still down
    assert result.stat("lost") > 0 and result.stat("spooled") > 0
    # the loss is loud: logged as errors, when it happens and when the run ends
    assert any(line.startswith("ERROR") and "could not spool" in line and "LOST" in line
               for line in result.log_samples)
    assert any(line.startswith("ERROR") and "recorded with problems" in line
               for line in result.log_samples)
    assert result.spool_left == []  # the workers loaded what their spool held
    with open_store(private_cluster.dsn, schema="load") as store:
        # exactly the steps counted lost are missing, and verification shows those gaps
        assert audit(result, store, private_cluster.dsn, "load", losses_allowed=True) == []


# The spool's failures, one at a time: a per-file size limit (RLIMIT_FSIZE, so EFBIG) stands
# for the full disk, which makes each failure land exactly where the test wants it.
FULL_SPOOL_CHILD = textwrap.dedent("""
    import json, logging, resource, shutil, signal, sys
    from datetime import datetime, timezone
    from pathlib import Path
    from uuid import UUID
    from agentreplay_core._model import Run
    from agentreplay_core._sink import Sink
    from agentreplay_core._spool import Spool
    from agentreplay_core.stores._backend import PendingStep
    from agentreplay_core.stores._file import FileBackend

    work = Path(sys.argv[1])
    T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
    A, B, C, D = (UUID(int=n) for n in (1, 2, 3, 4))
    errors = []
    logging.getLogger("agentreplay").addHandler(type("H", (logging.Handler,), {
        "emit": lambda self, r: errors.append(r.getMessage()) if r.levelno >= 40 else None})())

    def step(run, n, size):
        return PendingStep(run, n, "tool", "t", "k", "", b'"' + b"x" * size + b'"', b"1",
                           False, T0, 0.0, "c")

    def limit(size):
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))

    store = work / "store"
    sink = Sink(FileBackend(store), Spool(work / "spool"), retry_seconds=0.05)
    store.rmdir()
    store.write_text("")  # the store is unreachable: every row goes to the spool
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    for run in (A, B, D):
        sink.write_run(Run(run_id=run, started_at=T0))
    limit(16_000)
    sink.write_run(Run(run_id=C, started_at=T0, metadata={"pad": "m" * 64_000}))
    # one batch of three runs: A's line fits, B's does not, C has no header to load into
    sink.write_rows([step(A, 1, 1_000), step(B, 1, 32_000), step(C, 1, 1_000)], [])
    # D's line written but for its newline: it must not come back as a whole record
    limit(resource.RLIM_INFINITY)
    probe = Spool(work / "probe")
    probe.write_rows([step(D, 1, 1_000)], [])
    line = (work / "probe" / f"{D}.jsonl").stat().st_size
    limit((work / "spool" / f"{D}.jsonl").stat().st_size + line - 1)
    sink.spool_rows([step(D, 1, 1_000)], [])
    limit(resource.RLIM_INFINITY)
    sink.spool_rows([step(D, 2, 1_000)], [])
    print(json.dumps({"spooled": {str(k): v for k, v in sink.spooled_steps.items()},
                      "lost": {str(k): v for k, v in sink.lost_steps.items()},
                      "errors": errors}))
""")


def test_a_full_spool_counts_exactly_the_rows_it_could_not_keep(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(FULL_SPOOL_CHILD)
    (tmp_path / "store").mkdir()
    child = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                           text=True, timeout=60, cwd=Path(__file__).parents[2])
    assert child.returncode == 0, child.stderr
    counts = json.loads(child.stdout)
    a, b, c, d = (f"00000000-0000-0000-0000-00000000000{n}" for n in (1, 2, 3, 4))
    assert counts["spooled"] == {a: 1, d: 1}
    assert counts["lost"] == {b: 1, c: 1, d: 1}
    # logged as errors: C's header (which takes its steps with it), B's row, D's row
    assert len([e for e in counts["errors"] if "LOST" in e]) == 3
    store = FileBackend(tmp_path / "loaded")
    loaded = Spool(tmp_path / "spool").flush(store)
    assert {str(k): v for k, v in loaded.items()} == {a: 1, b: 0, c: 0, d: 1}
    # C's step is not loaded as a row of no run; D's torn row does not come back
    assert {str(r.run_id): [s.step for s in store.load_steps(r.run_id)]
            for r in store.list_runs()} == {a: [1], b: [], d: [2]}
