"""A database that goes away, and a process that is killed, lose nothing they promised."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentreplay_core import RunStatus, _sink, open_store
from tests.support.pgcluster import PgCluster


@pytest.mark.parametrize(("durability", "prepare"),
                         [("batched", "thread"), ("sync", "thread"), ("batched", "process")])
def test_database_stopped_mid_run_spools_then_flushes(
    private_cluster: PgCluster, tmp_path: Path, durability: str, prepare: str
) -> None:
    spool = tmp_path / "spool"
    store = open_store(private_cluster.dsn, schema="faults", spool_dir=spool, prepare=prepare)
    store._sink.retry_seconds = 0.5
    with store.record(name="outage", durability=durability) as rec:
        for i in range(10):
            assert rec.record("tool", "t", {"i": i}, i * i) == i + 1
        assert rec.flush()
        private_cluster.stop()
        t0 = time.monotonic()
        for i in range(10, 30):
            assert rec.record("tool", "t", {"i": i}, i * i) == i + 1  # the agent goes on
        agent_time = time.monotonic() - t0
    assert rec.stats.spooled == 20
    assert rec.stats.lost == 0
    assert spool.is_dir() and list(spool.iterdir())
    # With the database down the store cannot load the spool; it stays for later.
    store.close()
    assert list(spool.iterdir())
    private_cluster.start()
    private_cluster.wait_ready()
    with open_store(private_cluster.dsn, schema="faults", spool_dir=spool) as again:
        loaded = again.flush_spool()
        assert loaded == {rec.run_id: 20}
        assert again.flush_spool() == {}  # idempotent, nothing left
        run = again.get_run(rec.run_id)
        assert run.status == RunStatus.COMPLETE
        assert run.step_count == 30
        assert [s.output for s in again.load_steps(rec.run_id)] == [i * i for i in range(30)]
        assert again.verify(rec.run_id).ok
    assert agent_time < 30  # bounded by retry time, not hanging on a dead server


def test_store_close_loads_spool_when_database_is_back(
    private_cluster: PgCluster, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    store = open_store(private_cluster.dsn, schema="faults", spool_dir=spool)
    store._sink.retry_seconds = 0.3
    store._sink.cooldown_seconds = 0.0
    with store.record(name="blip") as rec:
        rec.record("tool", "t", {}, "before")
        rec.flush()
        private_cluster.stop()
        rec.record("tool", "t", {}, "during")
        rec.flush()
        private_cluster.start()
        private_cluster.wait_ready()
        rec.record("tool", "t", {}, "after")
    store.close()
    assert not any(spool.glob("*.jsonl*"))
    with open_store(private_cluster.dsn, schema="faults") as check:
        assert [s.output for s in check.load_steps(rec.run_id)] == ["before", "during", "after"]
        assert check.verify(rec.run_id).ok


def test_writes_reach_the_database_as_soon_as_it_is_back(
    private_cluster: PgCluster, tmp_path: Path
) -> None:
    """For the cooldown after an outage (5 s) every write was spooled without trying: a
    `sync` run started with the database back committed nothing, and closing the store left
    the spool unloaded ("unreachable moments ago")."""
    spool = tmp_path / "spool"
    store = open_store(private_cluster.dsn, schema="faults", spool_dir=spool)
    store._sink.retry_seconds = 0.3
    with store.record(name="warm", durability="sync") as warm:
        warm.record("tool", "t", {}, "before")
    private_cluster.stop()
    with store.record(name="during", durability="sync") as during:
        during.record("tool", "t", {}, "spooled")
    assert during.stats.spooled == 1
    private_cluster.start()
    private_cluster.wait_ready()
    time.sleep(_sink.PROBE_SECONDS)  # the database counts as down still, for seconds more
    with store.record(name="after", durability="sync") as after:
        after.record("tool", "t", {}, "committed")
        with open_store(private_cluster.dsn, schema="faults") as look:
            assert [s.output for s in look.load_steps(after.run_id)] == ["committed"]
    assert after.stats.spooled == 0
    store.close()
    assert not any(spool.glob("*.jsonl*"))
    with open_store(private_cluster.dsn, schema="faults") as check:
        assert [s.output for s in check.load_steps(during.run_id)] == ["spooled"]
        assert check.verify(during.run_id).ok and check.verify(after.run_id).ok


CHILD = textwrap.dedent("""
    import sys
    from agentreplay_core import open_store
    store = open_store(sys.argv[1], schema=sys.argv[4], spool_dir=sys.argv[2])
    with store.record(name="doomed", durability=sys.argv[3]) as rec:
        print(rec.run_id, flush=True)
        i = 0
        while True:
            n = rec.record("tool", "t", {"i": i}, "x" * 100)
            print(n, flush=True)
            i += 1
""")


def test_sigkill_in_sync_mode_loses_no_returned_step(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), pg_dsn, str(tmp_path / "spool"), "sync", pg_schema],
        stdout=subprocess.PIPE, text=True, cwd=os.getcwd(),
    )
    assert child.stdout is not None
    run_id = child.stdout.readline().strip()
    returned = 0
    while returned < 200:
        returned = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.wait()
    with open_store(pg_dsn, schema=pg_schema) as store:
        run = store.get_run(run_id)
        steps = store.load_steps(run_id)
        assert run.status == RunStatus.INCOMPLETE  # the dead process is noticed
        assert len(steps) >= returned
        assert [s.step for s in steps] == list(range(1, len(steps) + 1))
        report = store.verify(run_id)
        assert report.ok, str(report)
        assert store.list_runs(status="incomplete")[0].run_id == run.run_id
