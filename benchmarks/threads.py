"""Do conversation threads help multi-hop questions? (issue 10), measured through the project's own pipeline.

    .venv/bin/python benchmarks/threads.py [--bench ../shared/bench/locomo-dev] [--warehouse PATH] [--json]

Indexes the benchmark's sessions (one folder per conversation) with `index_sources` into a temporary warehouse (or
`--warehouse`, kept and reused incrementally), builds threads with `core.threads.build_threads` from the stored
summaries, summary vectors and chunk vectors at several thresholds, and for every question compares, within the
same budget of 10 turns, the evidence recall of plain hybrid search against search expanded with the best chunk of
sessions in the same thread as the top results. A control expands with the sessions just before and after the top
results' sessions instead, so a gain can be told apart from "any other session helps". Also reports how often two
sessions that hold evidence of the same multi-hop question share a thread, against how often any two sessions do.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import duckdb

from retrieval import TURN_BUDGET, load_queries, score
from sessionmem_pipeline.client import SearchResult, SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.core.threads import SIMILARITY_THRESHOLD, Thread, ThreadInput, build_threads
from sessionmem_pipeline.stages.run import index_sources

CANDIDATES = 50
SEEDS = 2  # top results whose sessions' threads are followed
EXPANSIONS = 2  # related sessions added (their best chunk each), best first
THRESHOLDS = (0.4, 0.5, 0.6, 0.7)
MULTI_HOP = "multi-hop"
METRICS = (f"R@{TURN_BUDGET}turns", "R@3", "R@5", "MRR")

Related = Mapping[str, Sequence[str]]  # session id -> the sessions it is related to


def load_thread_inputs(conn: duckdb.DuckDBPyConnection) -> list[ThreadInput]:
    """Every top-level session with its latest summary's topics, files and vector, and its chunk vectors."""
    vectors: dict[str, list[list[float]]] = defaultdict(list)
    for session_id, vector in conn.execute(
        """SELECT c.session_id, e.embedding FROM chunks c JOIN chunk_embeddings e USING (chunk_id)
           ORDER BY c.session_id, c.chunk_index"""
    ).fetchall():
        vectors[session_id].append(list(vector))
    rows = conn.execute(
        """SELECT s.session_id, s.project, s.started_at, s.ended_at, v.summary, v.embedding
           FROM sessions s JOIN session_summaries v ON v.session_id = s.session_id AND v.version = s.summary_version
           WHERE s.parent_session_id IS NULL ORDER BY s.session_id"""
    ).fetchall()
    inputs = []
    for session_id, project, started_at, ended_at, summary, embedding in rows:
        summary = json.loads(summary)
        inputs.append(
            ThreadInput(
                session_id=session_id,
                project=project or "",
                started_at=started_at,
                ended_at=ended_at,
                topics=tuple(summary.get("topics", ())),
                files=tuple(summary.get("files_modified", ())),
                summary_vector=embedding,
                chunk_vectors=vectors.get(session_id, []),
            )
        )
    return inputs


def thread_mates(threads: Sequence[Thread]) -> dict[str, list[str]]:
    """Each threaded session's other sessions in its thread."""
    return {sid: [other for other in t.session_ids if other != sid] for t in threads for sid in t.session_ids}


def time_neighbours(sessions: Sequence[ThreadInput]) -> dict[str, list[str]]:
    """The control: each session's previous and next session of the same project."""
    by_project: dict[str, list[ThreadInput]] = defaultdict(list)
    for session in sorted(sessions, key=lambda s: (s.started_at, s.session_id)):
        by_project[session.project].append(session)
    related: dict[str, list[str]] = {}
    for members in by_project.values():
        for i, session in enumerate(members):
            related[session.session_id] = [m.session_id for m in members[max(i - 1, 0) : i + 2] if m is not session]
    return related


