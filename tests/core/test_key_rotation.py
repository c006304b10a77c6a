"""HMAC key rotation (SECURITY.md): runs chained under a retired key keep verifying while it is
kept as an old key, the report names the key, and a writer without the keys cannot forge."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import IntegrityError, Store, open_store
from agentreplay_core._codec import canonical_bytes
from agentreplay_core._integrity import GENESIS, chain_next, seal_checksum, step_payload
from agentreplay_core._model import RunStatus

KEY_A = b"old-key-A-3q2+7w=="
KEY_B = b"new-key-B-Zm9vYmFy"
KEY_C = b"unrelated-key-C"


def key_id(key: bytes) -> str:
    """A key's id as SECURITY.md defines it."""
    return hmac.new(key, b"agentreplay/key-id/v1", hashlib.sha256).hexdigest()[:12]


def record(store: Store, name: str = "run") -> UUID:
    with store.record(name=name) as rec:
        for i in range(1, 4):
            rec.record("tool", "lookup", {"i": i}, {"answer": i * 10})
    return rec.run_id


def codes(store: Store, run: UUID) -> list[str]:
    return [p.code for p in store.verify(run).problems]


def test_a_run_recorded_with_the_old_key_verifies_after_rotation(pg_dsn: str,
                                                                   pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema, hmac_key=KEY_A) as before:
        old_run = record(before)
        report = before.verify(old_run)
        assert report.ok and (report.key_id, report.old_key) == (key_id(KEY_A), False)

    with open_store(pg_dsn, schema=pg_schema, hmac_key=[KEY_B, KEY_A]) as rotated:
        report = rotated.verify(old_run)
        assert report.ok, report
        assert (report.key_id, report.old_key) == (key_id(KEY_A), True)
        assert f"chain intact under HMAC key {key_id(KEY_A)} (an old key)" in str(report)
        with rotated.replay(old_run) as player:
            assert [player.next("tool", "lookup", {"i": i}) for i in (1, 2, 3)] == [
                {"answer": 10}, {"answer": 20}, {"answer": 30}]
        new_run = record(rotated, "after rotation")  # recorded with the first key, B
        report = rotated.verify(new_run)
        assert report.ok and (report.key_id, report.old_key) == (key_id(KEY_B), False)
        assert [r.ok for r in rotated.verify_all()] == [True, True]

    with open_store(pg_dsn, schema=pg_schema, hmac_key=KEY_B) as without_a:
        assert without_a.verify(new_run).ok
        report = without_a.verify(old_run)
        assert report.problems[0].code == "hmac_key_unknown"
        assert key_id(KEY_B) in report.problems[0].message
        assert [p.step for p in report.problems if p.code == "checksum_mismatch"] == [1, 2, 3]
        with pytest.raises(IntegrityError, match="hmac_key_unknown"), without_a.replay(old_run):
            pass
    with open_store(pg_dsn, schema=pg_schema, hmac_key=KEY_A) as only_a:
        assert not only_a.verify(new_run).ok  # B's runs need B
    with open_store(pg_dsn, schema=pg_schema, hmac_key=None) as keyless:
        assert codes(keyless, old_run) == ["hmac_key_missing"]


def test_a_tampered_old_key_run_is_reported_against_its_key(pg_dsn: str,
                                                            pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema, hmac_key=KEY_A) as before:
        run = record(before)
    change_output(pg_dsn, pg_schema, run, step=2)
    with open_store(pg_dsn, schema=pg_schema, hmac_key=[KEY_B, KEY_C, KEY_A]) as rotated:
        report = rotated.verify(run)
    # the key that explains the other steps: one problem, at the changed step
    assert [(p.step, p.code) for p in report.problems] == [(2, "checksum_mismatch")]
    assert (report.key_id, report.old_key) == (key_id(KEY_A), True)


