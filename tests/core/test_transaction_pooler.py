"""A store behind PgBouncer in transaction mode (`pooler="transaction"`).

Such a pooler lends a server session to a client for one transaction, then to another client:
a statement prepared on one session is missing on the next (psycopg prepares a statement run
five times; the pipelined group prepares its INSERT), and session settings land on a session
other clients borrow. The real PgBouncer runs in front of the tests' server with two server
sessions; a plain client holding one of them in a transaction moves the store onto the other,
as a busy pool does.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import Store, StoreError, open_store, session_from_env
from agentreplay_core.stores._pgconn import DatabaseTimeout
from agentreplay_core.stores._postgres import PostgresBackend
from tests.core.test_pg_timeouts import locked, step
from tests.support.pgbouncer import PgBouncer

#: steps of a run recorded at once: one statement, one pipelined group, COPY batches
SIZES = (3, 100, 2_500)


@pytest.fixture(scope="module")
def bouncer(pg_dsn: str) -> Iterator[PgBouncer]:
    with PgBouncer(pg_dsn, pool_size=2) as pooler:
        yield pooler


@pytest.fixture
def own_bouncer(pg_dsn: str) -> Iterator[PgBouncer]:
    """A pooler of the test's own: server sessions no test before it has touched."""
    with PgBouncer(pg_dsn, pool_size=2) as pooler:
        yield pooler


def _held(bouncer: PgBouncer, stack: ExitStack) -> psycopg.Connection[Any]:
    """A plain client of the pooler in a transaction: it holds one server session until the
    stack closes (PgBouncer lends the session used last first, so the store's)."""
    conn = stack.enter_context(psycopg.connect(bouncer.dsn))
    conn.execute("SELECT 1")
    return conn


def _record(store: Store, name: str, steps: int, **options: Any) -> Any:
    with store.record(name=name, **options) as rec:
        for n in range(steps):
            rec.record("llm", "chat_model", {"prompt": f"{name} {n}"}, {"text": f"answer {n}"})
    return rec.run_id


def _stored_whole(store: Store, run_id: Any, name: str, steps: int) -> None:
    assert store.verify(run_id).ok
    loaded = store.load_steps(run_id)
    assert [(s.step, s.input, s.output) for s in loaded] == [
        (n + 1, {"prompt": f"{name} {n}"}, {"text": f"answer {n}"}) for n in range(steps)]


