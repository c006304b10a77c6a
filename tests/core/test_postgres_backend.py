"""PostgresBackend against a real PostgreSQL (16 + pgvector, or 15 without it)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import _codec, open_store
from agentreplay_core._errors import RunNotFound, StoreError
from agentreplay_core._model import Run, RunStatus
from agentreplay_core.stores import _pgread as postgres_module
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep, RunFinish
from agentreplay_core.stores._pgconn import DatabaseUnavailable, dsn_endpoints, redact_dsn
from agentreplay_core.stores._pgload import STREAM_CHUNK, can_stream_chunks
from agentreplay_core.stores._postgres import PostgresBackend
from tests.support.pgcluster import PgCluster

T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)




def new_run(backend: PostgresBackend, **fields: Any) -> uuid.UUID:
    run = Run(run_id=fields.pop("run_id", uuid.uuid4()), started_at=fields.pop("started_at", T0),
              **fields)  # fmt: skip
    backend.create_run(run)
    return run.run_id


def step(run_id: uuid.UUID, n: int, payload: Any = None, *, name: str = "gpt-test") -> PendingStep:
    data = {"n": n} if payload is None else payload
    return PendingStep(
        run_id=run_id, step=n, kind="llm", name=name, match_key=f"k{n}", path=f"seq:step:{n}",
        input_json=_codec.dumps({"in": data}), output_json=_codec.dumps({"out": data}),
        is_error=n % 2 == 0, started_at=T0 + timedelta(seconds=n), duration_ms=n + 0.125,
        checksum=f"c{n}",
    )  # fmt: skip


def test_round_trip_of_unicode_steps(backend: PostgresBackend) -> None:
    run_id = new_run(backend)
    text = 'héllo ✓ 🚀 日本語 עברית e\u0301 \u2028 "quoted" back\\slash\ttab\nline \U0010ffff'
    payload = {"text": text, "clé 🔑": [text, 1.5, -7, None, True], "nested": {"é": {"ü": []}}}
    backend.append([step(run_id, 1, payload), step(run_id, 2)])

    loaded = backend.load_steps(run_id)

    assert [s.step for s in loaded] == [1, 2]
    first = loaded[0]
    assert first.input == {"in": payload}
    assert first.output == {"out": payload}
    assert (first.run_id, first.kind, first.name, first.match_key, first.path) == (
        run_id, "llm", "gpt-test", "k1", "seq:step:1",
    )  # fmt: skip
    assert (first.is_error, first.duration_ms, first.checksum) == (False, 1.125, "c1")
    assert first.started_at == T0 + timedelta(seconds=1)
    assert loaded[1].is_error is True


def test_one_megabyte_payload_round_trips(backend: PostgresBackend) -> None:
    run_id = new_run(backend)
    payload = {"blob": "ab\u00e9" * 350_000, "items": list(range(20_000))}
    backend.append([step(run_id, 1, payload)])

    (loaded,) = backend.load_steps(run_id)

    assert loaded.input == {"in": payload}
    assert len(loaded.input["in"]["blob"]) == 1_050_000


def test_idempotent_reappend_keeps_the_first_copy(backend: PostgresBackend) -> None:
    run_id = new_run(backend)
    backend.append([step(run_id, 1), step(run_id, 2), step(run_id, 3)])

    backend.append([step(run_id, n, "again") for n in (2, 3, 4, 5)], idempotent=True)
    backend.append([step(run_id, n, "again") for n in (2, 3, 4, 5)], idempotent=True)

    loaded = backend.load_steps(run_id)
    assert [s.step for s in loaded] == [1, 2, 3, 4, 5]
    assert [s.input for s in loaded] == [
        {"in": {"n": 1}}, {"in": {"n": 2}}, {"in": {"n": 3}}, {"in": "again"}, {"in": "again"},
    ]  # fmt: skip


def test_a_duplicate_step_fails_the_whole_batch(
    backend: PostgresBackend, server_has_pgvector: bool
) -> None:
    run_id = new_run(backend)
    backend.append([step(run_id, 1), step(run_id, 2)])
    batch = [step(run_id, 3), step(run_id, 4), step(run_id, 2, "duplicate")]

    with pytest.raises(StoreError) as caught:
        backend.append(batch, [EmbeddingRow(run_id, 3, 0, [9.0, 9.0])])

    message = str(caught.value)
    assert str(run_id) in message and "idempotent=True" in message
    assert [(s.step, s.input) for s in backend.load_steps(run_id)] == [
        (1, {"in": {"n": 1}}), (2, {"in": {"n": 2}}),
    ]  # fmt: skip
    if server_has_pgvector:
        assert backend.search_embeddings([9.0, 9.0]) == []


def test_create_run_keeps_an_existing_row(backend: PostgresBackend) -> None:
    run_id = new_run(backend, name="first", metadata={"model": "m1", "tags": ["a", "ü"]})
    new_run(backend, run_id=run_id, name="second")

    run = backend.get_run(run_id)

    assert (run.name, run.metadata, run.status) == (
        "first", {"model": "m1", "tags": ["a", "ü"]}, RunStatus.RECORDING,
    )  # fmt: skip
    assert run.started_at == T0


def test_finish_and_status_changes(backend: PostgresBackend) -> None:
    run_id = new_run(backend, name="job", parent_run_id=uuid.UUID(int=7), fork_step=3)
    finished = T0 + timedelta(minutes=5)
    backend.finish_run(RunFinish(run_id, RunStatus.COMPLETE, 12, "abc123", finished))

    run = backend.get_run(run_id)
    assert (run.status, run.step_count, run.head_checksum, run.finished_at) == (
        RunStatus.COMPLETE, 12, "abc123", finished,
    )  # fmt: skip
    assert (run.parent_run_id, run.fork_step, run.chain) == (uuid.UUID(int=7), 3, "sha256")

    assert backend.mark_incomplete(run_id) is False  # sealed: stays sealed
    assert backend.get_run(run_id).status is RunStatus.COMPLETE

    missing = uuid.uuid4()
    for call in (
        lambda: backend.get_run(missing),
        lambda: backend.mark_incomplete(missing),
        lambda: backend.finish_run(RunFinish(missing, RunStatus.FAILED, 0, None, finished)),
        lambda: backend.load_steps(missing),
    ):
        with pytest.raises(RunNotFound, match=str(missing)):
            call()


def test_mark_incomplete_changes_only_a_recording_run(backend: PostgresBackend) -> None:
    recording = new_run(backend)
    sealed = {status: new_run(backend, status=status)
              for status in (RunStatus.COMPLETE, RunStatus.FAILED)}  # fmt: skip

    assert backend.mark_incomplete(recording) is True
    assert backend.get_run(recording).status is RunStatus.INCOMPLETE
    assert backend.mark_incomplete(recording) is False  # already incomplete
    for status, run_id in sealed.items():
        assert backend.mark_incomplete(run_id) is False
        assert backend.get_run(run_id).status is status


def test_mark_incomplete_never_overwrites_a_concurrent_seal(
    backend: PostgresBackend, pg_dsn: str, pg_schema: str
) -> None:
    run_id = new_run(backend)
    outcome: list[object] = []
    with psycopg.connect(pg_dsn) as sealer, psycopg.connect(pg_dsn, autocommit=True) as spy:
        # A spool flush sealing the run, not yet committed: its row lock is held.
        sealer.execute(sql.SQL("UPDATE {}.runs SET status = 'complete' WHERE run_id = %s")
                       .format(sql.Identifier(pg_schema)), (run_id,))
        marker = threading.Thread(target=lambda: outcome.append(backend.mark_incomplete(run_id)))
        marker.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the backend's UPDATE waits for the row
            row = spy.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                              "'Lock' AND query LIKE 'UPDATE%%runs%%'").fetchone()
            if row and row[0]:
                break
            time.sleep(0.02)
        sealer.commit()
        marker.join(10)

    assert outcome == [False]
    assert backend.get_run(run_id).status is RunStatus.COMPLETE


def test_list_runs_newest_first_with_filters(backend: PostgresBackend) -> None:
    ids = {}
    for hours, name, status in [
        (1, "alpha", RunStatus.COMPLETE), (4, "beta", RunStatus.FAILED),
        (2, "alpha", RunStatus.FAILED), (3, "alpha", RunStatus.COMPLETE),
    ]:  # fmt: skip
        ids[hours] = new_run(
            backend, name=name, status=status, started_at=T0 + timedelta(hours=hours)
        )

    def listed(**filters: Any) -> list[uuid.UUID]:
        return [run.run_id for run in backend.list_runs(**filters)]

    assert listed() == [ids[4], ids[3], ids[2], ids[1]]
    assert listed(name="alpha") == [ids[3], ids[2], ids[1]]
    assert listed(status=RunStatus.FAILED) == [ids[4], ids[2]]
    assert listed(name="alpha", status=RunStatus.COMPLETE) == [ids[3], ids[1]]
    assert listed(since=T0 + timedelta(hours=2)) == [ids[4], ids[3], ids[2]]
    assert listed(limit=2) == [ids[4], ids[3]]
    assert listed(name="nobody") == []


def test_delete_run_removes_steps_vectors_and_row(
    backend: PostgresBackend, server_has_pgvector: bool
) -> None:
    doomed, kept = new_run(backend), new_run(backend)
    for run_id, vector in ((doomed, [1.0, 0.0]), (kept, [0.0, 1.0])):
        backend.append([step(run_id, 1), step(run_id, 2)], [EmbeddingRow(run_id, 1, 0, vector)])

    backend.delete_run(doomed)

    with pytest.raises(RunNotFound):
        backend.get_run(doomed)
    with pytest.raises(RunNotFound):
        backend.load_steps(doomed)
    assert [s.step for s in backend.load_steps(kept)] == [1, 2]
    if server_has_pgvector:
        assert [m.run_id for m in backend.search_embeddings([1.0, 0.0])] == [kept]
    backend.delete_run(doomed)  # like the other backends: deleting nothing is fine
    assert [r.run_id for r in backend.list_runs()] == [kept]


def test_search_embeddings_orders_by_distance(
    backend: PostgresBackend, server_has_pgvector: bool
) -> None:
    run_a = new_run(backend)
    run_b = new_run(backend)
    backend.append([step(run_a, 1, name="embed-a")], [
        EmbeddingRow(run_a, 1, 0, [3.0, 0.0, 0.0]), EmbeddingRow(run_a, 1, 1, [0.0, 1.0, 0.0]),
        EmbeddingRow(run_a, 1, 2, [5.0, 5.0]),  # other dimension: never compared
        EmbeddingRow(run_a, 1, 3, [float("nan"), 1.0, 1.0]),  # not storable: skipped
    ])  # fmt: skip
    backend.append([step(run_b, 1, name="embed-b")], [EmbeddingRow(run_b, 1, 0, [0.0, 0.0, 2.0])])
    assert len(backend.load_steps(run_a)) == 1  # steps stored whatever happens to vectors

    if not server_has_pgvector:
        assert backend.has_pgvector is False
        with pytest.raises(StoreError, match="pgvector"):
            backend.search_embeddings([0.0, 0.0, 0.0])
        return

    assert backend.has_pgvector is True
    matches = backend.search_embeddings([0.0, 0.0, 0.0], limit=10)
    assert [(m.run_id, m.step, m.position, m.name) for m in matches] == [
        (run_a, 1, 1, "embed-a"), (run_b, 1, 0, "embed-b"), (run_a, 1, 0, "embed-a"),
    ]  # fmt: skip
    assert [m.distance for m in matches] == pytest.approx([1.0, 2.0, 3.0])
    assert [m.position for m in backend.search_embeddings([2.9, 0.0, 0.1], limit=1)] == [0]
    assert [m.position for m in backend.search_embeddings([5.0, 5.0])] == [2]
    assert backend.search_embeddings([1.0]) == []
    with pytest.raises(ValueError, match="finite"):
        backend.search_embeddings([float("inf"), 0.0, 0.0])


def test_run_ids_like_finds_prefixes(backend: PostgresBackend) -> None:
    ids = [uuid.UUID("0a1b2c3d-0000-4000-8000-00000000000" + d) for d in "12"]
    other = uuid.UUID("ffff0000-0000-4000-8000-000000000000")
    for run_id in [*ids, other]:
        new_run(backend, run_id=run_id)

    assert backend.run_ids_like("0a1b2c", 10) == ids
    assert backend.run_ids_like("0A1B2C3D-0000", 1) == ids[:1]
    assert backend.run_ids_like(str(other), 10) == [other]
    assert backend.run_ids_like("0a1b2d", 10) == []
    assert backend.run_ids_like("not-hex", 10) == []


def test_description_and_messages_never_show_the_password(pg_dsn: str, pg_schema: str) -> None:
    # The test server trusts local connections, so the password is sent but not needed.
    dsn = pg_dsn.replace("postgres@", "postgres:s3cr%40t@", 1)
    with PostgresBackend(dsn, schema=pg_schema) as store:
        assert "s3cr" not in store.description
        assert store.description.startswith("postgresql://postgres@/postgres?")
        store.close()
        with pytest.raises(StoreError, match="closed") as caught:
            store.list_runs()
        assert "s3cr" not in str(caught.value)
    assert redact_dsn("host=db.example port=5432 password='a b' user=me") == (
        "host=db.example port=5432 user=me"
    )


def test_wrong_dsn_gives_a_clear_store_error(pg_dsn: str, tmp_path: Any) -> None:
    dsn = f"postgresql://alice:hunter2@/agents?host={tmp_path}&port=6543"
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as caught:
        PostgresBackend(dsn, connect_timeout=2)
    message = str(caught.value)
    assert time.monotonic() - started < 10
    assert isinstance(caught.value, StoreError)
    assert f"host {tmp_path} port 6543" in message and '"agents"' in message
    assert "running" in message and "hunter2" not in message

    wrong_db = pg_dsn.replace("/postgres?", "/no_such_db?", 1)
    with pytest.raises(StoreError, match="no_such_db"):
        PostgresBackend(wrong_db)


def test_store_survives_a_server_restart(private_cluster: PgCluster) -> None:
    store = PostgresBackend(private_cluster.dsn, schema="restart", connect_timeout=3)
    try:
        before = new_run(store)
        private_cluster.stop()

        with pytest.raises(DatabaseUnavailable, match="cannot connect") as caught:
            store.get_run(before)
        assert "Traceback" not in str(caught.value)
        time.sleep(2)  # longer than the call's timeout: no background retry is still due
        private_cluster.start()

        assert store.get_run(before).run_id == before
        after = new_run(store)
        store.append([step(after, 1)])
        assert [s.step for s in store.load_steps(after)] == [1]
    finally:
        store.close()


def test_server_endpoints() -> None:
    assert dsn_endpoints("postgresql://me@/db?host=/var/run/postgresql") == []
    assert dsn_endpoints("host=@abstract dbname=x") == []
    assert dsn_endpoints("host=a,b hostaddr=10.0.0.1,10.0.0.2 port=5433,5434") == [
        ("10.0.0.1", 5433), ("10.0.0.2", 5434),
    ]  # fmt: skip
    found = dsn_endpoints("postgresql://me:pw@localhost:6000/db")
    assert ("localhost", 6000) in found and ("127.0.0.1", 6000) in found


def test_server_endpoints_of_a_socket_store(backend: PostgresBackend) -> None:
    assert backend.server_endpoints() == []


# -- rows changed behind agentreplay's back ----------------------------------------------------


def _tamper(dsn: str, schema: str, statement: str, *params: object) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(s=sql.Identifier(schema)), params)


def test_a_tampered_step_loads_as_stored_and_fails_verification(
    pg_dsn: str, pg_schema: str
) -> None:
    with open_store(pg_dsn, schema=pg_schema) as store:
        with store.record(name="victim") as rec:
            for i in range(3):
                rec.record("tool", "lookup", {"i": i}, i)
        _tamper(pg_dsn, pg_schema, "UPDATE {s}.run_log SET kind = 'LLM' WHERE run_id = %s "
                "AND step = 2", rec.run_id)

        assert [s.kind for s in store.backend.load_steps(rec.run_id)] == ["tool", "LLM", "tool"]
        report = store.verify(rec.run_id)
        assert [(p.step, p.code) for p in report.problems] == [(2, "checksum_mismatch")]

    cli = subprocess.run(
        [sys.executable, "-m", "agentreplay_core", "verify", "--all", "--dsn", pg_dsn,
         "--schema", pg_schema], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 1, cli.stderr
    assert f"run {rec.run_id} step 2" in cli.stdout and "checksum_mismatch" in cli.stdout
    assert "Traceback" not in cli.stderr


UNDECODABLE_STEPS = {
    # JSON PostgreSQL accepts but no float (or nesting limit) can hold
    "output": "UPDATE {s}.run_log SET output = '{{\"n\": 1e400}}' WHERE run_id = %s AND step = 2",
    "input": "UPDATE {s}.run_log SET input = (repeat('[', 1100) || repeat(']', 1100))::jsonb "
             "WHERE run_id = %s AND step = 2",
    # a timestamp Python's datetime cannot hold
    "started_at": "UPDATE {s}.run_log SET started_at = 'infinity' WHERE run_id = %s AND step = 2",
}


@pytest.mark.parametrize("column", sorted(UNDECODABLE_STEPS))
@pytest.mark.parametrize("bad", [2, 3 * STREAM_CHUNK + 2], ids=["first-chunk", "later-chunk"])
def test_an_undecodable_step_is_a_store_error_naming_it(
    backend: PostgresBackend, pg_dsn: str, pg_schema: str, column: str, bad: int
) -> None:
    run_id = new_run(backend)
    count = bad + STREAM_CHUNK  # the bad row arrives with rows after it still to come
    backend.append([step(run_id, n) for n in range(1, count + 1)])
    _tamper(pg_dsn, pg_schema, UNDECODABLE_STEPS[column].replace("step = 2", f"step = {bad}"),
            run_id)
    other = new_run(backend)
    backend.append([step(other, n) for n in (1, 2)])

    with pytest.raises(StoreError) as caught:
        backend.load_steps(run_id)

    message = str(caught.value)
    assert f"step {bad} of run {run_id} cannot be read" in message
    assert column in message or "infinity" in message
    assert "changed outside" in message
    # the stream cut short left the pooled connections fit for the next read
    assert [s.step for s in backend.load_steps(other)] == [1, 2]


def test_a_long_run_streams_in_step_order_with_its_deltas_resolved(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows parsed chunk by chunk as they arrive give what reading the whole result gives: a
    conversation whose inputs are stored as deltas on earlier steps, across chunk borders,
    interleaved with another run's rows."""
    assert can_stream_chunks(), "the driver here streams in chunks, or this tests nothing"
    messages: list[dict[str, str]] = []
    sent = []
    with open_store(pg_dsn, schema=pg_schema) as store:
        with store.record(name="chat") as rec, store.record(name="noise") as noise:
            for turn in range(3 * STREAM_CHUNK + 7):
                messages.append({"role": "user", "content": f"question {turn} " * 20})
                sent.append({"messages": list(messages)})
                rec.record("llm", "chat", sent[-1], {"content": f"answer {turn}"})
                noise.record("tool", "t", {"turn": turn}, turn)
                messages.append({"role": "assistant", "content": f"answer {turn}"})
        streamed = store.load_steps(rec.run_id)
        monkeypatch.setattr(postgres_module, "can_stream_chunks", lambda: False)
        whole = store.load_steps(rec.run_id)

    assert [s.input for s in streamed] == sent
    assert [s.step for s in streamed] == list(range(1, len(sent) + 1))
    assert streamed == whole


