"""`prepare="process"`: a helper process prepares the batched writer's steps. The rows must be
the very rows the writer's own thread makes, and whatever happens to the helper (it cannot
start, never answers, is killed, outlives its parent) must cost the recording nothing."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import Recorder, Redactor, Store, open_store
from tests.support.helper_process import helper_of, wait_until_used

#: the columns that must not differ between the two ways of preparing a step (the times do)
COLUMNS = ("step", "kind", "name", "match_key", "path", "input", "output", "is_error",
           "checksum")


def steps_worth_checking() -> list[tuple[str, str, Any, Any]]:
    """Secrets by shape and by field, a growing conversation (stored as deltas), values the
    codec tags (NaN, huge ints, bytes, NUL, lone surrogates), one too big to keep, one too
    deep to store (its marker is made when it is recorded), and an embedding."""
    conversation: list[dict[str, str]] = [{"role": "system", "content": "be brief " * 40}]
    steps: list[tuple[str, str, Any, Any]] = []
    for turn in range(12):
        conversation.append({"role": "user", "content": f"question {turn} " + "word " * 300})
        steps.append(("llm", "chat", {"messages": list(conversation), "temperature": 0.2},
                      {"content": f"answer {turn}"}))
        conversation.append({"role": "assistant", "content": f"answer {turn}"})
    deep: Any = "bottom"
    for _ in range(300):
        deep = [deep]
    steps += [
        ("llm", "chat", {"messages": [{"role": "user", "content":
                                       "my key is sk-" + "A1b2C3d4" * 5}]}, {"content": "ok"}),
        ("tool", "login", {"api_key": "hunter2-hunter2", "password": "p4ssw0rd!!"},
         {"text": "Authorization: Bearer abcdef0123456789abcdef"}),
        ("tool", "odd", {"nan": float("nan"), "big": 2**80, "raw": b"\x00\xff",
                         "nul": "a\x00b", "surrogate": "x\ud800y"}, [1.5, -0.0, None]),
        ("tool", "huge", {"blob": "z" * 300_000}, "fine"),
        ("tool", "deep", deep, "the input cannot be stored"),
        ("embedding", "embed", {"texts": ["a"]}, [[0.1, 0.2, 0.30000000000000004]]),
    ]
    return steps


def record_all(store: Store, run_id: uuid.UUID) -> Recorder:
    with store.record(name="checked", run_id=run_id) as rec:
        rec.max_value_bytes = 100_000  # so that "huge" is refused for its size
        for kind, name, request, response in steps_worth_checking():
            rec.record(kind, name, request, response)
    return rec


def stored_rows(dsn: str, schema: str, run_id: uuid.UUID) -> list[tuple[Any, ...]]:
    query = sql.SQL("SELECT {} FROM {}.run_log WHERE run_id = %s ORDER BY step").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in COLUMNS), sql.Identifier(schema))
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, (run_id,)).fetchall()


def test_the_helper_stores_the_rows_the_writer_thread_stores(
    pg_dsn: str, pg_schema: str, other_schema: str, spool_dir: Path
) -> None:
    run_id = uuid.uuid4()  # the same run in two schemas: its checksums must agree too
    with open_store(pg_dsn, schema=pg_schema, hmac_key=b"k", spool_dir=spool_dir) as store:
        assert store.prepare == "thread"
        record_all(store, run_id)
        in_thread = stored_rows(pg_dsn, pg_schema, run_id)
    with open_store(pg_dsn, schema=other_schema, hmac_key=b"k", spool_dir=spool_dir,
                    prepare="process") as store:
        helper = wait_until_used(store)
        before = helper.prepared
        rec = record_all(store, run_id)
        by_helper = helper.prepared - before
        in_process = stored_rows(pg_dsn, other_schema, run_id)
        assert store.verify(run_id).ok
        assert store.get_run(run_id).head_checksum is not None
        loaded = store.load_steps(run_id)
    steps = steps_worth_checking()
    assert len(in_process) == len(steps) and helper.failure is None
    assert in_process == in_thread
    assert by_helper == len(steps)
    assert rec.stats.unencodable == 2  # "huge" and "deep", counted in this process
    by_name = {(s.kind, s.name): s for s in loaded}
    assert "hunter2" not in str(by_name[("tool", "login")].input)
    assert "sk-A1b2" not in str(loaded[12].input)
    # the conversation's turns went in as deltas (the input column holds the stored form)
    assert sum(isinstance(row[5], dict) and row[5].get("__ar__") == "delta"
               for row in in_process) >= 10


def test_a_helper_killed_mid_run_costs_the_run_nothing(
    pg_dsn: str, pg_schema: str, spool_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir, prepare="process") as store:
        helper = wait_until_used(store)
        pid = helper.pid
        assert pid is not None
        with caplog.at_level(logging.WARNING, logger="agentreplay"), \
                store.record(name="helper killed") as rec:
            for i in range(300):
                if i == 100:
                    rec.flush()
                    os.kill(pid, signal.SIGKILL)
                assert rec.record("llm", "chat", {"messages": [{"role": "user",
                                                               "content": f"q{i} " * 200}]},
                                  {"content": f"a{i}"}) == i + 1
        assert helper.failure is not None and helper.pid is None
        assert store.verify(rec.run_id).ok
        assert [s.output["content"] for s in store.load_steps(rec.run_id)] == \
            [f"a{i}" for i in range(300)]
        assert rec.stats.lost == rec.stats.spooled == rec.stats.internal_errors == 0
    warnings = [r.getMessage() for r in caplog.records if "prepare helper" in r.getMessage()]
    assert len(warnings) == 1 and "prepared in this process from now on" in warnings[0]


def fake_python(tmp_path: Path, body: str) -> str:
    """An executable that stands in for the helper's Python (whatever arguments it gets)."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -c '{body}'\n")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("case", ["missing", "frozen", "silent", "ready-then-silent",
                                  "garbage"])