def test_threads_of_two_stores_record_whole_runs_through_the_pooler(
        bouncer: PgBouncer, pg_schema: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Four agent threads on two stores share two server sessions: every kind of write
    (one statement, a pipelined group, COPY batches, `sync`, vectors) lands whole, nothing
    falls back or spools, and times read back are in UTC."""
    caplog.set_level(logging.DEBUG, logger="agentreplay")
    stores = [open_store(bouncer.dsn, schema=pg_schema, pooler="transaction",
                         spool_dir=tmp_path / f"spool{n}") for n in range(2)]
    recorded: list[tuple[Store, Any, str, int]] = []
    failures: list[BaseException] = []

    def agent(worker: int) -> None:
        store = stores[worker % 2]
        try:
            for n in range(6):
                name, size = f"w{worker}-{n}", SIZES[n % len(SIZES)]
                durability = "sync" if n == 4 else "batched"
                recorded.append((store, _record(store, name, size, durability=durability),
                                 name, size))
            with store.record(name=f"w{worker}-vectors") as rec:
                rec.record("embedding", "embed", {"texts": ["a", "b"]},
                           [[0.25 * worker, 1.0, -2.5], [1e-300, 0.5, 3.0]])
            with store.replay(rec.run_id) as player:
                assert player.next("embedding", "embed", {"texts": ["a", "b"]}) == \
                    [[0.25 * worker, 1.0, -2.5], [1e-300, 0.5, 3.0]]
        except BaseException as exc:  # reported by the test's thread
            failures.append(exc)

    try:
        threads = [threading.Thread(target=agent, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert len(recorded) == 24
        for store, run_id, name, size in recorded:
            _stored_whole(store, run_id, name, size)
            assert store.get_run(run_id).started_at.utcoffset() == timedelta(0)
    finally:
        for store in stores:
            store.close()
    quiet = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()
             or "spool" in r.getMessage()]
    assert quiet == []


@pytest.mark.parametrize("pooler", [None, "transaction"])
def test_a_statement_psycopg_prepared_is_missing_on_the_next_server_session(
        bouncer: PgBouncer, pg_schema: str, pooler: str | None) -> None:
    """Without `pooler="transaction"` the store fails on the session it was moved to, with a
    message that names the remedy; with it, nothing is prepared and every read works."""
    with open_store(bouncer.dsn, schema=pg_schema, pooler=pooler, max_size=1) as store, \
            ExitStack() as stack:
        run_id = _record(store, "prepared", 3)
        for _ in range(8):  # psycopg prepares a statement run five times
            store.get_run(run_id)
        _held(bouncer, stack)
        if pooler is None:
            with pytest.raises(StoreError, match=r"does not exist.*pooler='transaction'"):
                store.get_run(run_id)
        else:
            for _ in range(8):
                assert store.get_run(run_id).step_count == 3
            _stored_whole(store, run_id, "prepared", 3)


@pytest.mark.parametrize("pooler", [None, "transaction"])
def test_a_pipelined_group_on_another_server_session_needs_no_prepared_insert(
        bouncer: PgBouncer, pg_schema: str, pooler: str | None,
        caplog: pytest.LogCaptureFixture) -> None:
    """A burst run's group prepares its INSERT once a connection; behind the pooler the next
    group may run on a session without it. Unpooled, the group fails there and the sink's
    fallback writes it row by row (stored all the same, slower); pooled, it goes unprepared
    and first time."""
    caplog.set_level(logging.DEBUG, logger="agentreplay")
    with open_store(bouncer.dsn, schema=pg_schema, pooler=pooler, max_size=1) as store, \
            ExitStack() as stack:
        first = _record(store, "burst-1", 100)
        _held(bouncer, stack)
        second = _record(store, "burst-2", 100)
        stack.close()
        _stored_whole(store, first, "burst-1", 100)
        _stored_whole(store, second, "burst-2", 100)
    fell_back = [r for r in caplog.records if "in one transaction failed" in r.getMessage()]
    if pooler is None:
        assert fell_back and "does not exist" in fell_back[0].getMessage()
    else:
        assert fell_back == []


@pytest.mark.parametrize("pooler", [None, "transaction"])
def test_the_store_leaves_no_timeout_on_server_sessions_others_borrow(
        own_bouncer: PgBouncer, pg_schema: str, pooler: str | None) -> None:
    """The write and lock timeouts are session settings of a direct connection; behind the
    pooler they would bind other clients' statements on the session they land on (and stay
    there after the store has gone)."""
    bouncer = own_bouncer
    with open_store(bouncer.dsn, schema=pg_schema, pooler=pooler,
                    write_statement_timeout=7, lock_timeout=3) as store:
        _record(store, "settings", 3)
        with ExitStack() as stack:
            seen = {_held(bouncer, stack).execute(
                "SELECT current_setting('statement_timeout') || ' ' || "
                "current_setting('lock_timeout')").fetchone() for _ in range(2)}
    if pooler is None:
        assert ("7s 3s",) in seen
    else:
        assert seen == {("0 0",)}


def test_the_role_s_lock_timeout_bounds_a_write_behind_the_pooler(
        pg_dsn: str, pg_schema: str) -> None:
    """What the README advises in place of the session timeouts: the role's own. A write
    behind another session's table lock fails within it, and the error names the role's
    setting, not the store's option that has no effect here."""
    role = f"pooled_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {r} LOGIN; GRANT CREATE ON DATABASE {d} TO {r}; "
                              "ALTER ROLE {r} SET lock_timeout = '400ms'").format(
            r=sql.Identifier(role), d=sql.Identifier(admin.info.dbname)))
    try:
        with PgBouncer(pg_dsn, user=role) as pooler, \
                open_store(pooler.dsn, schema=pg_schema, pooler="transaction") as store:
            run_id = _record(store, "locked", 3)
            backend = store.backend
            assert isinstance(backend, PostgresBackend)
            with locked(pg_dsn, pg_schema, "runs", "run_log"):
                started = time.monotonic()
                with pytest.raises(DatabaseTimeout) as caught:
                    backend.append([step(run_id, 4)])
                waited = time.monotonic() - started
            assert 0.3 < waited < 3.0
            assert "the role's lock_timeout" in str(caught.value)
            assert "ALTER ROLE" in str(caught.value) and "lock_timeout=" not in str(caught.value)
            backend.append([step(run_id, 4)])  # the lock gone, the same write lands
            assert [s.step for s in store.load_steps(run_id)] == [1, 2, 3, 4]
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(
                r=sql.Identifier(role)))


