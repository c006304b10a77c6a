"""Statement and lock timeouts and TCP keepalives of the PostgreSQL backend.

A write stuck behind another session's lock must fail (so the recorder retries and spools)
instead of blocking the agent; long reads must not be cut off by the write timeout.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq, sql

from agentreplay_core import _codec, open_store
from agentreplay_core._errors import StoreError
from agentreplay_core._model import Run, RunStatus
from agentreplay_core.stores._backend import PendingStep, RunFinish
from agentreplay_core.stores._pgconn import DatabaseTimeout, connect, connection_options
from agentreplay_core.stores._pgwrite import SMALL_BATCH
from agentreplay_core.stores._postgres import PostgresBackend

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
#: a locker that the code under test never gets past is ended by the server after this long,
#: so a broken timeout fails the test instead of hanging it
HOLD_AT_MOST = "8s"


def step(run_id: uuid.UUID, n: int) -> PendingStep:
    return PendingStep(
        run_id=run_id, step=n, kind="llm", name="m", match_key=f"k{n}", path="",
        input_json=_codec.dumps({"n": n}), output_json=_codec.dumps({"out": n}),
        is_error=False, started_at=T0, duration_ms=1.0, checksum=f"c{n}",
    )  # fmt: skip


def new_run(backend: PostgresBackend) -> uuid.UUID:
    run_id = uuid.uuid4()
    backend.create_run(Run(run_id=run_id, started_at=T0))
    return run_id


@contextmanager
def locked(dsn: str, schema: str, *tables: str, hold: str = HOLD_AT_MOST) -> Iterator[None]:
    """Another session holding ACCESS EXCLUSIVE locks on `tables` until the block ends, or
    until the server ends that session after `hold`."""
    conn = psycopg.connect(dsn)  # not autocommit: the lock lasts until the transaction ends
    try:
        conn.execute(sql.SQL("SET idle_in_transaction_session_timeout = {}").format(
            sql.Literal(hold)))
        for table in tables:
            conn.execute(sql.SQL("LOCK TABLE {}.{} IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(schema), sql.Identifier(table)))
        yield
    finally:
        with suppress(psycopg.Error):  # the server may have ended the session (after `hold`)
            conn.rollback()
        conn.close()


WRITES: dict[str, Callable[[PostgresBackend, uuid.UUID], object]] = {
    "append one step (INSERT)": lambda b, run: b.append([step(run, 1)]),
    "append a batch (COPY)": lambda b, run: b.append(
        [step(run, n) for n in range(1, SMALL_BATCH + 5)]),
    "append idempotently": lambda b, run: b.append([step(run, 1)], idempotent=True),
    "create run": lambda b, run: b.create_run(Run(run_id=uuid.uuid4(), started_at=T0)),
    "finish run": lambda b, run: b.finish_run(RunFinish(run, RunStatus.COMPLETE, 0, None, T0)),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_behind_a_table_lock_fails_within_lock_timeout(
    pg_dsn: str, pg_schema: str, write: str
) -> None:
    with PostgresBackend(pg_dsn, schema=pg_schema, lock_timeout=0.5) as backend:
        run_id = new_run(backend)
        with locked(pg_dsn, pg_schema, "runs", "run_log"):
            started = time.monotonic()
            with pytest.raises(DatabaseTimeout) as caught:
                WRITES[write](backend, run_id)
            waited = time.monotonic() - started

        assert 0.4 < waited < 3.0
        message = str(caught.value)
        assert isinstance(caught.value, StoreError)
        assert "lock_timeout=0.5s" in message and "LOCK TABLE" in message
        assert message.startswith("cannot ") and backend.description in message
        # The connection is fine afterwards, and the failed write left nothing behind.
        backend.append([step(run_id, 1)])
        assert [s.step for s in backend.load_steps(run_id)] == [1]


def test_a_write_that_runs_too_long_is_cancelled(pg_dsn: str, pg_schema: str) -> None:
    with PostgresBackend(pg_dsn, schema=pg_schema, write_statement_timeout=0.3) as backend:
        run_id = new_run(backend)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:  # a stalled server, simulated
            admin.execute(sql.SQL(
                "CREATE FUNCTION {s}.stall() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN PERFORM pg_sleep(5); RETURN NEW; END $$; "
                "CREATE TRIGGER stall BEFORE INSERT ON {s}.run_log "
                "FOR EACH ROW EXECUTE FUNCTION {s}.stall()").format(s=sql.Identifier(pg_schema)))
        started = time.monotonic()
        with pytest.raises(DatabaseTimeout, match=r"write_statement_timeout=0\.3s") as caught:
            backend.append([step(run_id, 1)])
        assert time.monotonic() - started < 3.0
        assert str(run_id) in str(caught.value)


def test_long_reads_are_not_cut_off_by_the_write_timeout(pg_dsn: str, pg_schema: str) -> None:
    with PostgresBackend(pg_dsn, schema=pg_schema) as filler:
        run_id, other = new_run(filler), new_run(filler)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # ~8 MB, ~30 ms to read back
        admin.execute(sql.SQL(
            "INSERT INTO {}.run_log SELECT %s, g, 'llm', 'm', 'k', '', "
            "jsonb_build_object('text', repeat('x', 1500) || g), "
            "jsonb_build_object('out', repeat('y', 500)), false, %s, 1.0, 'c' "
            "FROM generate_series(1, 4000) AS g").format(sql.Identifier(pg_schema)),
            (run_id, T0))

    # 5 ms: far below what reading the run takes, far above a trivial statement.
    with PostgresBackend(pg_dsn, schema=pg_schema, write_statement_timeout=0.005) as tiny:
        # The timeout is in force: a write of the same size is cancelled ...
        big = [step(other, n) for n in range(1, 4001)]
        for s in big:
            s.input_json = _codec.dumps({"text": "x" * 1500 + str(s.step)})
        with pytest.raises(DatabaseTimeout, match=r"write_statement_timeout=0\.005s"):
            tiny.append(big)
        # ... while reading it back is not.
        steps = tiny.load_steps(run_id)
        assert len(steps) == 4000 and steps[-1].input == {"text": "x" * 1500 + "4000"}
        assert {r.run_id for r in tiny.list_runs()} == {run_id, other}
        tiny.delete_run(run_id)
        assert [r.run_id for r in tiny.list_runs()] == [other]


LONG_READS: dict[str, Callable[[PostgresBackend, uuid.UUID], object]] = {
    "load_steps": lambda b, run: b.load_steps(run),
    "list_runs": lambda b, run: b.list_runs(),
    "delete_run": lambda b, run: b.delete_run(run),
}


@pytest.mark.parametrize("read", sorted(LONG_READS))
def test_long_reads_may_outlast_the_write_timeout(pg_dsn: str, pg_schema: str, read: str) -> None:
    # A read that waits 1 s for a lock (the locker gives up by itself) stands for a slow one.
    with PostgresBackend(pg_dsn, schema=pg_schema, write_statement_timeout=0.2,
                         lock_timeout=0) as backend:  # fmt: skip
        run_id = new_run(backend)
        backend.append([step(run_id, 1)])
        with locked(pg_dsn, pg_schema, "runs", "run_log", hold="1s"):
            started = time.monotonic()
            LONG_READS[read](backend, run_id)
            assert time.monotonic() - started > 0.5  # it did wait for the lock


def test_every_connection_gets_the_limits_and_keepalives(pg_dsn: str, pg_schema: str) -> None:
    with PostgresBackend(pg_dsn, schema=pg_schema, min_size=1, max_size=1) as backend, \
            backend._pool.connection() as conn:  # fmt: skip
        shown = [conn.execute(f"SHOW {name}").fetchone() for name in
                 ("statement_timeout", "lock_timeout", "TimeZone")]
        assert shown == [("10s",), ("5s",), ("UTC",)]
        assert _libpq_options(conn)["keepalives_idle"] == "10"
    with connect(pg_dsn) as direct:
        options = _libpq_options(direct)
    assert [options[k] for k in ("keepalives", "keepalives_idle", "keepalives_interval",
                                 "keepalives_count")] == ["1", "10", "5", "3"]  # fmt: skip
    # Settings the DSN makes itself win (keyword arguments would override them).
    for dsn in ("host=x keepalives_idle=60", "postgresql://u@h/d?keepalives_idle=60"):
        kept = connection_options(dsn, 10)
        assert "keepalives_idle" not in kept and kept["keepalives_interval"] == 5


def _libpq_options(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf")])
def test_timeouts_must_be_sensible(pg_dsn: str, bad: float) -> None:
    with pytest.raises(ValueError, match="lock_timeout must be a number of seconds"):
        PostgresBackend(pg_dsn, lock_timeout=bad)


def test_a_sync_write_is_one_round_trip(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    """The timeouts are session settings: no extra statement per write."""
    with PostgresBackend(pg_dsn, schema=pg_schema, min_size=1, max_size=1) as backend:
        run_id = new_run(backend)
        # Warm: psycopg prepares a statement on its 5th use (one extra round trip, once), and
        # the one connection was just used, so no liveness check is due.
        for n in range(1, 7):
            backend.append([step(run_id, n)])
        trace = tmp_path / "libpq.trace"
        with trace.open("w") as sink:
            with backend._pool.connection() as conn:
                conn.pgconn.trace(sink.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            for n in range(7, 12):
                backend.append([step(run_id, n)])
            with backend._pool.connection() as conn:
                conn.pgconn.untrace()
        sent = [line.split("\t") for line in trace.read_text().splitlines()]
        # Each Sync (extended protocol) or Query (simple protocol) waits for one reply.
        round_trips = [f for f in sent if f[0] == "F" and f[2].startswith(("Sync", "Query"))]
        inserts = [f for f in sent if f[0] == "F" and f[2].startswith("Execute")]
        assert len(round_trips) == 5 + 1  # five appends, and the final check_connection
        assert len(inserts) == 5


def test_a_locked_table_spools_instead_of_hanging_the_agent(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    store = open_store(pg_dsn, schema=pg_schema, spool_dir=spool, lock_timeout=0.3)
    store._sink.retry_seconds = 0.5
    store._sink.cooldown_seconds = 0.0
    with store.record(name="blocked", durability="sync") as rec:
        rec.record("tool", "t", {"i": 0}, "before")
        with locked(pg_dsn, pg_schema, "run_log"):
            started = time.monotonic()
            for i in range(1, 6):
                rec.record("tool", "t", {"i": i}, "during")
            agent_time = time.monotonic() - started
    store.close()  # the lock is gone: the spool loads
    assert agent_time < 4.0
    assert rec.stats.spooled == 5 and rec.stats.lost == 0
    with open_store(pg_dsn, schema=pg_schema) as check:
        assert [s.output for s in check.load_steps(rec.run_id)] == ["before"] + ["during"] * 5
        assert check.verify(rec.run_id).ok
