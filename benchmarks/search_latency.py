"""Search latency at scale (issue 6): the client's vector query plans against an exact scan, and BM25.

    .venv/bin/python benchmarks/search_latency.py [--chunks 10000 100000] [--queries 100] [--json]

Builds synthetic warehouses through the project's Warehouse module: `chunks` rows with realistic metadata (50
projects, speakers, roles, topics, ~20% decisions, a year of timestamps) and `chunk_embeddings` with low-rank,
topic-clustered 384-d vectors written straight in (not embedded by the model). Queries are stored vectors
perturbed with noise. Latency excludes the query embedding (a fixed-vector embedder stands in for the model).
Recall@10 of each plan is measured against an exact scan over the same filtered rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from sessionmem_pipeline.client import Filters, SessionMemory, vector_literal
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.warehouse import VECTOR_DELTA, Warehouse, publish_snapshot

DIMENSIONS = 384
LATENT = 48
TOPICS = 200
MODEL = "synthetic:low-rank-384"
START = datetime(2025, 6, 1, tzinfo=UTC)


class FixedQueryEmbedder:
    """Stands in for the model so latency excludes embedding: returns the vector the benchmark set."""

    model_id = MODEL
    dimensions = DIMENSIONS

    def __init__(self) -> None:
        self.vector = np.zeros(DIMENSIONS, dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vector for _ in texts])


def synthetic_vectors(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Low-rank vectors clustered by topic (like sentence embeddings), L2-normalized; and each row's topic."""
    basis = rng.normal(size=(LATENT, DIMENSIONS)).astype(np.float32)
    centers = rng.normal(size=(TOPICS, LATENT)).astype(np.float32)
    topic = rng.integers(0, TOPICS, count)
    latent = centers[topic] + 0.6 * rng.normal(size=(count, LATENT)).astype(np.float32)
    vectors = latent @ basis + 0.3 * rng.normal(size=(count, DIMENSIONS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True), topic


def build(path: Path, count: int, seed: int = 7) -> tuple[np.ndarray, float]:
    """A warehouse of `count` chunks; returns the vectors and the seconds the HNSW index took to build."""
    rng = np.random.default_rng(seed)
    vectors, topic = synthetic_vectors(count, rng)
    sessions = np.arange(count) // 40
    chunk_ids = [f"s{s}:{i}:{i:016x}" for i, s in enumerate(sessions)]
    speakers = ["Jason", "Max", "Ana", "Wei"]
    chunks = pa.table(
        {
            "chunk_id": chunk_ids,
            "session_id": [f"s{s}" for s in sessions],
            "project": [f"project-{s % 50}" for s in sessions],
            "chunk_index": (np.arange(count) % 40).astype(np.int32),
            "message_ids": [[f"m{i}a", f"m{i}b"] for i in range(count)],
            "ts_start": [START + timedelta(minutes=int(i) * 5) for i in range(count)],
            "speakers": [[speakers[s % 4], "Max"] for s in sessions],
            "roles": [["user", "assistant"]] * count,
            "topics": [[f"topic-{t}"] for t in topic],
            "has_decision": rng.random(count) < 0.2,
            "has_action": rng.random(count) < 0.3,
            "token_count": np.full(count, 200, dtype=np.int32),
            "content": [f"chunk {i} about topic {t} with words w{t % 97} x{i % 131}" for i, t in enumerate(topic)],
            "context": [""] * count,
        }
    )
    embeddings = pa.table(
        {
            "chunk_id": chunk_ids,
            "session_id": [f"s{s}" for s in sessions],
            "text_hash": ["h"] * count,
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIMENSIONS),
        }
    )
    with Warehouse(path) as wh:
        wh.ensure_embedding_table(MODEL, DIMENSIONS)
        with wh.transaction():
            wh.insert("chunks", chunks)
            wh.insert(VECTOR_DELTA, embeddings)
        started = time.perf_counter()
        assert wh.maintain_vector_index() == "rebuilt"  # the first index: one HNSW build over the bulk insert
        build_seconds = time.perf_counter() - started
        with wh.transaction():
            wh.sync_keyword_index("chunks")
        wh.compact_keyword_index(force=True)
        wh.checkpoint()
    publish_snapshot(path)
    return vectors, build_seconds


