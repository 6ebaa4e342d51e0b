"""Keyword (BM25) search latency and per-change upkeep at scale (issue 15).

    .venv/bin/python benchmarks/keyword_latency.py [--chunks 10000 100000] [--queries 200] [--json]

Builds synthetic warehouses through the project's Warehouse module: `chunks` rows of ~150 words drawn from a
Zipf-distributed 60,000-word vocabulary (like prose: a few very common words, a long tail), in sessions of 20
chunks over 50 projects, then the keyword index from scratch. Measures the client's `bm25_ranking` (3-word
queries mixing a common and rarer words; unfiltered and filtered to one project) and the cost of one change: a
chunk appended to one session and re-indexed in its transaction (`sync_keyword_index`).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sessionmem_pipeline.client import Filters, SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.warehouse import Warehouse, publish_snapshot
from search_latency import measure_sizes, vocabulary, zipf_weights  # noqa: E402  (benchmarks/ is the script's folder)

WORDS_PER_CHUNK = 150
CHUNKS_PER_SESSION = 20
PROJECTS = 50


def chunk_rows(words: np.ndarray, weights: np.ndarray, start: int, count: int, rng: np.random.Generator) -> list[dict]:
    picks = rng.choice(len(words), size=(count, WORDS_PER_CHUNK), p=weights)
    rows = []
    for offset, row in enumerate(picks):
        number = start + offset
        session = f"s{number // CHUNKS_PER_SESSION}"
        content = " ".join(words[row])
        rows.append(
            {
                "chunk_id": f"{session}:{number % CHUNKS_PER_SESSION}:h",
                "session_id": session,
                "project": f"project-{(number // CHUNKS_PER_SESSION) % PROJECTS}",
                "chunk_index": number % CHUNKS_PER_SESSION,
                "content": content,
                "context_content": f"Project project-{(number // CHUNKS_PER_SESSION) % PROJECTS}.\n\n{content}",
            }
        )
    return rows


def build(path: Path, count: int, words: np.ndarray, weights: np.ndarray) -> float:
    rng = np.random.default_rng(5)
    with Warehouse(path) as wh:
        with wh.transaction():
            for start in range(0, count, 10_000):
                wh.insert("chunks", chunk_rows(words, weights, start, min(10_000, count - start), rng))
        started = time.perf_counter()
        with wh.transaction():
            wh.sync_keyword_index("chunks")
        wh.compact_keyword_index(force=True)
        wh.checkpoint()
        return time.perf_counter() - started


def append_seconds(path: Path, count: int, words: np.ndarray, weights: np.ndarray, changes: int = 10) -> list[float]:
    """One chunk appended to an existing session, with its keyword-index upkeep, in one transaction."""
    rng = np.random.default_rng(9)
    timings = []
    with Warehouse(path) as wh:
        for change in range(changes):
            row = chunk_rows(words, weights, count + change * CHUNKS_PER_SESSION, 1, rng)[0]
            session = f"s{change}"
            row.update(session_id=session, chunk_id=f"{session}:new{change}:h", chunk_index=CHUNKS_PER_SESSION + change)
            started = time.perf_counter()
            with wh.transaction():
                wh.insert("chunks", [row])
                wh.sync_keyword_index("chunks", [session])
            timings.append(time.perf_counter() - started)
        wh.compact_keyword_index()
    return timings


def measure(path: Path, count: int, queries: int) -> list[dict]:
    rng = np.random.default_rng(11)
    words = vocabulary(rng)
    weights = zipf_weights()
    build_seconds = build(path, count, words, weights)
    appends = append_seconds(path, count, words, weights)
    publish_snapshot(path)  # what readers open
    settings = load_settings(None, {"warehouse": str(path)}, env={}, cwd=path.parent, home=path.parent)
    memory = SessionMemory(settings=settings)
    texts = [f"{words[rng.integers(0, 50)]} {words[rng.integers(50, 5000)]} {words[rng.integers(500, 30000)]}"
             for _ in range(queries)]
    rows = []
    for label, filters in (("unfiltered", Filters()), ("project (1 of 50)", Filters(project="project-7"))):
        memory.bm25_ranking(texts[0], filters)  # warm the connection
        latencies, cpu, found = [], [], []
        for text in texts:
            started, started_cpu = time.perf_counter(), time.process_time()
            found.append(len(memory.bm25_ranking(text, filters)))
            latencies.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - started_cpu) * 1000)
        rows.append(
            {
                "chunks": count,
                "filter": label,
                "bm25_p50_ms": round(statistics.median(latencies), 1),
                "bm25_p95_ms": round(float(np.percentile(latencies, 95)), 1),
                "bm25_cpu_p95_ms": round(float(np.percentile(cpu, 95)), 1),
                "mean_hits": round(statistics.fmean(found), 1),
                "append_p50_ms": round(statistics.median(appends) * 1000, 1),
                "build_s": round(build_seconds, 1),
            }
        )
    memory.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    rows = measure_sizes(__doc__.splitlines()[0], measure, 200, argv)
    if rows is None:
        return 0
    header = list(rows[0])
    print("  ".join(f"{h:>18}" for h in header))
    for row in rows:
        print("  ".join(f"{row[h]!s:>18}" for h in header))
    print("bm25 = SessionMemory.bm25_ranking (150 candidates), wall and CPU time (all threads: what a shared, loaded")
    print("machine cannot inflate); append = one chunk + its keyword-index upkeep, one transaction")
    return 0


if __name__ == "__main__":
    sys.exit(main())
