"""SIGKILL of a process recording in `batched` mode: what it loses is bounded and documented.

The batched writer holds at most `max_queue` rows in its queue plus the one batch it is writing
(at most 1,000 rows); a SIGKILL loses those and nothing else. What was written before stays a
dense, verifiable prefix of the run, which the next `agentreplay runs` or `agentreplay verify`
shows as `incomplete` (the recording process is gone). `sync` mode is covered in test_faults.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import RunStatus, open_store

AGENTREPLAY = Path(sys.executable).parent / "agentreplay"
#: the rows the writer takes from its queue for one write (BatchedWriter's max_batch)
BATCH = 1_000

# Records ~2 KB/1 KB steps, printing each step number once `record` returned; "warm" after
# `warm_up` steps made durable with rec.flush(); then waits for a line on stdin if told to.
CHILD = textwrap.dedent("""
    import sys, time
    from agentreplay_core import open_store
    dsn, schema, spool, queue, warm_up, wait, pause, prepare = sys.argv[1:9]
    store = open_store(dsn, schema=schema, spool_dir=spool, max_queue=int(queue),
                       prepare=prepare)
    with store.record(name="killed") as rec:
        print(rec.run_id, flush=True)
        i = 0
        while True:
            i += 1
            n = rec.record("llm", "m", {"messages": [{"role": "user", "content": f"q{i} "
                           + "x" * 2000}]}, {"content": "y" * 1000, "i": i})
            print(n, flush=True)
            if i == int(warm_up):
                assert rec.flush()
                print("warm", flush=True)
                if wait == "wait":
                    sys.stdin.readline()
            time.sleep(float(pause))
""")


class Child:
    """The recording process, and the highest step number it said `record` returned."""

    def __init__(self, tmp_path: Path, dsn: str, schema: str, *, queue: int, warm_up: int,
                 wait: bool, pause: float, prepare: str = "thread") -> None:
        script = tmp_path / "child.py"
        script.write_text(CHILD)
        self.proc = subprocess.Popen(
            [sys.executable, str(script), dsn, schema, str(tmp_path / "spool"), str(queue),
             str(warm_up), "wait" if wait else "go", str(pause), prepare],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
        self.returned = 0
        self.run_id = self._line()

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, "the child died"
        return line

    def read_until(self, wanted: str | int) -> int:
        """Read lines until `wanted` ("warm", or a step number); returns `returned`."""
        while True:
            line = self._line()
            if line.isdigit():
                self.returned = int(line)
            if line == wanted or (isinstance(wanted, int) and self.returned >= wanted):
                return self.returned

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def kill(self) -> int:
        """SIGKILL it; returns `returned`, with what it printed meanwhile (give or take the
        one step that returned but was not printed yet)."""
        self.proc.send_signal(signal.SIGKILL)
        out, _ = self.proc.communicate(timeout=60)
        self.returned = max([self.returned, *(int(x) for x in out.split() if x.isdigit())])
        return self.returned


def agentreplay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(AGENTREPLAY), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})


@contextmanager
def table_locked(dsn: str, schema: str) -> Iterator[None]:
    """Another session holds run_log locked (at most 20 s): the writer cannot write."""
    conn = psycopg.connect(dsn)
    try:
        conn.execute("SET idle_in_transaction_session_timeout = '20s'")
        conn.execute(sql.SQL("LOCK TABLE {}.run_log IN ACCESS EXCLUSIVE MODE").format(
            sql.Identifier(schema)))
        yield
    finally:
        with suppress(psycopg.Error):
            conn.rollback()
        conn.close()


@pytest.mark.parametrize("prepare", ["thread", "process"])
def test_sigkill_in_batched_mode_loses_at_most_the_queue_and_shows_incomplete(
    pg_dsn: str, pg_schema: str, tmp_path: Path, prepare: str
) -> None:
    queue = 100
    # with a helper process the writer holds one more batch: the one being prepared there
    window = queue + BATCH * (2 if prepare == "process" else 1)
    child = Child(tmp_path, pg_dsn, pg_schema, queue=queue, warm_up=500, wait=False,
                  pause=0.001, prepare=prepare)
    run_id = child.run_id
    child.read_until("warm")
    child.read_until(2_000)  # more than the window: a writer that held rows back would show
    returned = child.kill()
    with open_store(pg_dsn, schema=pg_schema) as store:
        stored = [s.step for s in store.backend.load_steps(store.resolve_run_id(run_id))]
    kept = len(stored)
    print(f"\nbatched, ~1 ms between steps: {returned} steps returned, {kept} stored, "
          f"{returned - kept} lost at SIGKILL (window: {window}, prepare={prepare})")
    assert stored == list(range(1, kept + 1))  # a dense prefix
    assert kept >= 500  # what rec.flush() confirmed
    assert returned + 1 - window <= kept <= returned + 1
    # the next `agentreplay runs` notices the dead recorder
    listed = agentreplay("runs", "--json", "--dsn", pg_dsn, "--schema", pg_schema)
    assert listed.returncode == 0, listed.stderr
    [run] = [r for r in json.loads(listed.stdout) if r["run_id"] == run_id]
    assert (run["status"], run["steps"], run["head_checksum"]) == ("incomplete", kept, None)
    verified = agentreplay("verify", run_id, "--dsn", pg_dsn, "--schema", pg_schema)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"{kept} steps, chain intact, not sealed" in " ".join(verified.stdout.split())


def test_sigkill_with_the_writer_stuck_loses_at_most_the_queue_and_one_batch(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    queue = 50
    child = Child(tmp_path, pg_dsn, pg_schema, queue=queue, warm_up=10, wait=True, pause=0)
    run_id = child.run_id
    warm = child.read_until("warm")
    with table_locked(pg_dsn, pg_schema):
        child.go()
        child.read_until(warm + queue)  # the queue has filled behind the stuck writer
        time.sleep(0.5)  # the recording thread now waits for room (backpressure)
        returned = child.kill()
    # The batch the writer had sent may still commit once the lock goes (the server notices
    # the dead client only then); the queued rows are gone.
    with open_store(pg_dsn, schema=pg_schema) as store:
        stored = [s.step for s in store.backend.load_steps(store.resolve_run_id(run_id))]
    kept = len(stored)
    print(f"\nbatched, writer stuck: {returned} steps returned, {kept} stored, "
          f"{returned - kept} lost at SIGKILL (window: {queue} + {BATCH})")
    assert stored == list(range(1, kept + 1)) and kept >= warm
    # lost: the rows still queued (rows the stuck writer had already taken into its batch
    # commit once the lock goes, so fewer than `queue` may be lost), never more than the
    # documented window
    assert 0 < returned - kept <= queue + BATCH
    # `agentreplay verify` is the first to look: it notices the dead recorder too
    verified = agentreplay("verify", run_id, "--dsn", pg_dsn, "--schema", pg_schema)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"{kept} steps, chain intact, not sealed" in " ".join(verified.stdout.split())
    with psycopg.connect(pg_dsn) as conn:
        status = conn.execute(sql.SQL("SELECT status FROM {}.runs WHERE run_id = %s").format(
            sql.Identifier(pg_schema)), (run_id,)).fetchone()
    assert status == (RunStatus.INCOMPLETE.value,)
    assert not list((tmp_path / "spool").glob("*.jsonl*"))  # nothing parked, nothing hidden
