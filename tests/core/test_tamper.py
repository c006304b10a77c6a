"""Tampering with real rows by SQL is detected by verification and refused by replay."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from agentreplay_core import IntegrityError, Store, open_store


def _record(store: Store, steps: int = 5, name: str = "victim") -> UUID:
    with store.record(name=name) as rec:
        for i in range(1, steps + 1):
            rec.record("tool", "lookup", {"i": i}, {"answer": f"value {i}", "n": i})
    return rec.run_id


def _sql(dsn: str, schema: str, statement: str, *params: object) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(s=sql.Identifier(schema)), params)


Tamper = Callable[[str, str, UUID, UUID], None]

TAMPERS: dict[str, Tamper] = {
    "changed output byte": lambda dsn, s, run, other: _sql(
        dsn, s, "UPDATE {s}.run_log SET output = jsonb_set(output, '{{answer}}', "
        "'\"value 9\"') WHERE run_id = %s AND step = 3", run),
    "deleted step": lambda dsn, s, run, other: _sql(
        dsn, s, "DELETE FROM {s}.run_log WHERE run_id = %s AND step = 2", run),
    "inserted step": lambda dsn, s, run, other: _insert_step(dsn, s, run),
    "swapped steps": lambda dsn, s, run, other: _swap(dsn, s, run),
    "step copied from another run": lambda dsn, s, run, other: _sql(
        dsn, s, "UPDATE {s}.run_log AS t SET input = o.input, output = o.output, "
        "checksum = o.checksum FROM {s}.run_log AS o WHERE t.run_id = %s AND t.step = 4 "
        "AND o.run_id = %s AND o.step = 4", run, other),
    "truncated tail": lambda dsn, s, run, other: _sql(
        dsn, s, "DELETE FROM {s}.run_log WHERE run_id = %s AND step >= 4", run),
    "changed run id": lambda dsn, s, run, other: _change_run_id(dsn, s, run),
}


def _insert_step(dsn: str, schema: str, run: UUID) -> None:
    # Shift steps 3.. up by one and put a forged step 3 in the gap.
    _sql(dsn, schema, "UPDATE {s}.run_log SET step = step + 1000 WHERE run_id = %s "
         "AND step >= 3", run)
    _sql(dsn, schema, "UPDATE {s}.run_log SET step = step - 999 WHERE run_id = %s "
         "AND step > 1000", run)
    _sql(dsn, schema, "INSERT INTO {s}.run_log SELECT run_id, 3, kind, name, match_key, path, "
         "input, '{{\"answer\": \"forged\"}}'::jsonb, is_error, started_at, duration_ms, checksum "
         "FROM {s}.run_log WHERE run_id = %s AND step = 2", run)


def _swap(dsn: str, schema: str, run: UUID) -> None:
    _sql(dsn, schema, "UPDATE {s}.run_log SET step = 99 WHERE run_id = %s AND step = 2", run)
    _sql(dsn, schema, "UPDATE {s}.run_log SET step = 2 WHERE run_id = %s AND step = 3", run)
    _sql(dsn, schema, "UPDATE {s}.run_log SET step = 3 WHERE run_id = %s AND step = 99", run)


def _change_run_id(dsn: str, schema: str, run: UUID) -> None:
    new = "00000000-0000-4000-8000-000000000001"
    _sql(dsn, schema, "UPDATE {s}.runs SET run_id = %s WHERE run_id = %s", new, run)
    _sql(dsn, schema, "UPDATE {s}.run_log SET run_id = %s WHERE run_id = %s", new, run)


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_tampering_is_detected(pg_dsn: str, pg_schema: str, tamper: str) -> None:
    with open_store(pg_dsn, schema=pg_schema) as store:
        run = _record(store)
        other = _record(store, name="other")
        assert store.verify(run).ok
        TAMPERS[tamper](pg_dsn, pg_schema, run, other)
        target = UUID("00000000-0000-4000-8000-000000000001") if tamper == "changed run id" \
            else run
        report = store.verify(target)
        assert not report.ok, tamper
        assert all(str(target) in str(p) for p in report.problems)
        with pytest.raises(IntegrityError, match="failed verification"), store.replay(target):
            pass
        with store.replay(target, verify=False, allow_unused=True):
            pass
        assert store.verify(other).ok


def test_one_changed_step_is_reported_once(pg_dsn: str, pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema) as store:
        run = _record(store, steps=8)
        TAMPERS["changed output byte"](pg_dsn, pg_schema, run, run)
        report = store.verify(run)
    assert [(p.step, p.code) for p in report.problems] == [(3, "checksum_mismatch")]


def test_a_checksum_made_no_checksum_does_not_blame_the_next_step(
        pg_dsn: str, pg_schema: str) -> None:
    """The step after a row whose checksum is no longer hex cannot be checked (its chain
    starts from that checksum): it was reported as changed."""
    with open_store(pg_dsn, schema=pg_schema) as store:
        run = _record(store, steps=5)
        _sql(pg_dsn, pg_schema, "UPDATE {s}.run_log SET checksum = 'not hex' "
             "WHERE run_id = %s AND step = 2", run)
        report = store.verify(run)
    assert [(p.step, p.code) for p in report.problems] == [
        (2, "checksum_mismatch"), (3, "unverifiable_after_bad_link")]


def test_a_step_renumbered_far_ahead_is_one_gap(pg_dsn: str, pg_schema: str) -> None:
    """Found by fuzzing: verification listed one problem per skipped number, so a step number
    raised to two billion made it allocate gigabytes. A gap is one problem naming its range."""
    far = 2_000_000_000
    with open_store(pg_dsn, schema=pg_schema) as store:
        run = _record(store, steps=6)
        _sql(pg_dsn, pg_schema, "UPDATE {s}.run_log SET step = %s WHERE run_id = %s "
             "AND step = 5", far, run)
        report = store.verify(run)
    assert [(p.step, p.code) for p in report.problems] == [
        (5, "missing_step"), (6, "unverifiable_after_gap"),
        (7, "missing_step"), (far, "unverifiable_after_gap"), (None, "seal_mismatch")]
    assert "step is missing (deleted" in report.problems[0].message
    assert f"steps 7 to {far - 1} are missing, {far - 7:,} in all (deleted" in \
        report.problems[2].message


def test_hmac_chain_cannot_be_forged_without_the_key(pg_dsn: str, pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema, hmac_key=b"secret-1") as keyed:
        run = _record(keyed)
        assert keyed.verify(run).ok
        assert keyed.get_run(run).chain == "hmac-sha256"
    # Someone with table access but not the key recomputes plain SHA-256 checksums: the keyed
    # verifier still rejects them, and a different key fails too.
    with open_store(pg_dsn, schema=pg_schema, hmac_key=b"other-key") as wrong:
        assert not wrong.verify(run).ok
    with open_store(pg_dsn, schema=pg_schema, hmac_key=None) as keyless:
        report = keyless.verify(run)
        assert [p.code for p in report.problems] == ["hmac_key_missing"]


def test_rechained_forgery_without_key_fails_hmac_verification(pg_dsn: str, pg_schema: str) -> None:
    from agentreplay_core._codec import canonical_bytes
    from agentreplay_core._integrity import GENESIS, chain_next, step_payload

    with open_store(pg_dsn, schema=pg_schema, hmac_key=b"k") as store:
        run = _record(store, steps=3)
        steps = store.load_steps(run)
        previous = GENESIS
        _sql(pg_dsn, pg_schema, "UPDATE {s}.run_log SET output = '{{\"answer\": \"x\"}}' "
             "WHERE run_id = %s AND step = 2", run)
        forged = []
        for step in store.load_steps(run):
            digest = chain_next(previous, step_payload(
                step.run_id, step.step, step.kind, step.name, step.match_key, step.path,
                canonical_bytes(step.input), canonical_bytes(step.output), step.is_error),
                key=b"guess")
            forged.append((digest.hex(), step.step))
            previous = digest
        for checksum, number in forged:
            _sql(pg_dsn, pg_schema, "UPDATE {s}.run_log SET checksum = %s WHERE run_id = %s "
                 "AND step = %s", checksum, run, number)
        _sql(pg_dsn, pg_schema, "UPDATE {s}.runs SET head_checksum = %s WHERE run_id = %s",
             forged[-1][0], run)
        assert len(steps) == 3
        assert not store.verify(run).ok


def _rechain_without_key(dsn: str, schema: str, store: Store, run: UUID,
                         status: str = "complete") -> None:
    """What an attacker with table access but no key can do: recompute a plain chain."""
    from agentreplay_core._codec import canonical_bytes
    from agentreplay_core._integrity import GENESIS, chain_next, seal_checksum, step_payload
    from agentreplay_core._model import RunStatus

    previous = GENESIS
    steps = store.load_steps(run)
    for step in steps:
        previous = chain_next(previous, step_payload(
            step.run_id, step.step, step.kind, step.name, step.match_key, step.path,
            canonical_bytes(step.input), canonical_bytes(step.output), step.is_error), None)
        _sql(dsn, schema, "UPDATE {s}.run_log SET checksum = %s WHERE run_id = %s AND step = %s",
             previous.hex(), run, step.step)
    head = seal_checksum(run, RunStatus(status), len(steps), previous, None)
    _sql(dsn, schema, "UPDATE {s}.runs SET chain = 'sha256', status = %s, step_count = %s, "
         "head_checksum = %s WHERE run_id = %s", status, len(steps), head, run)


def test_downgrading_a_keyed_run_to_plain_sha256_is_detected(pg_dsn: str,
                                                              pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema, hmac_key=b"k") as store:
        run = _record(store)
        _sql(pg_dsn, pg_schema, "UPDATE {s}.run_log SET output = '{{\"answer\": \"x\"}}' "
             "WHERE run_id = %s AND step = 2", run)
        _rechain_without_key(pg_dsn, pg_schema, store, run)
        report = store.verify(run)
        assert [p.code for p in report.problems] == ["unkeyed_run"]
        with pytest.raises(IntegrityError), store.replay(run):
            pass
    # a store that accepts runs recorded before the key existed sees a valid plain chain
    with open_store(pg_dsn, schema=pg_schema, hmac_key=b"k", accept_unkeyed_runs=True) as lax:
        assert lax.verify(run).ok


@pytest.mark.parametrize("edit", ["truncate", "status"])
def test_seal_edits_are_detected_with_a_key(pg_dsn: str, pg_schema: str, edit: str) -> None:
    with open_store(pg_dsn, schema=pg_schema, hmac_key=b"k") as store:
        with pytest.raises(RuntimeError), store.record(name="fails") as rec:
            for i in range(4):
                rec.record("tool", "t", {"i": i}, i)
            raise RuntimeError("agent crashed")
        run = rec.run_id
        assert store.get_run(run).status.value == "failed"
        assert store.verify(run).ok and store.verify(run).sealed
        if edit == "truncate":
            # drop the last step and move the seal's visible parts to match step 3
            row = store.load_steps(run)[2]
            _sql(pg_dsn, pg_schema, "DELETE FROM {s}.run_log WHERE run_id = %s AND step = 4", run)
            _sql(pg_dsn, pg_schema, "UPDATE {s}.runs SET step_count = 3, head_checksum = %s "
                 "WHERE run_id = %s", row.checksum, run)
        else:
            _sql(pg_dsn, pg_schema, "UPDATE {s}.runs SET status = 'complete' WHERE run_id = %s",
                 run)
        report = store.verify(run)
        assert "seal_mismatch" in [p.code for p in report.problems]


def test_unsealing_a_finished_run_is_detected(pg_dsn: str, pg_schema: str) -> None:
    with open_store(pg_dsn, schema=pg_schema) as store:
        run = _record(store)
        _sql(pg_dsn, pg_schema, "UPDATE {s}.runs SET head_checksum = NULL WHERE run_id = %s",
             run)
        assert [p.code for p in store.verify(run).problems] == ["seal_missing"]


def _forge_by_unkeyed_store(dsn: str, schema: str, genuine: UUID) -> UUID:
    with open_store(dsn, schema=schema, hmac_key=None) as forger:
        return _record(forger, name="victim")


def _forge_unkeyed_labelled_keyed(dsn: str, schema: str, genuine: UUID) -> UUID:
    run = _forge_by_unkeyed_store(dsn, schema, genuine)
    _sql(dsn, schema, "UPDATE {s}.runs SET chain = 'hmac-sha256' WHERE run_id = %s", run)
    return run


def _forge_with_guessed_key(dsn: str, schema: str, genuine: UUID) -> UUID:
    with open_store(dsn, schema=schema, hmac_key=b"guessed") as forger:
        return _record(forger, name="victim")


def _forge_copy_of_keyed_run(dsn: str, schema: str, genuine: UUID) -> UUID:
    # a replayed copy of a genuine run under a new id: the run id is inside every checksum
    copy = UUID("00000000-0000-4000-8000-00000000c0de")
    _sql(dsn, schema, "INSERT INTO {s}.runs SELECT %s, name, status, started_at, finished_at, "
         "parent_run_id, fork_step, metadata, step_count, head_checksum, format_version, chain "
         "FROM {s}.runs WHERE run_id = %s", copy, genuine)
    _sql(dsn, schema, "INSERT INTO {s}.run_log SELECT %s, step, kind, name, match_key, path, "
         "input, output, is_error, started_at, duration_ms, checksum FROM {s}.run_log "
         "WHERE run_id = %s", copy, genuine)
    return copy


FORGERIES: dict[str, Callable[[str, str, UUID], UUID]] = {
    "recorded by a store without the key": _forge_by_unkeyed_store,
    "recorded without the key, labelled keyed": _forge_unkeyed_labelled_keyed,
    "recorded with a guessed key": _forge_with_guessed_key,
    "a keyed run copied under a new run id": _forge_copy_of_keyed_run,
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_writer_without_the_key_cannot_make_a_run_that_verifies(
    pg_dsn: str, pg_schema: str, forgery: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(pg_dsn, schema=pg_schema, hmac_key=b"the-key") as keyed:
        genuine = _record(keyed)
        forged = FORGERIES[forgery](pg_dsn, pg_schema, genuine)
        assert keyed.verify(genuine).ok
        report = keyed.verify(forged)
        assert not report.ok, forgery
        with pytest.raises(IntegrityError, match="failed verification"), keyed.replay(forged):
            pass
    # and the command line, given the key the way users give it, says so too
    monkeypatch.setenv("AGENTREPLAY_HMAC_KEY", "the-key")
    cli = [sys.executable, "-m", "agentreplay_core", "verify", "--dsn", pg_dsn, "--schema",
           pg_schema]
    assert subprocess.run([*cli, str(genuine)], capture_output=True).returncode == 0
    assert subprocess.run([*cli, str(forged)], capture_output=True).returncode == 1
