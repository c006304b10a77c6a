"""Exact embedding vectors and their pgvector copies: the stored form, the binary COPY the
PostgreSQL backend renders itself, replay bit for bit, and what pgvector cannot hold."""

from __future__ import annotations

import base64
import math
import random
import struct
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from agentreplay_core import Store, StoreError, _codec, open_store
from agentreplay_core._model import Run
from agentreplay_core._sink import Sink
from agentreplay_core._spool import Spool
from agentreplay_core._transfer import export_run, import_run
from agentreplay_core._vectors import embedding_output, embedding_vectors, step_vectors
from agentreplay_core.stores._backend import EmbeddingRow, PendingStep
from agentreplay_core.stores._pgrows import vector_binary, vector_text
from agentreplay_core.stores._pgwrite import SMALL_BATCH
from agentreplay_core.stores._postgres import PostgresBackend
from tests.support.pgfaults import reject_rows

DIMS = 768
FLOAT32_MAX = struct.unpack(">f", bytes.fromhex("7f7fffff"))[0]
#: text that text-format COPY would have to escape, and JSON too: backslashes, quotes, the
#: end-of-data marker `\.`, the NULL marker `\N`, control characters, non-ASCII
TRICKY = ('back\\slash \\\\ \\. \\N "quoted" \'single\' tab\tnew\nline\rcr \x01\x1f '
          'héllo ✓ 🚀 日本語 e\u0301 \u2028 \U0010ffff literal \\u0000 end\\')


def _from_bits(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


def _bits(vectors: Sequence[Sequence[float]]) -> list[bytes]:
    return [struct.pack(f"<{len(v)}d", *v) for v in vectors]


def _vector(seed: int, dims: int = DIMS) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0.0, 1.0) for _ in range(dims)]


def _odd_vector(seed: int) -> list[float]:
    """Values JSON cannot hold and pgvector refuses, each to come back bit for bit."""
    v = _vector(seed)
    v[:8] = [-0.0, 5e-324, math.inf, -math.inf, math.nan, _from_bits(0x7FF8_0000_DEAD_BEEF),
             _from_bits(0xFFF0_0000_0000_0001), 1e300]
    return v




