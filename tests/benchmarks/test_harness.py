"""The benchmark harness measures what it says it measures: its baselines store what the issue
describes, its raw COPY table has the shape of ours, its verdicts follow their limits, and a
quick run of every group completes. No number it prints is checked here (`nox -s bench`)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import open_store
from benchmarks import _baselines
from benchmarks._payloads import chat_steps
from benchmarks._report import Target
from benchmarks._timing import alternate, percentile, process_cpu, server_cpu
from tests.support.pgcluster import PgCluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "limit", "higher", "status"), [
    (1.25, 1.25, False, "PASS"),  # at the limit is within it
    (1.26, 1.25, False, "MISS"),
    (20.0, 20.0, True, "PASS"),
    (19.9, 20.0, True, "MISS"),
    (3.0, None, False, "INFO"),
    (None, 1.25, False, "N/A"),
])
def test_target_verdicts_follow_their_direction(value: float | None, limit: float | None,
                                                higher: bool, status: str) -> None:
    assert Target("t", value, limit, higher_is_better=higher).status == status


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 1..100, unsorted
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == \
        (50.0, 99.0, 100.0)
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_alternate_rotates_which_variant_runs_first() -> None:
    calls: list[str] = []

    def variant(name: str) -> Callable[[], int]:
        def run() -> int:
            calls.append(name)
            return len(calls)
        return run

    values = alternate({name: variant(name) for name in "abc"}, 3, warmup=False)
    assert calls == list("abc" "bca" "cab")
    assert {name: len(v) for name, v in values.items()} == {"a": 3, "b": 3, "c": 3}


def test_seed_recorder_chains_sha256_of_its_json_text(pg_dsn: str, pg_schema: str) -> None:
    steps = chat_steps(3, 0)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(pg_schema)))
        _baselines.create_seed_table(conn, pg_schema)
        assert _baselines.seed_record(conn, pg_schema, steps) > 0
        rows = conn.execute(sql.SQL("SELECT step, input, output, checksum FROM {} "
                                    "ORDER BY step").format(
            sql.Identifier(pg_schema, "seed_log"))).fetchall()
    previous = ""
    for (request, response), (step, stored_in, stored_out, checksum) in zip(
            steps, rows, strict=True):
        previous = hashlib.sha256(
            (previous + json.dumps(request) + json.dumps(response)).encode()).hexdigest()
        assert (stored_in, stored_out, checksum) == (request, response, previous), step


def _shape(conn: psycopg.Connection[Any], schema: str, table: str) -> dict[str, Any]:
    """What makes a table cost what it costs per row, names of constraints left out."""
    oid = conn.execute("SELECT %s::regclass::oid", (f'"{schema}"."{table}"',)).fetchone()
    assert oid is not None
    columns = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod), attnotnull, attstorage, "
        "attcompression FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", oid).fetchall()
    indexes = conn.execute(
        "SELECT indisunique, indisprimary, indkey::text FROM pg_index WHERE indrelid = %s "
        "ORDER BY indkey::text", oid).fetchall()
    checks = conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                          "WHERE conrelid = %s AND contype = 'c' ORDER BY 1", oid).fetchall()
    options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s", oid).fetchone()
    return {"columns": columns, "indexes": indexes, "checks": checks, "options": options}


def test_raw_copy_table_has_the_shape_of_run_log(pg_dsn: str, pg_schema: str) -> None:
    open_store(pg_dsn, schema=pg_schema).close()  # our tables, migrated
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _baselines.create_raw_tables(conn, pg_schema)
        ours, raw = _shape(conn, pg_schema, "run_log"), _shape(conn, pg_schema, "raw_log")
    assert ours["columns"] and ours["indexes"] and ours["checks"]
    assert raw == ours


def test_raw_copy_stores_every_prebuilt_row(pg_dsn: str, pg_schema: str) -> None:
    open_store(pg_dsn, schema=pg_schema).close()
    steps = chat_steps(_baselines.COPY_BATCH + 5, 0)  # more than one COPY transaction
    rows = _baselines.step_rows(steps)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _baselines.create_raw_tables(conn, pg_schema)
        assert _baselines.raw_copy(conn, pg_schema, rows) > 0
        stored = conn.execute(sql.SQL("SELECT step, input, output FROM {} ORDER BY step").format(
            sql.Identifier(pg_schema, "raw_log"))).fetchall()
    assert [(step, request, response) for step, (request, response) in
            enumerate(steps, 1)] == [tuple(r) for r in stored]


def test_cpu_counters_see_work_done(private_cluster: PgCluster) -> None:
    me = process_cpu(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # this process busy for 0.2 s of CPU
        pass
    assert process_cpu(os.getpid()) > me
    before = server_cpu(str(private_cluster.data))
    assert before is not None
    with psycopg.connect(private_cluster.dsn) as conn:  # the server busy for ~0.5 s
        conn.execute("SELECT count(*) FROM generate_series(1, 5000000)")
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()
        busy = server_cpu(str(private_cluster.data))
    assert busy is not None and busy > before
    assert backend is not None
    deadline = time.monotonic() + 30
    while Path(f"/proc/{backend[0]}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # the backend exits, and the postmaster waits for it
    assert not Path(f"/proc/{backend[0]}").exists()
    # its CPU is still counted (the postmaster's children that exited)
    after = server_cpu(str(private_cluster.data))
    assert after is not None and after >= busy
    assert server_cpu(None) is None  # a server it did not start: nothing to read
    assert server_cpu(str(private_cluster.root / "no-such-dir")) is None


_SUMMARY_ROW = re.compile(r"^\| (?P<target>[^|]+) \| (?P<measured>[^|]*) \| (?P<wanted>[^|]*) "
                          r"\| (?P<result>PASS|MISS|INFO|N/A) \|$")


@pytest.mark.slow
def test_quick_run_of_every_group_reports_every_target(pg_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    env = {**os.environ, "AGENTREPLAY_DSN": pg_dsn, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--markdown", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = out.read_text().split("## Summary", 1)[1]
    rows = [m.groupdict() for line in summary.splitlines()
            if (m := _SUMMARY_ROW.match(line.strip()))]
    names = " ".join(r["target"] for r in rows)
    # every group's targets are there, measured (pgvector is there on the tests' server
    # unless it is an external one without it)
    for group in ("LangChain", "LlamaIndex", "Caller latency", "Throughput", "enqueue to durable",
                  "Replay", "load + verify", "Embeddings", "Storage", "Scaling", "Startup"):
        assert group in names, group
    measured = [r for r in rows if r["result"] in ("PASS", "MISS")]
    assert len(measured) >= 15
    assert all(r["measured"].strip() not in ("", "-") for r in measured)


def test_an_unknown_group_is_refused() -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--only", f"x{uuid.uuid4().hex}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown group" in done.stderr
