"""Many threads in one run, many processes in one database: dense steps, valid chains."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from agentreplay_core import Store, open_store


def test_eight_threads_record_into_one_run(any_store: Store) -> None:
    per_thread = 200
    barrier = threading.Barrier(8)

    def work(t: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            rec.record("tool", f"worker-{t}", {"i": i}, {"t": t, "i": i})

    with any_store.record(name="threads") as rec:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    steps = any_store.load_steps(rec.run_id)
    assert [s.step for s in steps] == list(range(1, 8 * per_thread + 1))
    assert any_store.get_run(rec.run_id).step_count == 8 * per_thread
    assert any_store.verify(rec.run_id).ok
    for t in range(8):
        mine = [s.output["i"] for s in steps if s.name == f"worker-{t}"]
        assert mine == list(range(per_thread))  # each thread's own order is kept


WORKER = textwrap.dedent("""
    import sys
    from agentreplay_core import open_store
    dsn, schema, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with open_store(dsn, schema=schema) as store:
        with store.record(name="proc", durability=mode) as rec:
            for i in range(n):
                rec.record("llm", "m", {"i": i}, {"text": "y" * 500, "i": i})
        print(rec.run_id)
""")


def test_four_processes_record_four_runs(pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    procs = [
        subprocess.Popen([sys.executable, str(script), pg_dsn, pg_schema, "500",
                          "sync" if k % 2 else "batched"], stdout=subprocess.PIPE, text=True)
        for k in range(4)
    ]
    run_ids = []
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0
        run_ids.append(out.strip())
    with open_store(pg_dsn, schema=pg_schema) as store:
        for run_id in run_ids:
            steps = store.load_steps(run_id)
            assert [s.step for s in steps] == list(range(1, 501))
            assert [s.output["i"] for s in steps] == list(range(500))
            assert store.verify(run_id).ok