def _vector_positions(dsn: str, schema: str, run_id: uuid.UUID) -> list[tuple[int, int, int]]:
    """(step, position, dims) of the pgvector rows of a run, read with SQL."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(sql.SQL(
            "SELECT step, position, dims FROM {} WHERE run_id = %s ORDER BY step, position"
        ).format(sql.Identifier(schema, "embeddings")), (run_id,)).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


# -- stored form and replay on every store ----------------------------------------------


def test_vectors_are_stored_packed_and_replay_bit_identical(any_store: Store) -> None:
    documents = [_odd_vector(1), _vector(2), _odd_vector(3)]
    query = _odd_vector(4)
    with any_store.record() as rec:
        rec.record("embedding", "embed", {"texts": ["a", "b", "c"]}, documents)
        rec.record("embedding", "embed", {"texts": ["q"]}, query)

    stored = [s.output for s in any_store.load_steps(rec.run_id)]
    packed = [{"__ar__": "floats", "f64le": base64.b64encode(raw).decode()}
              for raw in _bits([*documents, query])]
    assert stored == [packed[:3], packed[3]]
    assert any_store.verify(rec.run_id).ok
    with any_store.replay(rec.run_id) as player:
        again = player.next("embedding", "embed", {"texts": ["a", "b", "c"]})
        again_query = player.next("embedding", "embed", {"texts": ["q"]})
    assert _bits(again) == _bits(documents)
    assert _bits([again_query]) == _bits([query])
    assert all(type(x) is float for v in [*again, again_query] for x in v)


def test_a_run_with_vectors_as_json_numbers_still_replays(any_store: Store) -> None:
    """Recordings made before vectors were packed hold them as plain numbers (with a tag for
    -0.0); they replay exactly, and forks and imports still find their vectors."""
    values = _vector(5, 40)
    values[3] = -0.0
    old_form = [[{"__ar__": "float", "v": "-0.0"} if i == 3 else x
                 for i, x in enumerate(values)]]
    with any_store.record() as rec:
        rec.record("embedding", "embed", {"texts": ["old"]}, [[0.5, 0.25]])
    (template,) = any_store.load_steps(rec.run_id)
    old_step = template.model_copy(update={"output": old_form})
    with any_store.record() as copier:
        copier.copy_step(old_step)

    (stored,) = any_store.load_steps(copier.run_id)
    assert stored.output == old_form  # kept as it was, not repacked
    assert any_store.verify(copier.run_id).ok
    assert _bits(step_vectors(stored)) == _bits([values])
    with any_store.replay(copier.run_id) as player:
        again = player.next("embedding", "embed", {"texts": ["old"]})
    assert _bits(again) == _bits([values])


# -- PostgreSQL: pgvector copies ----------------------------------------------------------


def test_pgvector_rows_are_written_and_searchable(
    pg_store: Store, pg_dsn: str, pg_schema: str, server_has_pgvector: bool
) -> None:
    calls = [[_vector(10 * c + k) for k in range(4)] for c in range(3)]
    with pg_store.record() as rec:
        for c, vectors in enumerate(calls):
            rec.record("embedding", f"embed-{c}", {"texts": [str(c)]}, vectors)

    with pg_store.replay(rec.run_id) as player:
        for c, vectors in enumerate(calls):
            assert _bits(player.next("embedding", f"embed-{c}", {"texts": [str(c)]})) == \
                _bits(vectors)
    if not server_has_pgvector:
        assert pg_store.backend.has_pgvector is False  # type: ignore[attr-defined]
        with pytest.raises(StoreError, match="pgvector"):
            pg_store.search_embeddings(calls[0][0])
        return
    assert _vector_positions(pg_dsn, pg_schema, rec.run_id) == [
        (step, position, DIMS) for step in (1, 2, 3) for position in range(4)]
    for c, k in ((0, 0), (1, 3), (2, 1)):
        best = pg_store.search_embeddings(calls[c][k], limit=2)
        assert [(m.run_id, m.step, m.position, m.name) for m in best][:1] == [
            (rec.run_id, c + 1, k, f"embed-{c}")]
        assert best[0].distance == pytest.approx(0.0, abs=1e-3)  # float32 copy of float64
        assert best[1].distance > 1.0


def test_values_pgvector_cannot_hold_are_skipped_and_kept_exactly(
    pg_store: Store, pg_dsn: str, pg_schema: str, server_has_pgvector: bool
) -> None:
    fine = _vector(20)
    too_big = _vector(21)
    too_big[7] = 1e39  # finite, beyond float32
    just_above = _vector(22)
    just_above[0] = math.nextafter(FLOAT32_MAX, math.inf)  # rounds to FLT_MAX; still refused
    at_limit = _vector(23)
    at_limit[0] = -FLOAT32_MAX
    vectors = [fine, _odd_vector(24), too_big, just_above, at_limit, [0.5] * 16_001]
    with pg_store.record() as rec:
        rec.record("embedding", "embed", {"texts": ["x"]}, vectors)

    with pg_store.replay(rec.run_id) as player:
        again = player.next("embedding", "embed", {"texts": ["x"]})
    assert _bits(again) == _bits(vectors)
    if server_has_pgvector:
        assert _vector_positions(pg_dsn, pg_schema, rec.run_id) == [(1, 0, DIMS), (1, 4, DIMS)]


def test_vector_binary_is_pgvectors_wire_form_or_none() -> None:
    packed = vector_binary([1.5, -2, 0.1])
    assert packed is not None
    dims, unused, *values = struct.unpack(">hh3f", packed)
    assert (dims, unused) == (3, 0)
    assert values == [1.5, -2.0, struct.unpack("f", struct.pack("f", 0.1))[0]]
    refused: list[list[float]] = [
        [], [0.0] * 16_001, [math.nan], [1.0, math.inf], [math.inf, -math.inf], [1e39],
        [-math.nextafter(FLOAT32_MAX, math.inf)], [1e308, 1e308]]
    for vector in refused:
        assert vector_binary(vector) is None, vector
        assert vector_text(vector) is None, vector
    assert vector_binary([0.0] * 16_000) is not None
    assert vector_text([FLOAT32_MAX, 2]) == f"[{FLOAT32_MAX!r},2.0]"


# -- PostgreSQL: the rendered binary COPY -------------------------------------------------


def _tricky_run(store: Store) -> uuid.UUID:
    """More steps than one INSERT takes, so they go in with COPY."""
    with store.record(name="tricky") as rec:
        for n in range(SMALL_BATCH + 4):
            rec.record("tool", f"tool-{n % 3}", {"n": n, "text": TRICKY, "nul": f"a\x00{n}"},
                       {"text": TRICKY, "n": n, "pi": 3.25, "none": None, "deep": [[TRICKY]]},
                       duration_ms=n * 1.5)
        rec.record("embedding", "embed", {"texts": [TRICKY]}, [_vector(30), _odd_vector(31)])
    return rec.run_id


def test_copied_steps_with_tricky_text_round_trip_and_verify(
    pg_store: Store, pg_dsn: str, pg_schema: str, tmp_path: Path, server_has_pgvector: bool
) -> None:
    with open_store("memory:") as memory:
        run_id = _tricky_run(memory)
        original = memory.load_steps(run_id)
        export_run(memory, run_id, tmp_path / "tricky.jsonl")
    result = import_run(pg_store, tmp_path / "tricky.jsonl")  # one COPY batch of 13 steps
    assert result.steps == len(original) == SMALL_BATCH + 5

    assert pg_store.verify(run_id).ok
    loaded = pg_store.load_steps(run_id)
    fields = ("step", "kind", "name", "match_key", "path", "input", "output", "is_error",
              "started_at", "duration_ms", "checksum")
    assert [[getattr(s, f) for f in fields] for s in loaded] == \
        [[getattr(s, f) for f in fields] for s in original]
    with psycopg.connect(pg_dsn) as conn:  # the server parsed the JSON, not just kept bytes
        texts = conn.execute(sql.SQL(
            "SELECT output ->> 'text', output -> 'deep' -> 0 ->> 0 FROM {} "
            "WHERE run_id = %s AND step = 1").format(sql.Identifier(pg_schema, "run_log")),
            (run_id,)).fetchone()
    assert texts == (TRICKY, TRICKY)
    with pg_store.replay(run_id) as player:
        for n in range(SMALL_BATCH + 4):
            assert player.next("tool", f"tool-{n % 3}", {"n": n, "text": TRICKY,
                                                         "nul": f"a\x00{n}"})["text"] == TRICKY
        again = player.next("embedding", "embed", {"texts": [TRICKY]})
    assert _bits(again) == _bits([_vector(30), _odd_vector(31)])
    if server_has_pgvector:  # the odd vector has no pgvector copy
        assert _vector_positions(pg_dsn, pg_schema, run_id) == [(len(original), 0, DIMS)]


def _pending(run_id: uuid.UUID, n: int, *, name: str = "t",
             started_at: datetime | None = None) -> PendingStep:
    return PendingStep(
        run_id, n, "tool", name, f"k{n}", f"tool:{name}", _codec.dumps({"n": n}),
        _codec.dumps({"out": TRICKY}), n % 4 == 0,
        started_at or datetime(2024, 5, 1, tzinfo=timezone.utc) + timedelta(seconds=n),
        n / 8, f"c{n}")


def _new_run(backend: PostgresBackend) -> uuid.UUID:
    run = Run(run_id=uuid.uuid4(), started_at=datetime(2024, 5, 1, tzinfo=timezone.utc))
    backend.create_run(run)
    return run.run_id


def test_idempotent_copy_skips_stored_steps_and_vectors(
    backend: PostgresBackend, pg_dsn: str, pg_schema: str, server_has_pgvector: bool
) -> None:
    run_id = _new_run(backend)
    steps = [_pending(run_id, n) for n in range(1, 13)]
    vectors = [EmbeddingRow(run_id, n, 0, _vector(n)) for n in (2, 7)]
    backend.append(steps[:6], vectors[:1])
    backend.append(steps, vectors, idempotent=True)
    backend.append(steps, vectors, idempotent=True)

    loaded = backend.load_steps(run_id)
    assert [s.step for s in loaded] == list(range(1, 13))
    assert {s.output["out"] for s in loaded} == {TRICKY}
    assert [(s.is_error, s.duration_ms, s.started_at) for s in loaded] == [
        (n % 4 == 0, n / 8, datetime(2024, 5, 1, tzinfo=timezone.utc) + timedelta(seconds=n))
        for n in range(1, 13)]
    if server_has_pgvector:
        assert _vector_positions(pg_dsn, pg_schema, run_id) == [(2, 0, DIMS), (7, 0, DIMS)]


def test_naive_start_times_keep_the_servers_reading(backend: PostgresBackend,
                                                    pg_dsn: str) -> None:
    run_id = _new_run(backend)
    naive = datetime(2024, 5, 1, 12, 30, 15, 250)
    backend.append([_pending(run_id, n, started_at=naive) for n in range(1, 12)])

    with psycopg.connect(pg_dsn) as conn:  # what PostgreSQL makes of a naive timestamp
        row = conn.execute("SELECT %s::timestamptz", (naive,)).fetchone()
    assert row is not None
    assert {s.started_at for s in backend.load_steps(run_id)} == {row[0]}


def test_a_value_binary_copy_cannot_hold_is_a_permanent_error(backend: PostgresBackend) -> None:
    run_id = _new_run(backend)
    batch = [_pending(run_id, n) for n in range(1, 11)] + [_pending(run_id, 2**31)]
    with pytest.raises(StoreError, match="out of its column's range") as caught:
        backend.append(batch)
    assert backend.is_permanent(caught.value)
    assert backend.load_steps(run_id) == []


def test_the_sink_isolates_a_row_the_server_rejects_in_a_copy_batch(
    backend: PostgresBackend, pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    reject_rows(pg_dsn, pg_schema, "run_log", "poison", "data_exception")
    run_id = _new_run(backend)
    steps = [_pending(run_id, n, name="poison" if n == 4 else "t") for n in range(1, 13)]
    sink = Sink(backend, Spool(tmp_path / "spool"), retry_seconds=0.1)

    sink.write_rows(steps, [EmbeddingRow(run_id, 6, 0, _vector(6))])

    assert [s.step for s in backend.load_steps(run_id)] == [n for n in range(1, 13) if n != 4]
    assert sink.lost_steps == {run_id: 1}
    assert not list((tmp_path / "spool").glob("*.jsonl"))


# -- the fast path builds what the codec builds -------------------------------------------


class _Float(float):
    """A float subclass (like numpy's float64): a vector, but not packed by the codec."""


_floats = st.floats() | st.sampled_from([-0.0, 5e-324, math.inf, math.nan, 1e16])
_items = _floats | st.integers(-5, 5) | st.builds(_Float, st.floats(allow_nan=False))


@settings(max_examples=150, deadline=None)
@given(st.one_of(
    st.lists(_floats, max_size=40),
    st.lists(st.lists(_floats, min_size=30, max_size=34), max_size=3),
    st.lists(st.lists(_items, min_size=30, max_size=34), max_size=3),
    st.lists(_items, min_size=30, max_size=34),
    st.lists(_floats, min_size=32, max_size=33).map(tuple),
    st.lists(st.lists(_floats, min_size=32, max_size=33).map(tuple), min_size=1, max_size=2),
))
def test_embedding_output_is_the_codecs_tree(output: Any) -> None:
    result = embedding_output(output)
    vectors = embedding_vectors(output)
    if result is None:
        assert vectors == []
        return
    stored, found = result
    assert stored == _codec.encode(output)  # the same tree, so the same bytes and checksum
    assert _codec.canonical_bytes(stored) == _codec.canonical_bytes(_codec.encode(output))
    assert _bits(found) == _bits(vectors)
    expected = [list(output)] if output and isinstance(output[0], float) else \
        [list(v) for v in output]
    assert _bits(found) == _bits(expected)
    mine = [output] if output and isinstance(output[0], float) else list(output)
    assert all(v is not w for v, w in zip(found, mine, strict=True))  # copies of the caller's
    assert _bits(embedding_vectors(_codec.decode(stored))) == _bits(expected)


def test_redaction_never_rewrites_a_packed_vector(any_store: Store) -> None:
    """Base64 can spell a secret by chance; the bytes of a vector are not text to redact."""
    text = "+AKIAIOSFODNN7EXAMPLE/"  # an AWS access key id between two non-alphanumerics
    text += "A" * (DIMS * 8 * 4 // 3 - len(text))
    assert any_store.redaction is not None
    assert any_store.redaction.redact_text(text) != text  # as a string it would be redacted
    vector = list(struct.unpack(f"<{DIMS}d", base64.b64decode(text)))
    with any_store.record() as rec:
        rec.record("embedding", "embed", {"texts": ["key?"]}, [vector])

    (stored,) = any_store.load_steps(rec.run_id)
    assert stored.output == [{"__ar__": "floats", "f64le": text}]
    with any_store.replay(rec.run_id) as player:
        assert _bits(player.next("embedding", "embed", {"texts": ["key?"]})) == _bits([vector])


@pytest.mark.parametrize("count", [1, SMALL_BATCH + 2], ids=["insert", "copy"])
def test_the_compact_input_form_is_what_goes_into_the_input_column(
    backend: PostgresBackend, pg_dsn: str, pg_schema: str, count: int
) -> None:
    run_id = _new_run(backend)
    steps = [_pending(run_id, n) for n in range(1, count + 1)]
    steps[0].stored_input_json = b'{"compact":"\\\\ \\"form\\""}'
    backend.append(steps)

    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(sql.SQL("SELECT step, input::text FROM {} WHERE run_id = %s "
                                    "ORDER BY step").format(sql.Identifier(pg_schema, "run_log")),
                            (run_id,)).fetchall()
    assert rows == [(1, '{"compact": "\\\\ \\"form\\""}')] + [
        (n, f'{{"n": {n}}}') for n in range(2, count + 1)]
