"""Hostile names against the PostgreSQL store (issue 8).

Every identifier reaches PostgreSQL through `psycopg.sql.Identifier` and every value as a
parameter (checked over the source below). Schema names are validated before anything
connects: hostile ones are refused with one clear error, odd but valid ones (keywords, mixed
case, the longest allowed) work; run names, tags, metadata, step names and values full of
quotes, SQL, placeholders and NUL are stored and read back exactly (NUL in a name, tag or
metadata key made visible as `\\x00`, as for step names), and the database is intact after.
"""

from __future__ import annotations

import ast
import random
import string
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import agentreplay_core
from agentreplay_core import Run, Store, StoreError, decode, open_store
from agentreplay_core.stores._migrate import migrate
from agentreplay_core.stores._postgres import PostgresBackend
from agentreplay_core.stores._sql import InvalidSchemaName, check_schema_name
from tests.core.test_cli_runs import agentreplay, one_line_error

PACKAGE = Path(agentreplay_core.__file__).parent

HOSTILE_SCHEMAS = [
    'x"; DROP TABLE runs; --', "x'; DROP SCHEMA public CASCADE; --", 'a"b', "a b", "",
    "sch\u00e9ma", "\U0001f600", "x" * 64, "agentreplay\n", "1abc", "a-b", "a.b", "a;b",
    "pg_catalog", "pg_temp", "agentreplay\x00", " agentreplay", "$1",
]
HOSTILE_TEXT = [
    "'); DROP TABLE runs; --", '"; DROP SCHEMA public CASCADE; --', "$$; DROP TABLE run_log; $$",
    "%s %(name)s {} {0} %%", "\\x00 \\ \\\\ '' \"\"", "\u202e\u0000nul\u0000 \U0001f600 \ufeff",
    "line\nbreak\r\ttab", "x" * 500,
]


@pytest.fixture(autouse=True)
def _own_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTREPLAY_SPOOL_DIR", str(tmp_path / "spool"))


def schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace").fetchall()}


# --- the audit, kept true ------------------------------------------------------------------