def test_a_helper_that_does_not_work_is_given_up_and_nothing_is_lost(
    pg_dsn: str, pg_schema: str, spool_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    bodies = {
        "silent": "import time; time.sleep(120)",
        # says it is ready, then neither reads nor answers: the writer's sends fill the pipe
        "ready-then-silent": "import sys, time; sys.stdout.buffer.write("
                             "bytes([0, 0, 0, 1]) + bytes([82])); sys.stdout.flush(); "
                             "time.sleep(120)",
        "garbage": "import sys; sys.stdout.buffer.write(bytes([0, 0, 0, 3]) + bytes(3)); "
                   "sys.stdout.flush(); sys.stdin.buffer.read()",
    }
    if case == "frozen":  # sys.executable is the application: it must not be run again
        monkeypatch.setattr(sys, "frozen", True, raising=False)
        monkeypatch.setattr(sys, "executable", fake_python(tmp_path, "import sys; sys.exit(3)"))
    else:
        monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python")
                            if case == "missing" else fake_python(tmp_path, bodies[case]))
    monkeypatch.setattr("agentreplay_core._prepare_client.TIMEOUT_SECONDS", 1.0)
    with caplog.at_level(logging.WARNING, logger="agentreplay"), \
            open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir,
                       prepare="process") as store:
        started = time.monotonic()
        with store.record(name=case) as rec:
            for i in range(200):
                rec.record("tool", "t", {"i": i, "pad": "p" * 3000}, i)
                if i % 50 == 0:
                    time.sleep(0.6)  # the helper's time runs out meanwhile
        elapsed = time.monotonic() - started
        helper = helper_of(store)
        assert helper.failure is not None and helper.pid is None
        if case in ("missing", "frozen"):
            assert helper.failure == "not started"
        assert [s.output for s in store.load_steps(rec.run_id)] == list(range(200))
        assert store.verify(rec.run_id).ok
    assert elapsed < 30
    assert any("prepared in this process" in r.getMessage() for r in caplog.records)


def test_closing_the_store_ends_the_helper(pg_dsn: str, pg_schema: str,
                                           spool_dir: Path) -> None:
    store = open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir, prepare="process")
    pid = wait_until_used(store).pid
    assert pid is not None and process_state(pid) not in (None, "Z")
    store.close()
    assert process_state(pid) is None  # exited and reaped


def process_state(pid: int) -> str | None:
    """The process's state letter (Z: exited, not reaped), or None if there is none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def start_script(path: Path, text: str, *args: str, start_new_session: bool = False
                 ) -> subprocess.Popen[str]:
    """Run `text` as a Python script with `args`; its stdout is a pipe of lines."""
    path.write_text(text)
    return subprocess.Popen([sys.executable, str(path), *args], stdout=subprocess.PIPE,
                            text=True, cwd=os.getcwd(), start_new_session=start_new_session)


CHILD = textwrap.dedent("""
    import sys, time
    from agentreplay_core import open_store
    store = open_store(sys.argv[1], schema=sys.argv[2], spool_dir=sys.argv[3],
                       prepare="process")
    with store.record(name="parent killed") as rec:
        while True:
            rec.record("tool", "t", {"t": time.time()}, None)
            rec.flush()
            helper = store._batched.helper
            if helper.prepared:
                print(helper.pid, flush=True)
                time.sleep(600)
