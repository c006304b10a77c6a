"""`agentreplay export` and `agentreplay import`: a run moves as a file that replays alone."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import RunNotFound, StoreError, open_store
from tests.core.test_cli_runs import agentreplay, one_line_error

QUERY_VECTOR = [0.125, -2.5, 3.0]
DOC_VECTORS = [[1.0, 0.0, 0.0], [0.125, -2.5, 3.0000001]]
ANSWER = {"content": "It is sunny", "at": dt.datetime(2024, 5, 1, 9, 40, tzinfo=dt.timezone.utc),
          "cost": Decimal("0.10"), "raw": b"\x00\xff"}


@pytest.fixture(autouse=True)
def _own_spool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTREPLAY_SPOOL_DIR", str(tmp_path / "spool"))



def record_rag_run(url: str, schema: str = "agentreplay") -> uuid.UUID:
    options = {"schema": schema} if url.startswith("postgresql") else {}
    with open_store(url, **options) as store, \
            store.record(name="rag", tags=["bug-123"], durability="sync") as rec:
        rec.record("embedding", "embed-query", {"texts": ["weather?"]}, [QUERY_VECTOR])
        rec.record("embedding", "embed-docs", {"texts": ["a", "b"]}, DOC_VECTORS)
        rec.record("llm", "gpt-4o", {"messages": [{"role": "user", "content": "weather?"}]},
                   ANSWER)
    return rec.run_id


def replay_all(url: str, run_id: uuid.UUID) -> None:
    """Replays the whole run from `url`, checking every value comes back exactly."""
    with open_store(url) as store:
        assert store.verify(run_id).ok
        with store.replay(run_id) as player:
            assert player.next("embedding", "embed-query", {"texts": ["weather?"]}) == [
                QUERY_VECTOR]
            assert player.next("embedding", "embed-docs", {"texts": ["a", "b"]}) == DOC_VECTORS
            assert player.next("llm", "gpt-4o", {"messages": [
                {"role": "user", "content": "weather?"}]}) == ANSWER


def test_export_replays_without_a_database_and_import_restores_vectors(
    pg_dsn: str, pg_schema: str, tmp_path: Path, server_has_pgvector: bool
) -> None:
    run_id = record_rag_run(pg_dsn, pg_schema)
    where = ("--dsn", pg_dsn, "--schema", pg_schema)
    exported = tmp_path / "bug-123.jsonl"
    result = agentreplay("export", str(run_id)[:8], "-o", str(exported), *where)
    assert result.returncode == 0, result.stderr
    assert f"exported run {run_id} (3 steps, complete) to {exported}" in result.stdout
    replay_all(f"file:{exported}", run_id)  # the file alone: no database involved

    with open_store(pg_dsn, schema=pg_schema) as store:
        store.delete_run(run_id)
        if server_has_pgvector:
            assert store.search_embeddings(DOC_VECTORS[1]) == []
    imported = agentreplay("import", str(exported), *where)
    assert imported.returncode == 0, imported.stderr
    vectors = ", 3 vectors indexed for similarity search" if server_has_pgvector else ""
    assert f"imported run {run_id} (3 steps{vectors}) into" in imported.stdout
    again = agentreplay("import", str(exported), *where)
    assert f"run {run_id} already exists" in one_line_error(again)
    assert "--replace" in again.stderr
    replaced = agentreplay("import", str(exported), "--replace", *where)
    assert replaced.returncode == 0, replaced.stderr
    assert "replacing the stored one" in replaced.stdout

    with open_store(pg_dsn, schema=pg_schema) as store:
        assert store.get_run(run_id).metadata["tags"] == ["bug-123"]
        assert store.verify(run_id).ok
        with store.replay(run_id, allow_unused=True) as player:
            assert player.next("llm", "gpt-4o", {"messages": [
                {"role": "user", "content": "weather?"}]}) == ANSWER
        if not server_has_pgvector:
            with pytest.raises(StoreError, match="pgvector"):
                store.search_embeddings(QUERY_VECTOR)
            return
        matches = store.search_embeddings(QUERY_VECTOR, limit=3)
    # replaced once: each vector is there once, the query's own first, then its near twin
    assert [(m.run_id, m.step, m.position, m.name) for m in matches] == [
        (run_id, 1, 0, "embed-query"), (run_id, 2, 1, "embed-docs"),
        (run_id, 2, 0, "embed-docs")]


def test_a_tampered_run_exports_with_a_warning_and_import_refuses_it(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    run_id = record_rag_run(pg_dsn, pg_schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {}.run_log SET output = '{{\"content\": \"rainy\"}}' "
                             "WHERE run_id = %s AND step = 3").format(
            sql.Identifier(pg_schema)), (run_id,))
    exported = tmp_path / "tampered.jsonl"
    result = agentreplay("export", str(run_id), "-o", str(exported), "--dsn", pg_dsn,
                         "--schema", pg_schema)
    assert result.returncode == 1  # exported, but a check failed
    assert "fails verification" in result.stderr and "checksum_mismatch" in result.stderr
    with open_store(f"file:{exported}") as alone:
        report = alone.verify(run_id)
        assert [(p.step, p.code) for p in report.problems] == [(3, "checksum_mismatch")]

    target = f"file:{tmp_path / 'other'}"
    refused = agentreplay("import", str(exported), "--dsn", target)
    assert refused.returncode == 1
    assert f"run {run_id} fails verification; not imported" in refused.stderr
    assert "--no-verify" in refused.stderr and "Traceback" not in refused.stderr
    with open_store(target) as other, pytest.raises(RunNotFound):
        other.get_run(run_id)
    forced = agentreplay("import", str(exported), "--no-verify", "--dsn", target)
    assert forced.returncode == 0, forced.stderr
    assert "fails verification" in forced.stderr
    with open_store(target) as other:
        assert not other.verify(run_id).ok


def test_import_refuses_malformed_files_in_one_line(tmp_path: Path) -> None:
    source = f"file:{tmp_path / 'source'}"
    run_id = record_rag_run(source)
    good = tmp_path / "good.jsonl"
    assert agentreplay("export", str(run_id), "-o", str(good), "--dsn", source).returncode == 0
    data = good.read_bytes()
    files = {
        "truncated": data[: data.rindex(b"\n", 0, len(data) - 1) + 10],  # mid-line
        "not agentreplay": b'{"event": "login", "user": 7}\n',
        "binary": bytes(range(256)) * 4 + b"\n",
        "newer": data.replace(b'"format_version":1', b'"format_version":99', 1),
        "empty": b"",
    }
    expected = {
        "truncated": "truncated (the last line is incomplete)",
        "not agentreplay": "line 1 is not an agentreplay record",
        "binary": "line 1 is not valid JSON",
        "newer": "written by a newer agentreplay (format 99 > 1); upgrade agentreplay",
        "empty": "empty file, not an agentreplay export",
    }
    target = f"file:{tmp_path / 'target'}"
    for label, content in files.items():
        path = tmp_path / f"{label.replace(' ', '-')}.jsonl"
        path.write_bytes(content)
        line = one_line_error(agentreplay("import", str(path), "--dsn", target))
        assert line.startswith(f"error: {path}: ") and expected[label] in line, line
    missing = agentreplay("import", str(tmp_path / "nowhere.jsonl"), "--dsn", target)
    assert "no such file" in one_line_error(missing)
    wrong_name = agentreplay("export", str(run_id), "-o", str(tmp_path / "x.json"),
                             "--dsn", source)
    assert "must end in .jsonl" in one_line_error(wrong_name)
    with open_store(target) as store:
        assert store.list_runs() == []
