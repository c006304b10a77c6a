"""Broken input is one clear error naming the problem (issue 8).

A wrong DSN (no server there, a port that is not a number, bad syntax, an unknown database or
user, a wrong password, a mistyped URL scheme), a damaged or truncated export, a file from a
newer format and a run id that does not exist: through the API (`open_store`, `import_run`,
`store.get_run` and friends) and the command line (exit code 2, one `error:` line, no
traceback). tests/core/test_cli_transfer.py and test_cli_runs.py cover the rest.
"""

from __future__ import annotations

import gzip
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from agentreplay_core import IntegrityError, RunNotFound, Store, StoreError, open_store
from agentreplay_core._transfer import MalformedExport, export_run, import_run
from tests.core.test_cli_runs import agentreplay, one_line_error
from tests.support.pgcluster import PgCluster

PASSWORD = "right horse battery"
WRONG = "wrong staple 42"


@pytest.fixture(autouse=True)
def _own_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTREPLAY_SPOOL_DIR", str(tmp_path / "spool"))


def with_params(dsn: str, **changes: str) -> str:
    """`dsn` as key=value pairs, with some of them changed."""
    return make_conninfo(dsn, **changes)


def check_both_ways(dsn: str, schema: str, expected: str, secret: str = "") -> None:
    """Opening the store fails with `expected` in one line, in Python and on the CLI."""
    with pytest.raises(StoreError) as caught:
        open_store(dsn, schema=schema, connect_timeout=5)
    message = str(caught.value)
    assert expected in message and "\n" not in message, message
    assert not secret or secret not in message
    result = agentreplay("show", "0a1b2c3d", "--dsn", dsn, "--schema", schema)
    line = one_line_error(result)
    assert expected in line, line
    assert not secret or secret not in result.stderr + result.stdout


@pytest.mark.parametrize(("change", "expected"), [
    ({"dbname": "no_such_db_4711"}, 'database "no_such_db_4711" does not exist'),
    ({"user": "nobody_4711"}, 'role "nobody_4711" does not exist'),
    ({"host": "127.0.0.1", "port": "1"}, "Connection refused"),
    ({"port": "notaport"}, 'invalid integer value "notaport" for connection option "port"'),
    ({"sslmode": "sometimes"}, 'invalid sslmode value: "sometimes"'),
], ids=["unknown database", "unknown user", "nothing listens there", "port not a number",
        "bad option value"])
def test_a_wrong_dsn_is_one_line_naming_the_problem(
    pg_dsn: str, pg_schema: str, change: dict[str, str], expected: str
) -> None:
    check_both_ways(with_params(pg_dsn, **change), pg_schema, expected)


@pytest.mark.parametrize(("dsn", "expected"), [
    ("host=localhost dbname=agents junk", 'missing "=" after "junk"'),
    ("dbname='agents", "unterminated quoted string"),
    ("postgresql://me@[::1/agents", 'matching "]" in IPv6 host address'),
], ids=["key=value", "quote", "url"])
def test_a_dsn_with_bad_syntax_is_one_line_naming_the_problem(dsn: str, expected: str) -> None:
    check_both_ways(dsn, "agentreplay", expected)


@pytest.mark.parametrize("url", ["postgressql://me@localhost/agents",
                                 "postgresql+psycopg://me@localhost/agents",
                                 "POSTGRESQL://me@localhost/agents", "mysql://me@db/agents"])