def test_pooler_option_names_the_modes(bouncer: PgBouncer, pg_schema: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="statement mode refuses transactions"):
        open_store(bouncer.dsn, schema=pg_schema, pooler="statement")
    with pytest.raises(ValueError, match="pooler must be None, 'session' or 'transaction'"):
        open_store(bouncer.dsn, schema=pg_schema, pooler="transactions")
    for variable, options, pooled in (("transaction", {}, True),
                                      ("transaction", {"pooler": "session"}, False),
                                      ("", {}, False)):  # set but empty: as unset
        monkeypatch.setenv("AGENTREPLAY_POOLER", variable)
        with open_store(bouncer.dsn, schema=pg_schema, **options) as store:
            backend = store.backend
            assert isinstance(backend, PostgresBackend)
            assert backend.limits.pooled is pooled


def test_an_environment_session_reads_the_pooler_from_its_mapping(
        bouncer: PgBouncer, pg_schema: str) -> None:
    """`AGENTREPLAY_MODE=record` programs: the pooler comes from the mapping, as the DSN and
    schema do, and the run lands through PgBouncer."""
    session = session_from_env({"AGENTREPLAY_MODE": "record", "AGENTREPLAY_DSN": bouncer.dsn,
                                "AGENTREPLAY_SCHEMA": pg_schema,
                                "AGENTREPLAY_POOLER": "transaction"})
    assert session is not None and session.store is not None
    backend = session.store.backend
    assert isinstance(backend, PostgresBackend) and backend.limits.pooled
    with session:
        for n in range(100):
            session.call("tool", "t", {"n": n}, lambda n=n: n * n)
    assert session.run_id is not None
    with open_store(bouncer.dsn, schema=pg_schema, pooler="transaction") as store:
        assert store.verify(session.run_id).ok
        assert [s.output for s in store.load_steps(session.run_id)] == [
            n * n for n in range(100)]


def test_the_cli_reads_through_the_pooler(bouncer: PgBouncer, pg_schema: str) -> None:
    """`AGENTREPLAY_POOLER` reaches the CLI's store: `runs`, `verify` and `db status` in a
    new process."""
    with open_store(bouncer.dsn, schema=pg_schema, pooler="transaction") as store:
        run_id = _record(store, "cli", 100)
    env = {**os.environ, "AGENTREPLAY_DSN": bouncer.dsn, "AGENTREPLAY_SCHEMA": pg_schema,
           "AGENTREPLAY_POOLER": "transaction"}
    for args, shows in ((["verify", str(run_id)], str(run_id)[:8]),
                        (["runs"], str(run_id)[:8]), (["db", "status"], "0001")):
        done = subprocess.run([sys.executable, "-m", "agentreplay_core", *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert shows in done.stdout
