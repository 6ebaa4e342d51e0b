"""Hybrid search finds what either retriever alone misses: a paraphrase (no shared words: BM25 fails) and a
rare identifier (a code, not meaning: the embedding is weak), on one small corpus; its fusion gives a rare term's
only match its whole keyword credit; and its planned searches return what an exact scan returns."""

import json
from datetime import UTC, datetime

import numpy as np
import pytest

from sessionmem_pipeline import client
from sessionmem_pipeline.client import Filters, SessionMemory, deduplicate, fuse_scores
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.warehouse import keyword_search
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
    ("What do we call the next release?", "Its codename is Quillfeather; it ships on Friday."),
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


def test_a_unique_term_ranks_its_only_match_first(memory: SessionMemory) -> None:
    assert len(memory.bm25_ranking("quillfeather", Filters())) == 1
    assert memory.search("quillfeather", limit=1)[0].session_id == "support/s8"


def test_a_single_bm25_hit_keeps_its_credit_over_closer_vectors() -> None:
    fused = fuse_scores({"rare": 7.0}, {"near": 0.62, "nearer": 0.65, "rare": 0.31, "far": 0.2})
    assert list(fused)[0] == "rare"
    assert fused["near"] == pytest.approx(0.62)  # no keyword credit for a chunk without the term


def test_a_truncated_bm25_list_bounds_the_missing_scores() -> None:
    fused = fuse_scores({"a": 4.0, "b": 2.0}, {"c": 0.5, "a": 0.1}, bm25_limit=2)
    assert fused["c"] == pytest.approx(2.0 / 4.0 + 0.5)


FILTERS = [
    {},
    {"project": "webshop"},
    {"has_decision": True},
    {"after": "2026-03-10", "role": "assistant"},
]


@pytest.mark.parametrize("exact_scan_max", [client.EXACT_SCAN_MAX, 0])  # 0: filtered queries over-fetch the index
@pytest.mark.parametrize("filters", FILTERS)
def test_planned_search_matches_an_exact_scan(
    indexed_corpus, monkeypatch: pytest.MonkeyPatch, filters: dict, exact_scan_max: int
) -> None:
    """Also through the kept table of a filter's chunks (`_filter_table`), which every filter without a time window
    takes when it over-fetches (one with a time window over-fetches against the chunks table)."""
    monkeypatch.setattr(client, "EXACT_SCAN_MAX", exact_scan_max)
    monkeypatch.setattr(client, "SELECTIVE_SHARE", client.SELECTIVE_SHARE if exact_scan_max else 0.0)
    memory = SessionMemory(settings=indexed_corpus.settings)
    conn = memory.connection()
    chosen = memory._filters(**filters)
    where, params = chosen.chunk_sql()
    rows = conn.execute(
        f"SELECT e.chunk_id, e.embedding FROM chunk_embeddings e JOIN chunks c USING (chunk_id) WHERE {where}",
        params,
    ).fetchall()
    matrix = np.asarray([r[1] for r in rows])
    for query in ("payment retries backoff", "restore the nightly backup", "coffee grinder"):
        vector = np.asarray(memory.embedder().embed([query])[0])
        cosine = matrix @ vector / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(vector))
        exact = {rows[i][0]: float(cosine[i]) for i in np.argsort(-cosine)[: client.CANDIDATES]}
        planned = memory.vector_ranking(query, chosen)
        assert list(planned)[:5] == list(exact)[:5]
        expected = fuse_scores(memory.bm25_ranking(query, chosen), exact, bm25_limit=client.CANDIDATES)
        every = [(r.session_id, r.chunk_index) for r in deduplicate(memory.chunks_by_id(expected))]
        for limit in (1, 3, 8):  # search reads the rows of its candidates only until it has enough
            assert [(r.session_id, r.chunk_index) for r in memory.search(query, limit=limit, **filters)] == every[:limit]
    kept = bool(filters) and "after" not in filters and not exact_scan_max
    assert bool(memory._per_snapshot("filter tables", lambda conn: {})) == kept
    memory.close()


@pytest.mark.parametrize("searched", [False, True])  # True: a search before, so the filter's table is kept
@pytest.mark.parametrize("filters", FILTERS[1:])
def test_overfetched_bm25_matches_the_search_scoped_to_the_filter(
    indexed_corpus, monkeypatch: pytest.MonkeyPatch, filters: dict, searched: bool
) -> None:
    """BM25 under a filter most chunks pass filters the unfiltered best (forced here for every filter): the same
    chunks and scores as the search scoped to the filter, also when too few pass and it falls back to that."""
    monkeypatch.setattr(client, "EXACT_SCAN_MAX", 0)
    monkeypatch.setattr(client, "SELECTIVE_SHARE", 0.0)
    monkeypatch.setattr(client, "BM25_OVERFETCH_SHARE", 0.0)
    memory = SessionMemory(settings=indexed_corpus.settings)
    chosen = memory._filters(**filters)
    if searched:
        memory.search("deploy", **filters)
    where, params = chosen.chunk_sql()
    for query in ("payment retries backoff", "restore the nightly backup", "deploy"):
        for limit in (1, 3, 150):
            scope = f"SELECT c.chunk_id FROM chunks c WHERE {where}"
            conn = memory._search_connection("fts")
            scoped = keyword_search(conn, "chunks", query, limit=limit, scope=scope, scope_params=params)
            expected = [(chunk_id, score) for chunk_id, _, score in scoped]
            assert list(memory.bm25_ranking(query, chosen, limit).items()) == expected
    memory.close()


@pytest.mark.parametrize("filters", FILTERS[1:])
def test_a_selective_filter_scopes_bm25_by_chunk_rows_as_by_chunk_ids(indexed_corpus, filters: dict) -> None:
    """From a snapshot's second search on, BM25 under a selective filter finds the filter's documents through the
    kept table of chunk rows and keys (`_chunk_keys`): the same chunks and scores as scoping by chunk ids."""
    memory = SessionMemory(settings=indexed_corpus.settings)
    chosen = memory._filters(**filters)
    where, params = chosen.chunk_sql()
    memory.search("deploy", **filters)
    memory.search("deploy", **filters)
    assert memory._per_snapshot("chunk keys", lambda conn: None) is not None
    for query in ("payment retries backoff", "restore the nightly backup", "deploy"):
        for limit in (1, 3, 150):
            scope = f"SELECT c.chunk_id FROM chunks c WHERE {where}"
            conn = memory._search_connection("fts")
            scoped = keyword_search(conn, "chunks", query, limit=limit, scope=scope, scope_params=params)
            assert list(memory.bm25_ranking(query, chosen, limit).items()) == [(c, score) for c, _, score in scoped]
    memory.close()


def test_a_one_off_search_naming_a_date_never_loads_the_vector_index(indexed_corpus) -> None:
    """A date named in the query ranks a second time, inside the window: still the snapshot's first search, which
    scans vectors exactly instead of loading vss and the HNSW index."""
    memory = SessionMemory(settings=indexed_corpus.settings)
    now = datetime(2026, 3, 20, 12, tzinfo=UTC)
    _, source, _ = memory.time_window("what did we decide last week about backups", now=now)
    assert source == "query"
    assert memory.search("what did we decide last week about backups", now=now)
    assert "vss" not in memory._per_snapshot("extensions", lambda conn: set())
    memory.search("backups", now=now)
    assert "vss" in memory._per_snapshot("extensions", lambda conn: set())
    memory.close()
