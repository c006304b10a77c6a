"""A batch of large steps is written in several statements, each within
`write_statement_timeout`, and stays all or nothing.

Ten steps of 120 MB each (each allowed by `max_value_bytes`) went as one COPY that the server
cancelled on every retry and on every load of the spool: they were never stored. Here the
statement limit is made small and a trigger makes the server take a known time per row, so
that the whole batch in one statement would outlive the timeout where each slice does not.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import _codec
from agentreplay_core._model import Run, RunStatus
from agentreplay_core.stores import _pgwrite
from agentreplay_core.stores._backend import PendingStep, RunFinish
from agentreplay_core.stores._pgconn import DatabaseTimeout
from agentreplay_core.stores._postgres import PostgresBackend

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
#: the server's time per stored row, and the statement timeout: 3 rows a statement fit,
#: 20 rows in one do not
ROW_SECONDS = 0.1
TIMEOUT = 1.0
ROWS = 20
TEXT = 600  # bytes of input text a row: two rows reach the statement limit set below


def _step(run_id: uuid.UUID, n: int) -> PendingStep:
    return PendingStep(
        run_id=run_id, step=n, kind="tool", name="t", match_key=f"k{n}", path="",
        input_json=_codec.dumps({"text": f"{n}:" + "x" * TEXT}),
        output_json=_codec.dumps({"out": n}), is_error=False, started_at=T0,
        duration_ms=1.0, checksum=f"c{n}",
    )  # fmt: skip


@pytest.fixture
def slow_rows(pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_pgwrite, "STATEMENT_BYTES", 1000)
    with PostgresBackend(pg_dsn, schema=pg_schema):
        pass  # the schema, migrated
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL(
            "CREATE FUNCTION {s}.slow() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep({t}); RETURN NEW; END $$; "
            "CREATE TRIGGER slow BEFORE INSERT ON {s}.run_log "
            "FOR EACH ROW EXECUTE FUNCTION {s}.slow()").format(
                s=sql.Identifier(pg_schema), t=sql.Literal(ROW_SECONDS)))
    yield


def _backend(pg_dsn: str, pg_schema: str) -> PostgresBackend:
    return PostgresBackend(pg_dsn, schema=pg_schema, write_statement_timeout=TIMEOUT)


def _append(backend: PostgresBackend, steps: list[PendingStep]) -> None:
    backend.append(steps)


def _append_again(backend: PostgresBackend, steps: list[PendingStep]) -> None:
    # a spool loaded after part of it was stored: those rows are skipped, in any slice
    backend.append([steps[0], steps[7]])
    backend.append(steps, idempotent=True)


def _group_sealed(backend: PostgresBackend, steps: list[PendingStep]) -> None:
    finish = RunFinish(steps[0].run_id, RunStatus.COMPLETE, len(steps), None, T0)
    backend.write_group(None, steps, [], finish)


WRITES: dict[str, Callable[[PostgresBackend, list[PendingStep]], None]] = {
    "append (COPY)": _append,
    "append idempotently (staged)": _append_again,
    "a group with its seal": _group_sealed,
}


@pytest.mark.usefixtures("slow_rows")
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_batch_larger_than_one_statement_is_stored_whole(
    pg_dsn: str, pg_schema: str, write: str
) -> None:
    with _backend(pg_dsn, pg_schema) as backend:
        run_id = uuid.uuid4()
        backend.create_run(Run(run_id=run_id, started_at=T0))
        steps = [_step(run_id, n) for n in range(1, ROWS + 1)]
        WRITES[write](backend, steps)
        stored = backend.load_steps(run_id)
    assert [s.step for s in stored] == list(range(1, ROWS + 1))
    assert [s.input for s in stored] == [_codec.loads(s.input_json) for s in steps]


@pytest.mark.usefixtures("slow_rows")
def test_a_handful_of_large_steps_is_not_one_insert(pg_dsn: str, pg_schema: str) -> None:
    """Few enough steps for one multi-row INSERT, too large for one statement."""
    with _backend(pg_dsn, pg_schema) as backend:
        run_id = uuid.uuid4()
        backend.create_run(Run(run_id=run_id, started_at=T0))
        few = [_step(run_id, n) for n in range(1, _pgwrite.SMALL_BATCH + 1)]
        for s in few:  # eight rows in one statement outlive the timeout
            s.input_json = _codec.dumps({"text": f"{s.step}:" + "y" * 400})
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE OR REPLACE FUNCTION {s}.slow() RETURNS trigger "
                                  "LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.15); "
                                  "RETURN NEW; END $$").format(s=sql.Identifier(pg_schema)))
        backend.append(few)
        assert [s.step for s in backend.load_steps(run_id)] == list(range(1, len(few) + 1))


@pytest.mark.usefixtures("slow_rows")
def test_a_batch_stays_all_or_nothing_across_its_statements(
    pg_dsn: str, pg_schema: str
) -> None:
    with _backend(pg_dsn, pg_schema) as backend:
        run_id = uuid.uuid4()
        backend.create_run(Run(run_id=run_id, started_at=T0))
        steps = [_step(run_id, n) for n in range(1, ROWS + 1)]
        with psycopg.connect(pg_dsn, autocommit=True) as admin:  # the last slice's row stalls
            admin.execute(sql.SQL(
                "CREATE OR REPLACE FUNCTION {s}.slow() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN PERFORM pg_sleep(CASE WHEN NEW.step = {last} THEN 5 ELSE 0 END); "
                "RETURN NEW; END $$").format(s=sql.Identifier(pg_schema),
                                              last=sql.Literal(ROWS)))
        with pytest.raises(DatabaseTimeout):
            backend.append(steps)
        assert backend.load_steps(run_id) == []