def _sql_calls(tree: ast.AST) -> list[tuple[ast.Call, str]]:
    """Calls of `sql.SQL(...)` and `.execute(...)`/`.copy(...)` with what their SQL argument is."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.func,
                                                                        ast.Attribute)):
            continue
        if node.func.attr in ("SQL", "execute", "executemany", "copy"):
            found.append((node, node.func.attr))
    return found


def test_no_sql_text_is_built_from_strings() -> None:
    """`sql.SQL` only ever wraps literal text (or a shipped migration file); `execute` only
    gets composed SQL, never an f-string, `%`-formatted or concatenated string."""
    checked = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        for call, kind in _sql_calls(ast.parse(path.read_text(), str(path))):
            first = call.args[0]
            where = f"{path.relative_to(PACKAGE)}:{call.lineno}"
            if isinstance(first, (ast.JoinedStr, ast.BinOp)) or (
                    isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute)
                    and first.func.attr == "format" and isinstance(first.func.value,
                                                                   ast.Constant)):
                raise AssertionError(f"{where}: SQL built from a string expression")
            if kind == "SQL":
                shipped = ast.unparse(first) == "m.text" and path.name == "_migrate.py"
                assert isinstance(first, ast.Constant) or shipped, f"{where}: sql.SQL(non-literal)"
            checked += 1
    assert checked > 40  # the store's queries were found


# --- schema names ---------------------------------------------------------------------------


@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS, ids=repr)
def test_hostile_schema_names_are_refused_before_connecting(schema: str, tmp_path: Path
                                                             ) -> None:
    with pytest.raises(InvalidSchemaName, match="invalid schema name") as caught:
        check_schema_name(schema)
    assert isinstance(caught.value, StoreError) and isinstance(caught.value, ValueError)
    unreachable = f"postgresql://nobody@/nowhere?host={tmp_path}&port=1"
    # refused before any connection is tried: the server named does not even exist
    with pytest.raises(InvalidSchemaName):
        open_store(unreachable, schema=schema)
    with pytest.raises(InvalidSchemaName):
        migrate(unreachable, schema)


def test_the_cli_refuses_hostile_schemas_in_one_line(pg_dsn: str) -> None:
    """Found while testing: an invalid --schema used to end in a traceback (exit 1)."""
    before = schemas(pg_dsn)
    for schema, command in (('x"; DROP TABLE runs; --', ["runs"]),
                            ("agentreplay\n", ["db", "migrate"]), ("pg_catalog", ["show", "0a1b"])):
        line = one_line_error(agentreplay(*command, "--dsn", pg_dsn, "--schema", schema))
        assert "invalid schema name" in line, line
    assert schemas(pg_dsn) == before


@pytest.mark.parametrize("schema", ["select", "MixedCase_Schema", "_", "a" * 63, "user"])
def test_odd_but_valid_schema_names_work_quoted(pg_dsn: str, schema: str) -> None:
    """Keywords and mixed case are quoted identifiers: the schema is exactly the name given."""
    try:
        with open_store(pg_dsn, schema=schema) as store, store.record(
                name="odd schema", durability="sync") as rec:
            rec.record("tool", "t", {"q": 1}, "ok")
        with open_store(pg_dsn, schema=schema) as store:
            assert store.verify(rec.run_id).ok
        assert schema in schemas(pg_dsn)
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(sql.SQL("SELECT name FROM {}.runs").format(
                sql.Identifier(schema))).fetchone()
        assert row == ("odd schema",)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)))


# --- hostile names and values ---------------------------------------------------------------


def _label(text: str) -> str:
    """How a run name, tag, metadata key or step name is stored: NUL made visible."""
    return text.replace("\x00", "\\x00")


def record_hostile(store: Store) -> dict[str, uuid.UUID]:
    ids = {}
    for i, text in enumerate(HOSTILE_TEXT):
        with store.record(name=text, tags=[text, f"t{i}"], durability="sync",
                          metadata={text: text, "nested": {text: [text]}}) as rec:
            rec.record("tool", text + "x" * 10_000, {"q": text, text: text}, [text, {text: 1}])
        ids[text] = rec.run_id
    return ids


def check_hostile(store: Store, ids: dict[str, uuid.UUID]) -> None:
    for i, text in enumerate(HOSTILE_TEXT):
        run = store.get_run(ids[text])
        assert run.name == _label(text)
        assert sorted(run.metadata["tags"]) == sorted([_label(text), f"t{i}"])
        user = decode({k: v for k, v in run.metadata.items() if k in (_label(text), "nested")})
        assert user == {_label(text): text, "nested": {text: [text]}}
        assert [r.run_id for r in store.list_runs(name=text)] == [ids[text]]
        assert [r.run_id for r in store.list_runs(tag=text)] == [ids[text]]
        assert store.verify(run.run_id).ok
        with store.replay(run.run_id) as player:
            assert player.next("tool", text + "x" * 10_000, {"q": text, text: text}) == [
                text, {text: 1}]
        (step,) = store.load_steps(run.run_id)
        assert step.name == _label(text) + "x" * 10_000
    assert len(store.list_runs(limit=None)) == len(HOSTILE_TEXT) + 1  # and the canary


def test_hostile_names_tags_metadata_and_values_round_trip_in_postgresql(
    pg_dsn: str, pg_schema: str, spool_dir: Path
) -> None:
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir) as store:
        with store.record(name="canary", durability="sync") as canary:
            canary.record("tool", "t", {}, "still here")
        before = schemas(pg_dsn)
        ids = record_hostile(store)
    assert not list(spool_dir.glob("*")), "a hostile row went to the spool"
    with open_store(pg_dsn, schema=pg_schema) as store:
        check_hostile(store, ids)
        with store.replay(canary.run_id) as player:
            assert player.next("tool", "t", {}) == "still here"
        for hostile_id in ("'; DROP TABLE runs; --", "0a1b'; --", "%s", "\x00"):
            with pytest.raises(StoreError, match="no run with id"):
                store.get_run(hostile_id)
    assert schemas(pg_dsn) == before
    with psycopg.connect(pg_dsn) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (pg_schema,)).fetchall()}
    assert {"runs", "run_log", "schema_migrations"} <= tables


def test_hostile_names_round_trip_in_files(tmp_path: Path) -> None:
    with open_store(f"file:{tmp_path}") as store:
        with store.record(name="canary"):
            pass
        ids = record_hostile(store)
        check_hostile(store, ids)


def test_overlong_run_names_are_refused_at_once_and_never_spooled(
    pg_dsn: str, pg_schema: str, spool_dir: Path
) -> None:
    """Found while testing: PostgreSQL refuses a name too long for its index, and that error
    was taken for an outage: the run was retried, spooled and never stored."""
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir) as store:
        with pytest.raises(ValueError, match="run name of 501 characters: at most 500"), \
                store.record(name="n" * 501):
            pass
        # what a row made elsewhere (an import, another writer) meets: a refusal, not an outage
        backend = store.backend
        assert isinstance(backend, PostgresBackend)
        # random letters: too long for a btree entry even after compression
        noise = "".join(random.Random(0).choices(string.ascii_letters, k=20_000))
        run = Run(run_id=uuid.uuid4(), name=noise, started_at=datetime.now(timezone.utc))
        with pytest.raises(StoreError, match="index row") as caught:
            backend.create_run(run)
        assert backend.is_permanent(caught.value)
        assert type(caught.value) is StoreError  # not DatabaseUnavailable
        with store.record(name="next", durability="sync") as rec:  # nothing tripped
            rec.record("tool", "t", {}, 1)
        assert rec.stats.spooled == 0
    assert not list(spool_dir.glob("*"))


@pytest.mark.parametrize("metadata", [{1: "x"}, {("a",): "x"}])
def test_metadata_keys_must_be_strings(metadata: dict[Any, Any]) -> None:
    """A non-string key used to turn all metadata into one tagged map, hiding the tags and
    the recorder's own pid from the dead-run check."""
    with open_store("memory:") as store, pytest.raises(TypeError, match="keys must be"), \
            store.record(metadata=metadata):
        pass


def test_text_the_driver_cannot_encode_is_refused_not_retried(
    pg_dsn: str, pg_schema: str, spool_dir: Path
) -> None:
    """A lone surrogate in a row made elsewhere (the recorder's own names are cleaned) fails
    in the driver before reaching the server: retrying or spooling it would fail forever."""
    with open_store(pg_dsn, schema=pg_schema, spool_dir=spool_dir) as store:
        backend = store.backend
        assert isinstance(backend, PostgresBackend)
        run = Run(run_id=uuid.uuid4(), name="half \ud800 pair",
                  started_at=datetime.now(timezone.utc))
        with pytest.raises(Exception) as caught:
            backend.create_run(run)
        assert isinstance(caught.value, UnicodeError) or isinstance(
            caught.value.__cause__, UnicodeError), repr(caught.value)
        assert backend.is_permanent(caught.value)