""")


def test_the_helper_exits_when_the_recording_process_is_killed(
    pg_dsn: str, pg_schema: str, spool_dir: Path, tmp_path: Path
) -> None:
    child = start_script(tmp_path / "child.py", CHILD, pg_dsn, pg_schema, str(spool_dir))
    try:
        assert child.stdout is not None
        pid = int(child.stdout.readline())
        assert process_state(pid) not in (None, "Z")
    finally:
        child.kill()
        child.wait(timeout=60)
    deadline = time.monotonic() + 30
    while process_state(pid) not in (None, "Z"):  # orphaned: init may leave it a zombie
        assert time.monotonic() < deadline, "the helper outlived the recording process"
        time.sleep(0.1)


def test_prepare_is_chosen_by_option_or_environment(
    monkeypatch: pytest.MonkeyPatch, spool_dir: Path
) -> None:
    with pytest.raises(ValueError, match="prepare must be one of thread, process"):
        open_store("memory:", prepare="processes")
    monkeypatch.setenv("AGENTREPLAY_PREPARE", "process")
    with open_store("memory:", spool_dir=spool_dir) as store:
        assert store.prepare == "process"
        with store.record(name="memory") as rec:
            assert rec.record("tool", "t", {"q": 1}, 2) == 1
        assert [s.output for s in store.load_steps(rec.run_id)] == [2]
        assert store.verify(rec.run_id).ok
    monkeypatch.setenv("AGENTREPLAY_PREPARE", "bogus")
    with pytest.raises(ValueError, match="not 'bogus'"):
        open_store("memory:")


def bulk_steps(count: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Conversations of 20 turns each, their prompts growing turn by turn (deltas)."""
    steps = []
    for i in range(count):
        turns = [{"role": "user" if t % 2 else "assistant",
                  "content": f"conversation {i // 20} turn {t} " + "words " * 150}
                 for t in range(i % 20 + 1)]
        steps.append(({"messages": turns}, {"content": f"answer {i}"}))
    return steps


def recorded_both_ways(pg_dsn: str, schemas: tuple[str, str], spool_dir: Path,
                       steps: list[tuple[Any, Any]], redacted: bool = False) -> list[Any]:
    """The same bulk run recorded with `prepare="thread"` and with `"process"`, where steps
    queue faster than the helper prepares them and the writer thread prepares some batches
    itself; both verified and storing the same checksums. The steps as loaded."""
    run_id = uuid.uuid4()
    checksums, loaded = {}, {}
    for schema, prepare in zip(schemas, ("thread", "process"), strict=True):
        options: dict[str, Any] = {"redaction": Redactor(key=b"r" * 32)} if redacted else {}
        with open_store(pg_dsn, schema=schema, hmac_key=b"k", spool_dir=spool_dir,
                        prepare=prepare, **options) as store:
            helper = wait_until_used(store) if prepare == "process" else None
            before = helper.prepared if helper is not None else 0
            with store.record(name="bulk", run_id=run_id) as rec:
                for request, response in steps:
                    rec.record("llm", "chat", request, response)
            assert store.verify(run_id).ok
            loaded[prepare] = store.load_steps(run_id)
            checksums[prepare] = [row[-1] for row in stored_rows(pg_dsn, schema, run_id)]
            if helper is not None:
                shared = helper.prepared - before
                assert helper.failure is None
                assert 0 < shared < len(steps), f"the helper prepared {shared} steps"
    assert checksums["process"] == checksums["thread"]
    return loaded["process"]


def test_a_bulk_recording_shares_the_work_and_stores_the_same_run(
    pg_dsn: str, pg_schema: str, other_schema: str, spool_dir: Path
) -> None:
    """Each part of the run is delta-encoded on its own side; every step must still load as
    recorded and carry the checksum the writer thread alone gives it."""
    steps = bulk_steps(4_000)
    loaded = recorded_both_ways(pg_dsn, (pg_schema, other_schema), spool_dir, steps)
    assert [(s.input, s.output) for s in loaded] == steps


def test_batches_the_writer_prepares_itself_are_redacted_as_the_helper_does(
    pg_dsn: str, pg_schema: str, other_schema: str, spool_dir: Path
) -> None:
    """Secrets in the batches the writer thread prepares itself beside its helper are stored
    as the helper and the writer thread alone store them."""
    steps = [({"content": f"question {i} " + "words " * 100},
              {"content": f"answer {i}" + (f" my key is sk-{i:04d}{'Ab3' * 14}" if i % 13 == 0
                                           else "")}) for i in range(4_000)]
    loaded = recorded_both_ways(pg_dsn, (pg_schema, other_schema), spool_dir, steps,
                                redacted=True)
    outputs = [s.output["content"] for s in loaded]
    assert not any("Ab3Ab3" in o for o in outputs)
    assert sum("<secret:" in o for o in outputs) == len(range(0, 4_000, 13))

FORKING = textwrap.dedent("""
    import os, sys, time
    from agentreplay_core import open_store
    store = open_store(sys.argv[1], schema=sys.argv[2], spool_dir=sys.argv[3],
                       prepare="process")
    with store.record(name="forks") as rec:
        while not store._batched.helper.prepared:
            rec.record("tool", "t", {"t": time.time()}, None)
            rec.flush()
    print(store._batched.helper.pid, flush=True)
    if os.fork() == 0:  # a worker that outlives its parent and never records
        os.close(1)
        os.close(2)
        time.sleep(600)
    os._exit(0)  # the parent dies without closing anything
""")


def test_a_forked_child_does_not_keep_the_helper_alive(
    pg_dsn: str, pg_schema: str, spool_dir: Path, tmp_path: Path
) -> None:
    # in a process group of its own: the worker is in it too, and is killed with it below
    parent = start_script(tmp_path / "forks.py", FORKING, pg_dsn, pg_schema, str(spool_dir),
                          start_new_session=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        assert parent.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while process_state(pid) not in (None, "Z"):
            assert time.monotonic() < deadline, "the forked worker kept the helper alive"
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