@pytest.mark.parametrize(("stored", "loaded"), [
    ("[1, 2]", {"invalid_metadata": [1, 2]}),
    ('"just text"', {"invalid_metadata": "just text"}),
    ("null", {"invalid_metadata": None}),
    ('{"big": 1e400}', {"invalid_metadata": '{"big": 1' + "0" * 400 + "}"}),
    ('{"pid": "not a pid", "host": 7}', {"pid": "not a pid", "host": 7}),
])  # fmt: skip
def test_odd_run_metadata_still_loads(
    backend: PostgresBackend, pg_dsn: str, pg_schema: str, stored: str, loaded: object
) -> None:
    run_id = new_run(backend, metadata={"model": "m"})
    _tamper(pg_dsn, pg_schema, "UPDATE {s}.runs SET metadata = %s::jsonb WHERE run_id = %s",
            stored, run_id)

    assert backend.get_run(run_id).metadata == loaded
    assert [r.metadata for r in backend.list_runs()] == [loaded]


@pytest.mark.parametrize("tamper", [
    "UPDATE {s}.runs SET status = 'bogus' WHERE run_id = %s",  # with the CHECK dropped
    "UPDATE {s}.runs SET started_at = '-infinity' WHERE run_id = %s",
])  # fmt: skip
def test_an_unreadable_run_row_is_a_store_error_naming_it(
    backend: PostgresBackend, pg_dsn: str, pg_schema: str, tamper: str
) -> None:
    new_run(backend, started_at=T0 + timedelta(days=1))
    run_id = new_run(backend)
    _tamper(pg_dsn, pg_schema, "ALTER TABLE {s}.runs DROP CONSTRAINT runs_status_check")
    _tamper(pg_dsn, pg_schema, tamper, run_id)

    for read in (lambda: backend.get_run(run_id), backend.list_runs):
        with pytest.raises(StoreError, match=f"run {run_id} cannot be read"):
            read()