def expand(memory: SessionMemory, related: Related, query: str, *, project: str) -> list[SearchResult]:
    """Hybrid search, with the best chunk of up to EXPANSIONS sessions related to the top SEEDS results' sessions
    moved up right after those results (related sessions ranked by their best chunk's score)."""
    results = memory.search(query, limit=CANDIDATES, project=project)
    seeds = results[:SEEDS]
    seed_sessions = {r.session_id for r in seeds}
    candidates = {sid for r in seeds for sid in related.get(r.session_id, ())} - seed_sessions
    best: dict[str, SearchResult] = {}
    for result in results:
        if result.session_id in candidates and result.session_id not in best:
            best[result.session_id] = result
    for sid in sorted(candidates - set(best)):  # a related session with no chunk among the candidates
        scoped = memory.search(query, limit=1, project=project, session_id=sid)
        if scoped:
            best[sid] = scoped[0]
    added = sorted(best.values(), key=lambda r: (-r.score, r.session_id, r.chunk_index))[:EXPANSIONS]
    chosen = {(r.session_id, r.chunk_index) for r in [*seeds, *added]}
    return [*seeds, *added, *(r for r in results[SEEDS:] if (r.session_id, r.chunk_index) not in chosen)]


def expand_with_threads(
    memory: SessionMemory, threads: Sequence[Thread], query: str, *, project: str
) -> list[SearchResult]:
    """Search expanded with the sessions in the same thread as the top results."""
    return expand(memory, thread_mates(threads), query, project=project)


def evidence_sessions(conn: duckdb.DuckDBPyConnection, query: dict) -> set[str]:
    """The sessions whose chunks hold the question's evidence turns."""
    rows = conn.execute(
        """SELECT DISTINCT session_id FROM chunks
           WHERE project = ? AND list_has_any(message_ids, ?::VARCHAR[])""",
        [query["conv_id"], query["evidence"]],
    ).fetchall()
    return {r[0] for r in rows}


def pair_statistics(
    threads: Sequence[Thread], sessions: Sequence[ThreadInput], evidence_pairs: set[frozenset[str]]
) -> dict[str, float]:
    """Thread sizes, and how often a pair of sessions shares a thread: evidence pairs of multi-hop questions
    against all pairs of sessions of one project (the base rate)."""
    thread_of = {sid: t.thread_id for t in threads for sid in t.session_ids}
    by_project: dict[str, list[str]] = defaultdict(list)
    for s in sessions:
        by_project[s.project].append(s.session_id)
    all_pairs = [frozenset(p) for ids in by_project.values() for p in itertools.combinations(ids, 2)]

    def shared(pairs: Sequence[frozenset[str]]) -> float:
        hits = [thread_of.get(a) is not None and thread_of.get(a) == thread_of.get(b) for a, b in map(sorted, pairs)]
        return round(sum(hits) / len(hits), 3) if hits else 0.0

    sizes = [len(t.session_ids) for t in threads]
    return {
        "threads": len(threads),
        "threaded_sessions": sum(sizes),
        "sessions": len(sessions),
        "largest": max(sizes, default=0),
        "evidence_pairs_in_one_thread": shared(sorted(evidence_pairs, key=sorted)),
        "any_pairs_in_one_thread": shared(all_pairs),
    }