def exact(memory: SessionMemory, vector: np.ndarray, filters: Filters, limit: int = 10) -> list[str]:
    where, params = filters.chunk_sql()
    rows = memory.connection().execute(
        f"""SELECT c.chunk_id FROM chunks c JOIN chunk_embeddings e USING (chunk_id) WHERE {where}
            ORDER BY array_cosine_distance(e.embedding, ?::FLOAT[{DIMENSIONS}]) + 0, c.chunk_id LIMIT ?""",
        [*params, vector_literal(vector), limit],
    ).fetchall()
    return [r[0] for r in rows]


FILTERS = {
    "unfiltered": Filters(),
    "project (1 of 50)": Filters(project="project-7"),
    "has_decision=false (80%)": Filters(has_decision=False),
    "date range (1 month)": Filters(after="2025-07-01", before="2025-08-01"),
}


def measure(path: Path, count: int, queries: int) -> list[dict]:
    vectors, build_seconds = build(path, count)
    settings = load_settings(None, {"warehouse": str(path)}, env={}, cwd=path.parent, home=path.parent)
    memory = SessionMemory(settings=settings)
    embedder = FixedQueryEmbedder()
    memory._embedder = embedder
    rng = np.random.default_rng(11)
    picks = rng.integers(0, count, queries)
    rows = []
    for label, filters in FILTERS.items():
        fast, slow, recalls, bm25 = [], [], [], []
        for pick in picks:
            query = vectors[pick] + 0.05 * rng.normal(size=DIMENSIONS).astype(np.float32)
            embedder.vector = query / np.linalg.norm(query)
            started = time.perf_counter()
            planned = list(memory.vector_ranking("q", filters, 10))
            fast.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            truth = exact(memory, embedder.vector, filters)
            slow.append((time.perf_counter() - started) * 1000)
            recalls.append(len(set(planned) & set(truth)) / len(truth) if truth else 1.0)
            started = time.perf_counter()
            memory.bm25_ranking(f"topic w{pick % 97}", filters, 10)
            bm25.append((time.perf_counter() - started) * 1000)
        rows.append(
            {
                "chunks": count,
                "filter": label,
                "plan_p50_ms": round(statistics.median(fast), 1),
                "plan_p95_ms": round(float(np.percentile(fast, 95)), 1),
                "exact_p50_ms": round(statistics.median(slow), 1),
                "exact_p95_ms": round(float(np.percentile(slow, 95)), 1),
                "speedup_p95": round(float(np.percentile(slow, 95)) / float(np.percentile(fast, 95)), 2),
                "recall_at_10": round(statistics.fmean(recalls), 3),
                "bm25_p95_ms": round(float(np.percentile(bm25, 95)), 1),
                "hnsw_build_s": round(build_seconds, 1),
            }
        )
    memory.close()
    return rows


def measure_sizes(
    description: str, measure_one: Callable[[Path, int, int], list[dict]], queries: int, argv: Sequence[str] | None
) -> list[dict] | None:
    """`--chunks` sizes, each measured in a fresh temporary warehouse; None when `--json` printed them already."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=queries)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for count in args.chunks:
        with tempfile.TemporaryDirectory() as folder:
            rows += measure_one(Path(folder) / "bench.duckdb", count, args.queries)
    if args.json:
        print(json.dumps(rows, indent=2))
        return None
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    rows = measure_sizes(__doc__.splitlines()[0], measure, 100, argv)
    if rows is None:
        return 0
    header = ["chunks", "filter", "plan_p50_ms", "plan_p95_ms", "exact_p50_ms", "exact_p95_ms", "speedup_p95",
              "recall_at_10", "bm25_p95_ms", "hnsw_build_s"]
    print("  ".join(f"{h:>14}" if i != 1 else f"{h:<26}" for i, h in enumerate(header)))
    for row in rows:
        print("  ".join(f"{row[h]!s:>14}" if i != 1 else f"{row[h]:<26}" for i, h in enumerate(header)))
    print("plan = the client's vector query (HNSW unfiltered; over-fetch or exact scan filtered); exact = full scan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
