"""Hybrid search finds what either retriever alone misses: a paraphrase (no shared words: BM25 fails) and a
rare identifier (a code, not meaning: the embedding is weak), on one small corpus."""

import json
from pathlib import Path

import pytest

from sessionmem_pipeline.client import Filters, SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.run import index_sources

EXCHANGES = [
    ("The laptop will not turn on after the update.", "Hold the power button for 30 seconds to reset it."),
    ("Our invoices show the wrong VAT rate for Austria.", "The tax table had 19% instead of 20%; corrected."),
    ("Deploy fails with ERR_7F3A_QUOTA on the staging cluster.", "That error is the namespace quota; raised it."),
    ("Can we move the weekly sync to Thursday?", "Yes, Thursdays at 10 from next week."),
    ("The cat photos page loads slowly on phones.", "Images were not resized; added thumbnails."),
    ("Invoice 20931 was charged twice.", "Refunded the duplicate charge on invoice 20931."),
    ("Invoice 55102 was charged twice.", "Refunded the duplicate charge on invoice 55102."),
    ("Invoice 77314 was charged twice.", "Refunded the duplicate charge on invoice 77314."),
]


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> SessionMemory:
    base = tmp_path_factory.mktemp("hybrid")
    root = base / "sources" / "support"
    root.mkdir(parents=True)
    for n, (question, answer) in enumerate(EXCHANGES):
        lines = [
            json.dumps({"role": "user", "content": question, "timestamp": f"2026-05-{n + 1:02d}T10:00:00Z"}),
            json.dumps({"role": "assistant", "content": answer, "timestamp": f"2026-05-{n + 1:02d}T10:01:00Z"}),
        ]
        (root / f"s{n}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = load_settings(flags={"warehouse": str(base / "w.duckdb"), "sources": [str(base / "sources")]}, env={})
    index_sources(settings)
    return SessionMemory(settings=settings)


def _session(memory: SessionMemory, chunk_ids) -> str | None:
    ids = list(chunk_ids)
    return ids[0].rsplit(":", 2)[0] if ids else None


def test_hybrid_finds_a_paraphrase_that_bm25_misses(memory: SessionMemory) -> None:
    query = "computer refuses to boot"
    assert _session(memory, memory.bm25_ranking(query, Filters())) != "support/s0"
    assert memory.search(query, limit=1)[0].session_id == "support/s0"


QUERIES = {
    "computer refuses to boot": "support/s0",
    "wrong tax percentage on bills": "support/s1",
    "ERR_7F3A_QUOTA": "support/s2",
    "reschedule the recurring meeting": "support/s3",
    "slow pictures on mobile": "support/s4",
    "invoice 55102": "support/s6",
    "duplicate charge 77314": "support/s7",
    "Austria VAT 20%": "support/s1",
}


def test_hybrid_is_right_at_least_as_often_as_either_retriever(memory: SessionMemory) -> None:
    def hits(rank) -> int:
        return sum(_session(memory, rank(query)) == expected for query, expected in QUERIES.items())

    bm25 = hits(lambda q: memory.bm25_ranking(q, Filters()))
    vector = hits(lambda q: memory.vector_ranking(q, Filters()))
    hybrid = hits(lambda q: [f"{r.session_id}:{r.chunk_index}:x" for r in memory.search(q, limit=1)])
    assert hybrid >= max(bm25, vector) and hybrid == len(QUERIES)
    assert bm25 < len(QUERIES)  # paraphrases without shared words defeat BM25
