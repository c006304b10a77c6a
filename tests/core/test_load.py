"""Load: 16 processes x 8 threads record into one PostgreSQL; nothing is lost, every run verifies.

The default run lasts 10 s; `AGENTREPLAY_LOAD_SECONDS=60` runs the full minute. Throughput and
added latency are reported (printed, and appended to the file `AGENTREPLAY_LOAD_REPORT` names),
never asserted: they depend on the machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentreplay_core import open_store
from tests.support.load import LoadConfig, LoadRun, audit, report
from tests.support.pgcluster import PgCluster

pytestmark = pytest.mark.load

SECONDS = float(os.environ.get("AGENTREPLAY_LOAD_SECONDS", "10"))


@pytest.mark.timeout(300 + 6 * SECONDS)
def test_sixteen_processes_of_eight_threads_lose_nothing(
    private_cluster: PgCluster, tmp_path: Path
) -> None:
    config = LoadConfig(private_cluster.dsn, "load", str(tmp_path / "spool"), processes=16,
                        threads=8, seconds=SECONDS)
    with LoadRun(config, tmp_path) as load:
        load.start()
        result = load.join()
    report(result.summary(f"{config.processes} processes x {config.threads} threads, "
                          f"{config.durability}, {SECONDS:g} s"))
    assert result.errors == []
    assert result.steps > 0 and len(result.runs) > config.processes * config.threads
    assert result.stat("lost") == 0
    with open_store(private_cluster.dsn, schema="load", spool_dir=tmp_path / "spool") as store:
        # every run complete, sealed, its steps all stored, its chain intact
        assert audit(result, store, private_cluster.dsn, "load") == []
    assert not list((tmp_path / "spool").glob("*.jsonl*"))
