"""Search latency at scale (issues 6, 20): the full hybrid `search()` and its parts, and the cold CLI and hook.

    .venv/bin/python benchmarks/search_latency.py [--chunks 100000 1000000] [--queries 100] [--keep DIR] [--json]

Builds synthetic warehouses through the project's Warehouse module: sessions of 40 chunks over 50 projects with
realistic metadata (speakers, roles, topics, ~20% decisions, a chunk every 5 minutes), two messages per chunk,
chunk text of WORDS_PER_CHUNK words drawn from a Zipf-distributed vocabulary (like prose: a few very common words,
a long tail) and its keyword index, and low-rank, topic-clustered 384-d vectors written straight in (not embedded
by the model) under the packaged model's name, so the CLI runs against it as against a real warehouse.

Per size and filter it prints p50/p95 of `SessionMemory.search` in wall and CPU (process) time, excluding the
query embedding (a fixed-vector embedder stands in for the model; the model's own time is printed apart), and of
its parts: BM25 (`bm25_ranking`), vectors (`vector_ranking`), fusion and the fetch of the results shown. Queries
are 3 words (a common and two rarer ones) and a stored vector perturbed with noise. Recall@10 of the vector plan
is measured against an exact scan over the same filtered rows. Then the wall time of a cold `sessionmem search`
and `sessionmem hook session-start` (new processes, the packaged model loaded where the command needs it); the
hook also on the bundled samples indexed beside the warehouse (`hook_recap`: the webshop session's real recap,
longer than the hook's budget; the synthetic sessions recap to almost nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from sessionmem_pipeline.client import Filters, SessionMemory, fuse_scores, vector_literal
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.providers.embedders import MINILM_MODEL_ID, LocalMiniLMEmbedder
from sessionmem_pipeline.warehouse import VECTOR_DELTA, Warehouse, publish_snapshot

DIMENSIONS = 384
LATENT = 48
TOPICS = 200
VOCABULARY = 60_000
WORDS_PER_CHUNK = 100
CHUNKS_PER_SESSION = 40
PROJECTS = 50
BATCH = 50_000
START = datetime(2025, 6, 1, tzinfo=UTC)
SPEAKERS = ["Jason", "Max", "Ana", "Wei"]
SAMPLES = Path(__file__).resolve().parent.parent / "samples"


class FixedQueryEmbedder:
    """Stands in for the model so latency excludes embedding: returns the vector the benchmark set."""

    model_id = MINILM_MODEL_ID
    dimensions = DIMENSIONS

    def __init__(self) -> None:
        self.vector = np.zeros(DIMENSIONS, dtype=np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vector for _ in texts])


def vocabulary(rng: np.random.Generator) -> np.ndarray:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return np.array(["".join(rng.choice(letters, rng.integers(3, 10))) for _ in range(VOCABULARY)])


def zipf_weights() -> np.ndarray:
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** 1.05
    return weights / weights.sum()


def synthetic_vectors(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Low-rank vectors clustered by topic (like sentence embeddings), L2-normalized; and each row's topic."""
    basis = rng.normal(size=(LATENT, DIMENSIONS)).astype(np.float32)
    centers = rng.normal(size=(TOPICS, LATENT)).astype(np.float32)
    topic = rng.integers(0, TOPICS, count)
    latent = centers[topic] + 0.6 * rng.normal(size=(count, LATENT)).astype(np.float32)
    vectors = latent @ basis + 0.3 * rng.normal(size=(count, DIMENSIONS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True), topic


def _batch_tables(
    start: int, count: int, vectors: np.ndarray, topic: np.ndarray, words: np.ndarray, rng: np.random.Generator
) -> dict[str, pa.Table]:
    """Chunks, their vectors, two messages each, and the sessions that start in this batch."""
    numbers = np.arange(start, start + count)
    sessions = numbers // CHUNKS_PER_SESSION
    session_ids = [f"s{s}" for s in sessions]
    projects = [f"project-{s % PROJECTS}" for s in sessions]
    chunk_ids = [f"s{s}:{n % CHUNKS_PER_SESSION}:{n:016x}" for s, n in zip(sessions, numbers, strict=True)]
    picks = rng.choice(len(words), size=(count, WORDS_PER_CHUNK), p=zipf_weights())
    content = [" ".join(row) for row in words[picks]]
    stamps = [START + timedelta(minutes=int(n) * 5) for n in numbers]
    chunks = pa.table(
        {
            "chunk_id": chunk_ids,
            "session_id": session_ids,
            "project": projects,
            "chunk_index": (numbers % CHUNKS_PER_SESSION).astype(np.int32),
            "message_ids": [[f"m{n}a", f"m{n}b"] for n in numbers],
            "ts_start": stamps,
            "ts_end": stamps,
            "speakers": [[SPEAKERS[s % 4], "Max"] for s in sessions],
            "roles": [["user", "assistant"]] * count,
            "topics": [[f"topic-{t}"] for t in topic[numbers]],
            "has_decision": rng.random(count) < 0.2,
            "has_action": rng.random(count) < 0.3,
            "continued": np.zeros(count, dtype=bool),
            "token_count": np.full(count, WORDS_PER_CHUNK, dtype=np.int32),
            "content": content,
            "context": [f"Project {p}." for p in projects],
            "context_content": [f"Project {p}.\n\n{c}" for p, c in zip(projects, content, strict=True)],
        }
    )
    embeddings = pa.table(
        {
            "chunk_id": chunk_ids,
            "session_id": session_ids,
            "text_hash": ["h"] * count,
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors[numbers].ravel()), DIMENSIONS),
        }
    )
    halves = [text.split(" ", WORDS_PER_CHUNK // 2) for text in content]
    messages = pa.table(
        {
            "session_id": [sid for sid in session_ids for _ in "ab"],
            "seq": [int(n % CHUNKS_PER_SESSION) * 2 + k for n in numbers for k in (0, 1)],
            "message_id": [f"m{n}{side}" for n in numbers for side in "ab"],
            "role": ["user", "assistant"] * count,
            "kind": ["text", "text"] * count,
            "speaker": [name for s in sessions for name in (SPEAKERS[s % 4], "Max")],
            "timestamp": [moment for moment in stamps for _ in "ab"],
            "text": [part for parts in halves for part in (" ".join(parts[:-1]), parts[-1])],
        }
    )
    firsts = numbers[numbers % CHUNKS_PER_SESSION == 0]
    session_rows = pa.table(
        {
            "session_id": [f"s{n // CHUNKS_PER_SESSION}" for n in firsts],
            "project": [f"project-{(n // CHUNKS_PER_SESSION) % PROJECTS}" for n in firsts],
            "source_path": [f"/sessions/s{n // CHUNKS_PER_SESSION}.jsonl" for n in firsts],
            "format": ["claude_code"] * len(firsts),
            "cwd": [f"/home/me/project-{(n // CHUNKS_PER_SESSION) % PROJECTS}" for n in firsts],
            "started_at": [START + timedelta(minutes=int(n) * 5) for n in firsts],
            "ended_at": [START + timedelta(minutes=int(n + CHUNKS_PER_SESSION) * 5) for n in firsts],
            "message_count": [CHUNKS_PER_SESSION * 2] * len(firsts),
        }
    )
    return {"chunks": chunks, VECTOR_DELTA: embeddings, "messages": messages, "sessions": session_rows}


def build(path: Path, count: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """A warehouse of `count` chunks (kept when `path` exists: the inputs are regenerated from the seed);
    returns the vectors, the vocabulary, and seconds per build step."""
    rng = np.random.default_rng(seed)
    vectors, topic = synthetic_vectors(count, rng)
    words = vocabulary(rng)
    seconds: dict[str, float] = {}
    if path.exists():
        return vectors, words, seconds
    started = time.perf_counter()
    with Warehouse(path) as wh:
        wh.ensure_embedding_table(MINILM_MODEL_ID, DIMENSIONS)
        with wh.transaction():
            for start in range(0, count, BATCH):
                for table, rows in _batch_tables(start, min(BATCH, count - start), vectors, topic, words, rng).items():
                    wh.insert(table, rows)
        seconds["rows_s"] = time.perf_counter() - started
        started = time.perf_counter()
        assert wh.maintain_vector_index() == "rebuilt"  # the first index: one HNSW build over the bulk insert
        seconds["hnsw_s"] = time.perf_counter() - started
        started = time.perf_counter()
        with wh.transaction():
            wh.sync_keyword_index("chunks")
        wh.compact_keyword_index(force=True)
        seconds["keywords_s"] = time.perf_counter() - started
        wh.checkpoint()
    publish_snapshot(path)
    return vectors, words, seconds


def exact(memory: SessionMemory, vector: np.ndarray, filters: Filters, limit: int = 10) -> list[str]:
    where, params = filters.chunk_sql()
    rows = memory.connection().execute(
        f"""SELECT c.chunk_id FROM chunks c JOIN chunk_embeddings e USING (chunk_id) WHERE {where}
            ORDER BY array_cosine_distance(e.embedding, ?::FLOAT[{DIMENSIONS}]) + 0, c.chunk_id LIMIT ?""",
        [*params, vector_literal(vector), limit],
    ).fetchall()
    return [r[0] for r in rows]


FILTERS = {
    "unfiltered": {},
    "project (1 of 50)": {"project": "project-7"},
    "has_decision (20%)": {"has_decision": True},
    "has_decision=false (80%)": {"has_decision": False},
    "date range (1 month)": {"after": "2025-07-01", "before": "2025-08-01"},
}


class Clock:
    """Wall and CPU (process: every thread, what a shared machine's load does not inflate) milliseconds."""

    def __init__(self) -> None:
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}

    def time(self, part: str, call: Callable[[], object]) -> object:
        wall, cpu = time.perf_counter(), time.process_time()
        result = call()
        self.wall.setdefault(part, []).append((time.perf_counter() - wall) * 1000)
        self.cpu.setdefault(part, []).append((time.process_time() - cpu) * 1000)
        return result

    def row(self) -> dict[str, float]:
        row = {}
        for part, times in self.wall.items():
            row[f"{part}_p50"] = round(statistics.median(times), 1)
            row[f"{part}_p95"] = round(float(np.percentile(times, 95)), 1)
            row[f"{part}_cpu_p50"] = round(statistics.median(self.cpu[part]), 1)
            row[f"{part}_cpu_p95"] = round(float(np.percentile(self.cpu[part], 95)), 1)
        return row


def query_embedding_ms(queries: Sequence[str]) -> dict[str, float]:
    """The packaged model embedding one query (loaded once first), wall and CPU."""
    embedder = LocalMiniLMEmbedder()
    embedder.load()
    clock = Clock()
    for text in queries:
        clock.time("embed", lambda text=text: embedder.embed([text]))
    return clock.row()


def cold_commands(path: Path) -> dict[str, float]:
    """Wall and CPU (user + system) seconds of a new `sessionmem search` and `sessionmem hook session-start`
    process (median of 3, after an untimed run). Bytecode is cached as for an installed package (in a folder
    beside the warehouse): with PYTHONDONTWRITEBYTECODE every run would compile the modules again (~0.3 s)."""
    home = path.parent
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "PYTHONPYCACHEPREFIX": str(home / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cli = [sys.executable, "-m", "sessionmem_pipeline.cli"]
    samples = home / "samples" / "w.duckdb"  # brought up to date by the code measured (untimed)
    index_sources(load_settings(SAMPLES / "sessionmem.toml", {"warehouse": str(samples)}, env={}))
    runs = {
        "cli_search_s": ([*cli, "search", "retry queue decision", "--warehouse", str(path)], None),
        "cli_search_filtered_s": ([*cli, "search", "retry queue", "--has-decision", "--warehouse", str(path)], None),
        "hook_s": ([*cli, "hook", "session-start", "--warehouse", str(path)], '{"cwd": "/home/me/project-7"}'),
        "hook_recap_s": ([*cli, "hook", "session-start", "--warehouse", str(samples)], '{"cwd": "/home/dev/webshop"}'),
    }
    timings = {}
    for name, (command, stdin) in runs.items():
        subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, cwd=home)
        seconds, cpu = [], []
        for _ in range(3):
            before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            done = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, cwd=home)
            seconds.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            if done.returncode != 0 or not done.stdout.strip():
                raise RuntimeError(f"{' '.join(command)} failed: {done.stderr or 'no output'}")
        timings[name] = round(statistics.median(seconds), 2)
        timings[name.removesuffix("_s") + "_cpu_s"] = round(statistics.median(cpu), 2)
    return timings


def measure(path: Path, count: int, queries: int) -> list[dict]:
    vectors, words, seconds = build(path, count)
    settings = load_settings(None, {"warehouse": str(path)}, env={}, cwd=path.parent, home=path.parent)
    memory = SessionMemory(settings=settings)
    embedder = FixedQueryEmbedder()
    memory._embedder = embedder
    rng = np.random.default_rng(11)
    picks = rng.integers(0, count, queries)
    texts = [f"{words[rng.integers(0, 50)]} {words[rng.integers(50, 5000)]} {words[rng.integers(500, 30000)]}"
             for _ in range(queries)]
    query_vectors = [vectors[p] + 0.05 * rng.normal(size=DIMENSIONS).astype(np.float32) for p in picks]
    weights = {"bm25_weight": settings["search.bm25_weight"], "vector_weight": settings["search.vector_weight"]}
    rows = []
    for label, arguments in FILTERS.items():
        filters = memory._filters(**arguments)
        for _ in range(2):  # warm the connection, and what a snapshot builds once from its second search on
            memory.search(texts[0], **arguments)  # (the HNSW index, the kept key and filter tables: client.py)
        clock, recalls = Clock(), []
        for text, query in zip(texts, query_vectors, strict=True):
            embedder.vector = query / np.linalg.norm(query)
            clock.time("search", lambda: memory.search(text, **arguments))
            bm25 = clock.time("bm25", lambda: memory.bm25_ranking(text, filters))
            nearest = clock.time("vectors", lambda: memory.vector_ranking(text, filters))
            clock.time("fuse_fetch", lambda: memory._top_results(fuse_scores(bm25, nearest, **weights), 5))
            truth = exact(memory, embedder.vector, filters)
            planned = list(memory.vector_ranking(text, filters, 10))
            recalls.append(len(set(planned) & set(truth)) / len(truth) if truth else 1.0)
        rows.append({"chunks": count, "filter": label, **clock.row(),
                     "vector_recall_at_10": round(statistics.fmean(recalls), 3),
                     **{k: round(v, 1) for k, v in seconds.items()}})
    memory.close()
    extras = {"chunks": count, **query_embedding_ms(texts[:30]), **cold_commands(path)}
    return rows + [extras]


def measure_sizes(
    description: str,
    measure_one: Callable[[Path, int, int], list[dict]],
    queries: int,
    argv: Sequence[str] | None,
    *,
    reusable: bool = False,
) -> list[dict] | None:
    """`--chunks` sizes, each measured in a fresh temporary warehouse; None when `--json` printed them already."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=queries)
    parser.add_argument("--json", action="store_true")
    if reusable:
        parser.add_argument("--keep", type=Path, help="build each warehouse in DIR/<chunks>/ once and reuse it")
    args = parser.parse_args(argv)
    rows = []
    for count in args.chunks:
        if getattr(args, "keep", None):
            (args.keep / str(count)).mkdir(parents=True, exist_ok=True)
            rows += measure_one(args.keep / str(count) / "bench.duckdb", count, args.queries)
            continue
        with tempfile.TemporaryDirectory() as folder:
            rows += measure_one(Path(folder) / "bench.duckdb", count, args.queries)
    if args.json:
        print(json.dumps(rows, indent=2))
        return None
    return rows


def print_table(rows: Sequence[dict], header: Sequence[str]) -> None:
    widths = [max(len(h), *(len(str(r.get(h, ""))) for r in rows)) for h in header]
    for line in (header, *([r.get(h, "") for h in header] for r in rows)):
        print("  ".join(f"{v!s:<{w}}" if i == 1 else f"{v!s:>{w}}" for i, (v, w) in enumerate(zip(line, widths))))


def main(argv: Sequence[str] | None = None) -> int:
    rows = measure_sizes(__doc__.splitlines()[0], measure, 100, argv, reusable=True)
    if rows is None:
        return 0
    searches = [r for r in rows if "filter" in r]
    print_table(searches, ["chunks", "filter", "search_p50", "search_p95", "search_cpu_p50", "search_cpu_p95",
                           "bm25_p50", "bm25_p95", "bm25_cpu_p95", "vectors_p50", "vectors_p95", "vectors_cpu_p95",
                           "fuse_fetch_p50", "fuse_fetch_p95", "fuse_fetch_cpu_p95", "vector_recall_at_10"])
    print("ms; search = SessionMemory.search (limit 5) without the query embedding, wall and CPU (process time);")
    print("parts: bm25_ranking, vector_ranking (150 candidates each), fusion + fetch of the 5 results shown\n")
    print_table([r for r in rows if "filter" not in r],
                ["chunks", "embed_p50", "embed_p95", "embed_cpu_p95", "cli_search_s", "cli_search_cpu_s",
                 "cli_search_filtered_s", "cli_search_filtered_cpu_s", "hook_s", "hook_cpu_s", "hook_recap_s",
                 "hook_recap_cpu_s"])
    print("embed = the packaged model embedding one query (ms); cli/hook = a new process, wall and CPU seconds")
    print("(median of 3); hook_recap = the hook on the bundled samples (a real recap longer than its budget)\n")
    if any("rows_s" in r for r in searches):
        print_table(searches[:: len(FILTERS)], ["chunks", "rows_s", "hnsw_s", "keywords_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