def test_a_mistyped_url_scheme_is_refused_not_made_a_directory(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found while testing: such a URL used to become a file store in a new directory
    called `postgressql:`, and every run id was then simply "not found"."""
    monkeypatch.chdir(tmp_path)
    scheme = url.split("://")[0]
    with pytest.raises(StoreError, match=re.escape(f"unknown run store URL scheme '{scheme}'")):
        open_store(url)
    result = agentreplay("runs", "--dsn", url)
    assert f"unknown run store URL scheme '{scheme}'" in one_line_error(result)
    assert not (tmp_path / f"{scheme}:").exists()


def test_key_value_dsns_without_dbname_reach_postgresql(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`host=... user=...` is a connection string, not a directory called that."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
        open_store(f"host={tmp_path} port=1 user=me", connect_timeout=2)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("host=")]


@pytest.fixture
def password_cluster(private_cluster: PgCluster) -> Iterator[PgCluster]:
    """The private cluster, where role `alice` must log in with a password."""
    with psycopg.connect(private_cluster.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE alice LOGIN PASSWORD {}").format(
            sql.Literal(PASSWORD)))
        row = conn.execute("SHOW hba_file").fetchone()
        assert row is not None
        hba = Path(row[0])
        hba.write_text("local all alice scram-sha-256\n" + hba.read_text())
        conn.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 10
    while True:  # the postmaster rereads the file asynchronously
        try:
            psycopg.connect(with_params(private_cluster.dsn, user="alice"), connect_timeout=2
                            ).close()
        except psycopg.OperationalError:
            break
        assert time.monotonic() < deadline, "pg_hba.conf was not reloaded"
        time.sleep(0.1)
    yield private_cluster


def test_a_wrong_password_is_named_and_never_shown(password_cluster: PgCluster) -> None:
    base = password_cluster.dsn
    wrong = with_params(base, user="alice", password=WRONG)
    check_both_ways(wrong, "agentreplay", 'password authentication failed for user "alice"',
                    secret=WRONG)
    url = base.replace("postgres@", f"alice:{WRONG.replace(' ', '%20')}@", 1)
    check_both_ways(url, "agentreplay", 'password authentication failed for user "alice"',
                    secret="staple")
    check_both_ways(with_params(base, user="alice"), "agentreplay", "no password supplied")
    with open_store(with_params(base, user="postgres"), schema="agentreplay"):
        pass  # the server itself is fine
    right = with_params(base, user="alice", password=PASSWORD)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("GRANT CREATE ON DATABASE postgres TO alice")
    with open_store(right, schema="alice_runs") as store:
        assert store.list_runs() == []


# --- exports --------------------------------------------------------------------------------


@pytest.fixture
def exported(tmp_path: Path) -> tuple[uuid.UUID, Path]:
    """A three-step run exported from a file store."""
    with open_store(f"file:{tmp_path / 'source'}") as store, store.record(name="r") as rec:
        for i in range(3):
            rec.record("tool", "lookup", {"i": i}, {"answer": f"value {i}"})
    path = tmp_path / "run.jsonl"
    with open_store(f"file:{tmp_path / 'source'}") as store:
        export_run(store, rec.run_id, path)
    return rec.run_id, path


def damaged(path: Path, content: bytes, name: str) -> Path:
    target = path.with_name(name)
    target.write_bytes(content)
    return target


def test_damaged_exports_are_refused_naming_the_problem(exported: tuple[uuid.UUID, Path],
                                                        tmp_path: Path) -> None:
    _, path = exported
    data = path.read_bytes()
    target = f"file:{tmp_path / 'target'}"
    malformed = {
        "cut mid-line": (data[:-20], "truncated (the last line is incomplete)"),
        "gzip": (gzip.compress(data), "is a gzip file, not an export itself; decompress it"),
        "two exports": (data + data, "line 5: a second run header"),
        "BOM": (b"\xef\xbb\xbf" + data, "line 1 is not valid JSON"),
        "newer file": (data.replace(b'"format_version":1', b'"format_version":7', 1),
                       "written by a newer agentreplay (format 7 > 1); upgrade agentreplay"),
        "newer run": (data.replace(b'"format_version":1,"chain"', b'"format_version":3,"chain"',
                                   1), "recorded by a newer agentreplay (run format 3 > 1)"),
        "a step line without its checksum": (
            re.sub(rb',"checksum":"[0-9a-f]+"', b"", data, count=1),
            "line 2: checksum: Field required"),
    }
    with open_store(target) as store:
        for label, (content, expected) in malformed.items():
            bad = damaged(path, content, f"{label.replace(' ', '-')}.jsonl")
            with pytest.raises(MalformedExport) as caught:
                import_run(store, bad)
            message = str(caught.value)
            assert message.startswith(f"{bad}: ") and expected in message, (label, message)
            if label in ("gzip", "two exports", "newer run"):  # the CLI path is shared
                cli = agentreplay("import", str(bad), "--dsn", target)
                assert expected in one_line_error(cli), label
        with pytest.raises(StoreError, match="is a directory"):
            import_run(store, tmp_path)
        assert store.list_runs() == []


def test_exports_cut_at_a_line_or_edited_fail_verification(exported: tuple[uuid.UUID, Path],
                                                           tmp_path: Path) -> None:
    """Whole lines missing, or a value changed, still parse: verification names the damage."""
    run_id, path = exported
    data = path.read_bytes()
    short = damaged(path, data[:data.rindex(b"\n", 0, -1) + 1], "short.jsonl")
    edited = damaged(path, data.replace(b'"value 1"', b'"value 9"'), "edited.jsonl")
    target = f"file:{tmp_path / 'target'}"
    with open_store(target) as store:
        with pytest.raises(IntegrityError, match=r"sealed with 3 steps but 2 are stored"):
            import_run(store, short)
        with pytest.raises(IntegrityError, match=r"step 2: .*checksum_mismatch"):
            import_run(store, edited)
        assert store.list_runs() == []
    # replaying the file itself refuses too
    with open_store(f"file:{short}") as alone, \
            pytest.raises(IntegrityError, match="refusing to replay"), alone.replay(run_id):
        pass


# --- runs that do not exist -----------------------------------------------------------------


def test_a_run_that_does_not_exist_is_named_by_every_entry_point(any_store: Store,
                                                                 tmp_path: Path) -> None:
    missing = uuid.uuid4()
    attempts: dict[str, Callable[[], object]] = {
        "get_run": lambda: any_store.get_run(missing),
        "load_steps": lambda: any_store.load_steps(missing),
        "verify": lambda: any_store.verify(missing),
        "export": lambda: export_run(any_store, missing, tmp_path / "x.jsonl"),
    }
    for label, attempt in attempts.items():
        with pytest.raises(RunNotFound, match=f"no run with id {missing}"):
            attempt()
        assert not (tmp_path / "x.jsonl").exists(), label
    with pytest.raises(RunNotFound, match=f"no run with id {missing}"), \
            any_store.replay(missing):
        pass


def test_the_cli_names_a_run_that_does_not_exist(pg_dsn: str, pg_schema: str,
                                                 tmp_path: Path) -> None:
    missing = str(uuid.uuid4())
    where = ("--dsn", pg_dsn, "--schema", pg_schema)
    open_store(pg_dsn, schema=pg_schema).close()  # reading commands make no schema
    for command in (["show", missing], ["export", missing, "-o", str(tmp_path / "x.jsonl")],
                    ["show", missing[:8]]):
        line = one_line_error(agentreplay(*command, *where))
        assert f"no run with id {command[1]}" in line, line
    assert not (tmp_path / "x.jsonl").exists()
    with psycopg.connect(pg_dsn) as conn:  # nothing was stored
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}.runs").format(
            sql.Identifier(pg_schema))).fetchone()
    assert row == (0,)


def test_a_stored_run_of_a_newer_format_is_not_replayed(pg_dsn: str, pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema) as store:
        with store.record(name="future") as rec:
            rec.record("tool", "t", {}, 1)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {}.runs SET format_version = 2 WHERE run_id = %s")
                         .format(sql.Identifier(pg_schema)), (rec.run_id,))
        with pytest.raises(StoreError, match=r"newer agentreplay \(format 2 > 1\)"), \
                store.replay(rec.run_id):
            pass


@pytest.mark.parametrize("url", ["postgresql://me:pw-Secret-1@localhost/agents", "memory:",
                                 Path("runs")])
def test_a_url_given_to_store_itself_is_refused_at_once(url: Any) -> None:
    """Found while testing: `Store("postgresql://...")` was taken, and the first recorded
    step failed in the writer's thread (`'str' object has no attribute ...`): steps lost."""
    with pytest.raises(TypeError, match=r"open_store\(url\)") as raised:
        Store(url)
    assert "pw-Secret-1" not in str(raised.value)
