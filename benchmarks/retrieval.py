"""Retrieval quality on a conversation benchmark (issue 8), through the project's own pipeline.

    .venv/bin/python benchmarks/retrieval.py --sessions ../shared/bench/locomo-dev/sessions \\
        --queries ../shared/bench/locomo-dev/queries.jsonl [--max-tokens 500] [--json]

Indexes the folder (one subfolder per project) into a temporary warehouse with `index_sources`, then for every
query searches within its project and scores the results against the query's evidence message ids: recall of
evidence within the top 1, 3, 5 and 10 results, recall at an equal budget of 10 turns (results counted by the
messages they cover), and MRR; per category and overall; for several retrievers side by side on the same chunks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from sessionmem_pipeline.client import Filters, SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.core.tokens import count_tokens
from sessionmem_pipeline.stages.run import index_sources

TOP_K = (1, 3, 5, 10)
TURN_BUDGET = 10
CANDIDATES = 50

Retriever = Callable[[str, str], list[str]]  # (query, project) -> chunk ids, best first


def load_queries(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


class Bench:
    """The indexed corpus and the retrievers compared on it."""

    def __init__(self, memory: SessionMemory) -> None:
        self.memory = memory
        conn = memory.connection()
        rows = conn.execute(
            "SELECT session_id || ':' || chunk_index, project, message_ids, content, token_count FROM chunks"
        ).fetchall()
        self.chunk_messages = {r[0]: list(r[2]) for r in rows}
        self.chunk_tokens = {r[0]: r[4] for r in rows}
        self.by_project: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for key, project, _, content, _ in rows:
            self.by_project[project].append((key, content))
        self._raw_vectors: dict[str, tuple[list[str], np.ndarray]] = {}

    def bm25(self, query: str, project: str) -> list[str]:
        return [_key(c) for c in self.memory.bm25_ranking(query, Filters(project=project), CANDIDATES)]

    def vector_with_prefix(self, query: str, project: str) -> list[str]:
        return [_key(c) for c in self.memory.vector_ranking(query, Filters(project=project), CANDIDATES)]

    def vector_without_prefix(self, query: str, project: str) -> list[str]:
        """Cosine over the chunks' plain content, embedded here with the same model (no contextual prefix)."""
        if project not in self._raw_vectors:
            ids, texts = zip(*self.by_project[project], strict=True)
            self._raw_vectors[project] = (list(ids), np.asarray(self.memory.embedder().embed(list(texts))))
        ids, matrix = self._raw_vectors[project]
        query_vector = np.asarray(self.memory.embedder().embed([query])[0])
        order = np.argsort(-(matrix @ query_vector))[:CANDIDATES]
        return [ids[i] for i in order]

    def hybrid(self, query: str, project: str) -> list[str]:
        return [self._id(r) for r in self.memory.search(query, limit=CANDIDATES, project=project)]

    def hybrid_with_threads(self, query: str, project: str) -> list[str]:
        """The top 3 hybrid results, then the best chunk of each other session in their threads, then the rest:
        does following threads find the other hops of a multi-hop question?"""
        results = self.memory.search(query, limit=CANDIDATES, project=project)
        threads = {r.thread_id for r in results[:3] if r.thread_id}
        ranked = [self._id(r) for r in results[:3]]
        seen_sessions = {r.session_id for r in results[:3]}
        for result in results[3:]:
            if result.thread_id in threads and result.session_id not in seen_sessions:
                ranked.append(self._id(result))
                seen_sessions.add(result.session_id)
        return ranked + [self._id(r) for r in results[3:] if self._id(r) not in ranked]

    def recall(self, query: str, project: str) -> list[str]:
        return [self._id(r) for r in self.memory.recall(query, limit=TOP_K[-1], project=project)]

    @staticmethod
    def _id(result) -> str:
        return f"{result.session_id}:{result.chunk_index}"



def _key(chunk_id: str) -> str:
    """`session:index` of a chunk id (`session:index:hash`)."""
    return chunk_id.rsplit(":", 1)[0]


def score(ranked_messages: Sequence[list[str]], evidence: set[str]) -> dict[str, float]:
    """Recall at top k results, recall within a budget of TURN_BUDGET turns, reciprocal rank."""
    scores: dict[str, float] = {}
    for k in TOP_K:
        covered = {m for messages in ranked_messages[:k] for m in messages}
        scores[f"R@{k}"] = len(evidence & covered) / len(evidence)
    budget: list[str] = []
    for messages in ranked_messages:
        budget += [m for m in messages if m not in budget][: TURN_BUDGET - len(budget)]
        if len(budget) >= TURN_BUDGET:
            break
    scores[f"R@{TURN_BUDGET}turns"] = len(evidence & set(budget)) / len(evidence)
    first = next((rank for rank, messages in enumerate(ranked_messages, 1) if evidence & set(messages)), None)
    scores["MRR"] = 1 / first if first else 0.0
    return scores