def agentreplay(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentreplay_core", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def test_old_keys_come_from_the_environment(pg_dsn: str, pg_schema: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(pg_dsn, schema=pg_schema, hmac_key=KEY_A) as before:
        run = record(before)
    rotated_env = {"AGENTREPLAY_HMAC_KEY": KEY_B.decode(),
                   "AGENTREPLAY_HMAC_OLD_KEYS": f"{KEY_C.decode()}, {KEY_A.decode()}"}
    for name, value in rotated_env.items():
        monkeypatch.setenv(name, value)
    with open_store(pg_dsn, schema=pg_schema) as rotated:
        assert rotated.hmac_key == KEY_B
        report = rotated.verify(run)
        assert report.ok and (report.key_id, report.old_key) == (key_id(KEY_A), True)
    # an explicit hmac_key= replaces both variables
    with open_store(pg_dsn, schema=pg_schema, hmac_key=KEY_B) as explicit:
        assert "hmac_key_unknown" in codes(explicit, run)

    where = ("--dsn", pg_dsn, "--schema", pg_schema)
    ok = agentreplay("verify", str(run), *where, env=rotated_env)
    assert ok.returncode == 0, ok.stderr
    # rich wraps long lines when stdout is no terminal
    assert f"under HMAC key {key_id(KEY_A)} (an old key)" in " ".join(ok.stdout.split())
    retired = agentreplay("verify", str(run), *where,
                          env={**rotated_env, "AGENTREPLAY_HMAC_OLD_KEYS": ""})
    assert retired.returncode == 1
    assert "hmac_key_unknown" in retired.stdout


def change_output(dsn: str, schema: str, run: UUID, step: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET output = '{{\"answer\": -1}}' WHERE run_id = %s "
                             "AND step = %s").format(sql.Identifier(schema, "run_log")),
                     (run, step))


def rechain(dsn: str, schema: str, store: Store, run: UUID, key: bytes | None) -> None:
    """What a writer holding neither key can do: recompute the whole chain with its own."""
    previous = GENESIS
    steps = store.load_steps(run)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for s in steps:
            previous = chain_next(previous, step_payload(
                s.run_id, s.step, s.kind, s.name, s.match_key, s.path,
                canonical_bytes(s.input), canonical_bytes(s.output), s.is_error), key)
            conn.execute(sql.SQL("UPDATE {} SET checksum = %s WHERE run_id = %s AND step = %s")
                         .format(sql.Identifier(schema, "run_log")),
                         (previous.hex(), run, s.step))
        head = seal_checksum(run, RunStatus.COMPLETE, len(steps), previous, key)
        conn.execute(sql.SQL("UPDATE {} SET head_checksum = %s, chain = %s WHERE run_id = %s")
                     .format(sql.Identifier(schema, "runs")),
                     (head, "hmac-sha256" if key else "sha256", run))


@pytest.mark.parametrize("forger_key", [None, KEY_C], ids=["plain-sha256", "guessed-key"])
def test_a_writer_with_neither_key_cannot_forge(pg_dsn: str, pg_schema: str,
                                                forger_key: bytes | None) -> None:
    with open_store(pg_dsn, schema=pg_schema, hmac_key=KEY_A) as before:
        edited = record(before, "edited")
        kept = record(before, "kept")
    with open_store(pg_dsn, schema=pg_schema, hmac_key=forger_key) as forger:
        change_output(pg_dsn, pg_schema, edited, step=2)
        rechain(pg_dsn, pg_schema, forger, edited, forger_key)
        assert forger.verify(edited).ok  # a valid chain, by the forger's own key
        invented = record(forger, "invented")  # a whole run of the forger's own
    expected = "unkeyed_run" if forger_key is None else "hmac_key_unknown"
    with open_store(pg_dsn, schema=pg_schema, hmac_key=[KEY_B, KEY_A]) as rotated:
        assert rotated.verify(kept).ok
        for run in (edited, invented):
            assert codes(rotated, run)[0] == expected
            with pytest.raises(IntegrityError), rotated.replay(run):
                pass


def test_a_run_under_an_old_key_exports_and_imports_with_the_keyring(
        pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    from agentreplay_core._transfer import export_run, import_run

    with open_store(f"file:{tmp_path / 'a'}", hmac_key=KEY_A) as before:
        run_id = record(before)
    exported = tmp_path / "run.jsonl"
    with open_store(f"file:{tmp_path / 'a'}", hmac_key=[KEY_B, KEY_A]) as rotated:
        export_run(rotated, run_id, exported)
    with open_store(pg_dsn, schema=pg_schema, hmac_key=[KEY_B, KEY_A]) as target:
        import_run(target, exported)
        report = target.verify(run_id)
        assert report.ok and report.old_key
    with open_store(f"file:{tmp_path / 'c'}", hmac_key=KEY_B) as without_a, \
            pytest.raises(IntegrityError):
        import_run(without_a, exported)