def mean_scores(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    return {m: round(statistics.fmean(r[m] for r in rows), 4) for m in METRICS} | {"n": len(rows)}


def run(memory: SessionMemory, queries: list[dict]) -> dict:
    conn = memory.connection()
    sessions = load_thread_inputs(conn)
    started = time.perf_counter()
    threads_at = {t: build_threads(sessions, similarity_threshold=t) for t in THRESHOLDS}
    build_seconds = (time.perf_counter() - started) / len(THRESHOLDS)
    queries = [q for q in queries if q["evidence"]]
    evidence_pairs = {
        frozenset(pair)
        for q in queries
        if q["category_name"] == MULTI_HOP
        for pair in itertools.combinations(sorted(evidence_sessions(conn, q)), 2)
    }
    retrievers = {"plain search": lambda q, p: memory.search(q, limit=CANDIDATES, project=p)}
    retrievers["+ time neighbours (control)"] = lambda q, p, r=time_neighbours(sessions): expand(memory, r, q, project=p)
    for t, threads in threads_at.items():
        retrievers[f"+ threads @{t}"] = lambda q, p, th=threads: expand_with_threads(memory, th, q, project=p)
    scores: dict[str, dict[str, list[dict[str, float]]]] = {name: defaultdict(list) for name in retrievers}
    for query in queries:
        evidence = set(query["evidence"])
        for name, retrieve in retrievers.items():
            result = score([r.message_ids for r in retrieve(query["question"], query["conv_id"])], evidence)
            scores[name][query["category_name"]].append(result)
            scores[name]["all"].append(result)
    return {
        "results": {name: {c: mean_scores(rows) for c, rows in by_category.items()} for name, by_category in scores.items()},
        "threads": {str(t): pair_statistics(threads, sessions, evidence_pairs) for t, threads in threads_at.items()},
        "thread_titles": {str(t): [[th.title, len(th.session_ids), th.cohesion] for th in threads]
                          for t, threads in threads_at.items()},
        "build_threads_seconds": round(build_seconds, 3),
        "default_threshold": SIMILARITY_THRESHOLD,
        "seeds": SEEDS,
        "expansions": EXPANSIONS,
    }


def print_table(report: dict) -> None:
    print(f"indexing: {report['index_seconds']:.1f}s; build_threads: {report['build_threads_seconds'] * 1000:.0f} ms "
          f"for {report['sessions']} sessions (default threshold {report['default_threshold']})")
    print(f"\n{'threshold':>9} {'threads':>8} {'threaded':>9} {'largest':>8} {'evidence pairs':>15} {'any pairs':>10}"
          "   (share of session pairs in one thread)")
    for t, stats in report["threads"].items():
        print(f"{t:>9} {stats['threads']:>8} {stats['threaded_sessions']:>5}/{stats['sessions']:<3} {stats['largest']:>8} "
              f"{stats['evidence_pairs_in_one_thread']:>15.3f} {stats['any_pairs_in_one_thread']:>10.3f}")
    results = report["results"]
    key = f"R@{TURN_BUDGET}turns"
    for category in [MULTI_HOP, "all"]:
        base = results["plain search"][category]
        print(f"\n[{category}] n={base['n']}; expansion: best chunk of up to {report['expansions']} related sessions "
              f"of the top {report['seeds']} results")
        print(f"{'retriever':<30}" + "".join(f"{m:>12}" for m in METRICS) + f"   {key} vs plain")
        for name, by_category in results.items():
            row = by_category[category]
            ratio = row[key] / base[key] if base[key] else float("nan")
            print(f"{name:<30}" + "".join(f"{row[m]:>12.3f}" for m in METRICS) + f"   x{ratio:.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=Path(__file__).resolve().parents[2] / "shared/bench/locomo-dev",
                        help="folder with sessions/ and queries.jsonl")
    parser.add_argument("--warehouse", type=Path, default=None, help="index here and keep it (default: a temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as folder:
        warehouse = (args.warehouse or Path(folder) / "bench.duckdb").resolve()
        home = warehouse.parent
        settings = load_settings(None, {"warehouse": str(warehouse), "sources": [str((args.bench / "sessions").resolve())]},
                                 env={}, cwd=home, home=home)
        started = time.perf_counter()
        index_sources(settings)
        index_seconds = time.perf_counter() - started
        memory = SessionMemory(settings=settings)
        report = run(memory, load_queries(args.bench / "queries.jsonl"))
        report["index_seconds"] = index_seconds
        report["sessions"] = next(iter(report["threads"].values()))["sessions"]
        memory.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
