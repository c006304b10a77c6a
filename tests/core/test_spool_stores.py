"""One spool serves every store of a user: a flush loads only the runs of the store flushing."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentreplay_core import RunStatus, open_store
from agentreplay_core._spool import Spool, store_identity
from agentreplay_core.stores._file import FileBackend
from agentreplay_core.stores._memory import MemoryBackend
from tests.core.test_cli_runs import agentreplay
from tests.core.test_spool import Recorded, recorded


def spool_tail(spool: Spool, run: Recorded) -> None:
    """What a recorder spools when the database went away after the run's row was stored."""
    _, rows, finish = run
    spool.write_rows(rows[1:], [])
    spool.write_finish(finish)


def flush_cli(spool_dir: Path, dsn: str, schema: str) -> tuple[int, str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTREPLAY_SPOOL_DIR", str(spool_dir))
        result = agentreplay("spool", "flush", "--dsn", dsn, "--schema", schema)
    return result.returncode, result.stdout + result.stderr


def test_flush_into_another_schema_leaves_the_run_for_its_own(
    pg_dsn: str, pg_schema: str, other_schema: str, spool_dir: Path, tmp_path: Path
) -> None:
    run = recorded(tmp_path, 3)
    header, rows, _ = run
    with open_store(pg_dsn, schema=pg_schema, spool_dir=tmp_path / "unused") as team_a:
        team_a.backend.create_run(header)  # the run's row and first step made it
        team_a.backend.append(rows[:1])
        spool = Spool(spool_dir, store=store_identity(team_a.backend))
    spool_tail(spool, run)

    code, out = flush_cli(spool_dir, pg_dsn, other_schema)
    assert code == 0, out
    assert "0 spooled runs loaded" in out
    assert "1 spooled run of other stores left spooled" in out
    assert f"schema={pg_schema}" in out
    assert spool.pending() == [header.run_id]
    assert not list(spool_dir.glob("*.rejected")) and not list(spool_dir.glob("*.loading"))
    with open_store(pg_dsn, schema=other_schema, spool_dir=tmp_path / "unused") as team_b:
        assert team_b.list_runs() == []

    code, out = flush_cli(spool_dir, pg_dsn, pg_schema)
    assert code == 0, out
    assert "1 spooled run loaded" in out
    with open_store(pg_dsn, schema=pg_schema, spool_dir=tmp_path / "unused") as team_a:
        assert team_a.get_run(header.run_id).status == RunStatus.COMPLETE
        assert len(team_a.load_steps(header.run_id)) == 3
        assert team_a.verify(header.run_id).ok
    assert spool.pending() == []


def test_a_whole_spooled_run_never_lands_in_another_file_store(tmp_path: Path) -> None:
    run = recorded(tmp_path, 2)
    header, rows, finish = run
    mine, other = FileBackend(tmp_path / "mine"), FileBackend(tmp_path / "other")
    spool = Spool(tmp_path / "spool", store=store_identity(mine))
    spool.write_run(header)
    spool.write_rows(rows, [])
    spool.write_finish(finish)
    assert spool.flush(other) == {}
    assert spool.load_into(other, header.run_id) == 0  # the automatic reload of a sink
    assert other.list_runs() == []
    assert spool.elsewhere(other) == {header.run_id: f"file:{(tmp_path / 'mine').resolve()}"}
    assert spool.flush(mine) == {header.run_id: 2}
    assert mine.get_run(header.run_id).status == RunStatus.COMPLETE


def test_a_flush_into_memory_takes_nothing_of_another_store(tmp_path: Path) -> None:
    run = recorded(tmp_path, 2)
    mine = FileBackend(tmp_path / "mine")
    spool = Spool(tmp_path / "spool", store=store_identity(mine))
    spool_tail(spool, run)
    before = sorted(p.name for p in (tmp_path / "spool").iterdir())
    assert spool.flush(MemoryBackend()) == {}
    assert sorted(p.name for p in (tmp_path / "spool").iterdir()) == before  # no .loading


def test_identity_names_server_database_and_schema_without_secrets(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    with open_store(pg_dsn, schema=pg_schema, spool_dir=tmp_path / "unused") as store:
        identity = store_identity(store.backend)
    assert identity.startswith("postgresql://") and identity.endswith(f"?schema={pg_schema}")
    assert "password" not in identity
    assert store_identity(FileBackend(tmp_path / "a")) != store_identity(
        FileBackend(tmp_path / "b"))


def test_an_old_spool_file_is_not_set_aside_by_the_wrong_store(
    pg_dsn: str, pg_schema: str, other_schema: str, spool_dir: Path, tmp_path: Path
) -> None:
    """A file spooled before stores were told apart names none: a flush into a store that
    lacks its run must leave it for the right store, not set it aside as rejected."""
    run = recorded(tmp_path, 3)
    header, rows, _ = run
    with open_store(pg_dsn, schema=pg_schema, spool_dir=tmp_path / "unused") as team_a:
        team_a.backend.create_run(header)
        team_a.backend.append(rows[:1])
    spool = Spool(spool_dir)  # no store named, as older versions wrote
    spool_tail(spool, run)
    code, out = flush_cli(spool_dir, pg_dsn, other_schema)
    assert code == 1 and "RunNotFound" in out, out
    assert not list(spool_dir.glob("*.rejected"))
    code, out = flush_cli(spool_dir, pg_dsn, pg_schema)
    assert code == 0, out
    with open_store(pg_dsn, schema=pg_schema, spool_dir=tmp_path / "unused") as team_a:
        assert team_a.get_run(header.run_id).status == RunStatus.COMPLETE
        assert len(team_a.load_steps(header.run_id)) == 3


def test_a_store_spools_under_its_own_identity(tmp_path: Path) -> None:
    with open_store(f"file:{tmp_path / 'runs'}", spool_dir=tmp_path / "spool") as store:
        assert store.spool.store == store_identity(store.backend)
