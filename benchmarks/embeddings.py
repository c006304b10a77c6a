"""Recording embedding vectors: exact float64 in the step, plus a pgvector copy per vector.

LangChain's `RecordingEmbeddings` wraps an embeddings model that returns pre-computed
768-dimension float64 vectors (16 texts per `embed_documents` call); the time runs from the
first call until every row and vector is committed; every repeat embeds texts new to the
recorder (its redaction memo never saw them, as with an agent's new documents). Baseline: raw
COPY of the same step rows and pgvector rows, pre-built. Afterwards the run is replayed with
`ReplayEmbeddings` and every vector compared bit for bit.
"""

from __future__ import annotations

import array
import time
from typing import Any

import psycopg
from psycopg import sql

from agentreplay_core import Store
from benchmarks._baselines import create_raw_tables, raw_copy, step_rows, vector_rows
from benchmarks._context import Bench
from benchmarks._db import execute, fresh_store
from benchmarks._payloads import fresh, text
from benchmarks._report import Target
from benchmarks._timing import interleave

SCHEMA = "bench_embeddings"
DIMS, PER_CALL = 768, 16
RATE_LIMIT = 3_000.0  # vectors/s


def _bits(vectors: list[list[float]]) -> bytes:
    return b"".join(array.array("d", v).tobytes() for v in vectors)


def run(bench: Bench) -> list[Target]:
    import numpy as np
    from langchain_core.embeddings import Embeddings

    from agentreplay_langchain import RecordingEmbeddings, ReplayEmbeddings

    report = bench.report
    calls = bench.size(40, 400)
    count = calls * PER_CALL

    def batches(start: int) -> list[list[str]]:
        return [[text(start + c * PER_CALL + k, 200) for k in range(PER_CALL)]
                for c in range(calls)]

    texts = batches(0)
    vectors: list[list[list[float]]] = (
        np.random.default_rng(7).standard_normal((calls, PER_CALL, DIMS)).tolist())
    by_first: dict[str, list[list[float]]] = {}
    report.heading("embeddings: exact vectors plus their pgvector copy",
                   f"{count:,} vectors of {DIMS} float64 per repeat, {PER_CALL} per call.")

    class Precomputed(Embeddings):
        """The "model": answers with the vectors made above, at no cost."""

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return by_first[texts[0]]

        def embed_query(self, text: str) -> list[float]:
            raise NotImplementedError("only embed_documents is benchmarked")

    last: list[Any] = []

    def agentreplay(store: Store) -> float:
        # texts new to the recorder in every repeat, as an agent's are (see `_payloads.fresh`)
        recorded = batches(fresh(count))
        by_first.update((batch[0], found) for batch, found in zip(recorded, vectors, strict=True))
        with store.record(name="embeddings") as rec:
            model = RecordingEmbeddings(Precomputed(), rec)
            t0 = time.perf_counter()
            for batch in recorded:
                model.embed_documents(batch)
            if not rec.flush(timeout=600):
                raise RuntimeError("the writer did not get the vectors written within 600 s")
            elapsed = time.perf_counter() - t0
        last[:] = [rec.run_id, recorded]
        return elapsed / count

    with fresh_store(bench.dsn, SCHEMA) as store, \
            psycopg.connect(bench.dsn, autocommit=True) as conn:
        create_raw_tables(conn, SCHEMA)
        has_pgvector = bool(getattr(store.backend, "has_pgvector", False))
        requests = [({"mode": "documents", "texts": batch}, found)
                    for batch, found in zip(texts, vectors, strict=True)]

        def raw() -> float:
            steps = step_rows(requests, name="embeddings", kind="embedding")
            rows = vector_rows(steps, vectors) if has_pgvector else []
            return raw_copy(conn, SCHEMA, steps, rows) / count

        samples = interleave({"raw COPY of pre-built rows": raw,
                              "RecordingEmbeddings": lambda: agentreplay(store)},
                             bench.size(3, 5))
        with store.replay(last[0]) as player:
            replay = ReplayEmbeddings(player=player)
            same = sum(_bits(replay.embed_documents(batch)) == _bits(found)
                       for batch, found in zip(last[1], vectors, strict=True))
        copies = execute(bench.dsn, sql.SQL("SELECT count(*) FROM {} WHERE run_id = %s").format(
            sql.Identifier(SCHEMA, "embeddings")), (last[0],))[0][0] if has_pgvector else 0
    report.timing("Vectors until durable", samples, baseline="raw COPY of pre-built rows",
                  per="vector", rate=True)
    rate = 1 / samples["RecordingEmbeddings"].median
    complete = has_pgvector and copies == count  # the rate counts only with every copy made
    return [
        Target("Embeddings: vectors/s recorded exactly plus pgvector copy",
               rate if complete else None, RATE_LIMIT, " vectors/s", higher_is_better=True,
               detail=f"{copies:,}/{count:,} pgvector rows" if has_pgvector
               else "no pgvector on this server"),
        Target("Embeddings: replayed vectors bit-identical", 100 * same / calls, 100.0, "%",
               higher_is_better=True, detail=f"{same * PER_CALL:,}/{count:,} vectors"),
    ]