def evaluate(bench: Bench, retrievers: dict[str, Retriever], queries: list[dict]) -> dict:
    per_retriever: dict[str, dict[str, list[dict[str, float]]]] = {name: defaultdict(list) for name in retrievers}
    latency: dict[str, list[float]] = defaultdict(list)
    tokens: list[int] = []
    for query in queries:
        evidence = set(query["evidence"])
        if not evidence:
            continue
        for name, retrieve in retrievers.items():
            started = time.perf_counter()
            ranked = retrieve(query["question"], query["conv_id"])
            latency[name].append((time.perf_counter() - started) * 1000)
            ranked_messages = [bench.chunk_messages[key] for key in ranked]
            scores = score(ranked_messages, evidence)
            per_retriever[name][query.get("category_name", str(query.get("category")))].append(scores)
            per_retriever[name]["overall"].append(scores)
            if name == "hybrid":
                tokens.append(sum(bench.chunk_tokens[key] for key in ranked[:5]))
    table = {
        name: {
            category: {metric: round(statistics.fmean(s[metric] for s in rows), 4) for metric in rows[0]}
            | {"n": len(rows)}
            for category, rows in categories.items()
        }
        for name, categories in per_retriever.items()
    }
    return {
        "results": table,
        "latency_ms_p50": {n: round(statistics.median(v), 1) for n, v in latency.items()},
        "tokens_returned_top5_mean": round(statistics.fmean(tokens), 1) if tokens else None,
    }


def print_table(report: dict) -> None:
    metrics = ["R@1", "R@3", "R@5", "R@10", f"R@{TURN_BUDGET}turns", "MRR"]
    print(f"indexing: {report['index_seconds']:.1f}s for {report['sessions']} sessions, {report['chunks']} chunks "
          f"(chunking.max_tokens={report['max_tokens']})")
    categories = list(next(iter(report["results"].values())))
    for category in sorted(categories, key=lambda c: (c != "overall", c)):
        print(f"\n[{category}] n={next(iter(report['results'].values()))[category]['n']}")
        print(f"{'retriever':<24}" + "".join(f"{m:>12}" for m in metrics))
        baseline = report["results"]["bm25"][category][f"R@{TURN_BUDGET}turns"]
        for name, categories_scores in report["results"].items():
            row = categories_scores[category]
            ratio = row[f"R@{TURN_BUDGET}turns"] / baseline if baseline else float("nan")
            print(f"{name:<24}" + "".join(f"{row[m]:>12.3f}" for m in metrics) + f"   x{ratio:.2f} vs bm25")
    print(f"\nmedian latency per query (ms): {report['latency_ms_p50']}")
    print(f"mean tokens in the top 5 hybrid results: {report['tokens_returned_top5_mean']}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", required=True, type=Path, help="folder with one subfolder per project")
    parser.add_argument("--queries", required=True, type=Path)
    parser.add_argument("--max-tokens", type=int, default=None, help="chunking.max_tokens (default: configured)")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any configuration key")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as folder:
        flags = {"warehouse": str(Path(folder) / "bench.duckdb"), "sources": [str(args.sessions.resolve())],
                 "chunking.max_tokens": args.max_tokens}
        flags |= dict(item.split("=", 1) for item in args.set)
        settings = load_settings(None, flags, env={}, cwd=Path(folder), home=Path(folder))
        started = time.perf_counter()
        index_report = index_sources(settings)
        index_seconds = time.perf_counter() - started
        memory = SessionMemory(settings=settings)
        bench = Bench(memory)
        retrievers: dict[str, Retriever] = {
            "bm25": bench.bm25,
            "vector (no prefix)": bench.vector_without_prefix,
            "vector (prefix)": bench.vector_with_prefix,
            "hybrid": bench.hybrid,
            "recall (two-stage)": bench.recall,
            "hybrid + threads": bench.hybrid_with_threads,
        }
        queries = load_queries(args.queries)[: args.limit_queries]
        report = evaluate(bench, retrievers, queries)
        report |= {
            "index_seconds": index_seconds,
            "sessions": index_report.sessions_changed,
            "chunks": index_report.chunks,
            "max_tokens": settings["chunking.max_tokens"],
            "queries": len(queries),
        }
        memory.close()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
