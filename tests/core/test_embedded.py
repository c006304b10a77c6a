"""The embedded PostgreSQL from pgserver: started in a data directory, reused, and usable."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import psycopg
import pytest

from agentreplay_core._errors import StoreError
from agentreplay_core.stores._embedded import DATA_DIR_ENV, default_data_dir, embedded_dsn
from agentreplay_core.stores._postgres import PostgresBackend


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("pgserver") is None,
                    reason="pgserver has no wheel for this Python; "
                           "test_missing_pgserver_names_the_extra covers its absence")
def test_embedded_server_starts_in_the_configured_dir_and_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgserver.postgres_server import get_server

    data_dir = tmp_path / "nested" / "pgdata"
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    assert default_data_dir() == data_dir
    try:
        dsn = embedded_dsn()
        assert (data_dir / "PG_VERSION").exists()
        assert embedded_dsn(data_dir) == dsn
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT 1 + 1").fetchone() == (2,)
        with PostgresBackend(dsn, schema="embedded") as store:
            assert store.has_pgvector is True  # pgserver ships pgvector
            assert store.list_runs() == []
    finally:
        get_server(data_dir).cleanup()


def test_missing_pgserver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the package were not installed: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "pgserver", None)
    monkeypatch.setitem(sys.modules, "pgserver.postgres_server", None)
    with pytest.raises(StoreError, match=r'pip install "agentreplay\[embedded\]"'):
        embedded_dsn(Path("/nonexistent/pgdata"))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("pgserver") is None,
                    reason="pgserver has no wheel for this Python")
def test_a_data_directory_initdb_never_finished_is_set_aside_and_made_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """initdb cut short (a killed process, Ctrl-C) leaves PG_VERSION without
    global/pg_control: pgserver never initialises such a directory again, so every start
    failed until the user removed it by hand. The failed start moves it beside (nothing is
    deleted) and the next one makes a new cluster."""
    from pgserver.postgres_server import get_server

    data_dir = tmp_path / "pgdata"
    data_dir.mkdir()
    (data_dir / "PG_VERSION").write_text("16\n")
    (data_dir / "left-by-initdb").write_text("kept")
    try:
        dsn = embedded_dsn(data_dir)
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT 1 + 1").fetchone() == (2,)
        assert (data_dir / "global" / "pg_control").exists()
        [aside] = tmp_path.glob("pgdata.incomplete-*")
        assert (aside / "left-by-initdb").read_text() == "kept"
        assert "never fully initialised" in caplog.text
    finally:
        get_server(data_dir).cleanup()
