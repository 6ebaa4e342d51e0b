"""New vectors wait in an unindexed delta, are found by search there, and still after they join the HNSW index."""

from __future__ import annotations

import random
from pathlib import Path

from sessionmem_pipeline import warehouse
from sessionmem_pipeline.client import Filters, SessionMemory, _nearest_sql, vector_literal
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.warehouse import VECTOR_BASE, VECTOR_DELTA, Warehouse

MODEL = "test-model"
DIMENSIONS = 16


class FixedEmbedder:
    """Embeds every query as the vector the test set."""

    model_id = MODEL
    dimensions = DIMENSIONS

    def __init__(self) -> None:
        self.vector: list[float] = [0.0] * DIMENSIONS

    def embed(self, texts):
        return [self.vector for _ in texts]


def _rows(session: str, count: int, rng: random.Random) -> tuple[list[dict], list[dict]]:
    chunks, vectors = [], []
    for index in range(count):
        chunk_id = f"{session}:{index}:h"
        chunks.append({"chunk_id": chunk_id, "session_id": session, "chunk_index": index, "project": "p",
                       "content": "x", "context_content": "x"})
        vectors.append({"chunk_id": chunk_id, "session_id": session, "text_hash": "h",
                        "embedding": [rng.uniform(-1, 1) for _ in range(DIMENSIONS)]})
    return chunks, vectors


def _write(path: Path, session: str, count: int, rng: random.Random) -> list[dict]:
    chunks, vectors = _rows(session, count, rng)
    with Warehouse(path) as wh:
        wh.ensure_embedding_table(MODEL, DIMENSIONS)
        with wh.transaction():
            wh.insert("chunks", chunks)
            wh.insert(VECTOR_DELTA, vectors)
    return vectors


def _maintain(path: Path) -> tuple[str, int, int]:
    with Warehouse(path) as wh:
        done = wh.maintain_vector_index()
        return done, wh.scalar(f"SELECT count(*) FROM {VECTOR_BASE}"), wh.scalar(f"SELECT count(*) FROM {VECTOR_DELTA}")


def _nearest(path: Path, vector: list[float], filters: Filters) -> str:
    """The best chunk for `vector` as a reader finds it in the snapshot published from `path`."""
    warehouse.publish_snapshot(path)
    memory = SessionMemory(settings=load_settings(None, {"warehouse": str(path)}, env={}, cwd=path.parent, home=path.parent))
    embedder = FixedEmbedder()
    embedder.vector = vector
    memory._embedder = embedder
    try:
        return next(iter(memory.vector_ranking("q", filters, 5)))
    finally:
        memory.close()


def test_a_new_vector_is_found_in_the_delta_and_after_it_joins_the_index(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "w.duckdb"
    rng = random.Random(5)
    _write(path, "old", 200, rng)
    assert _maintain(path) == ("rebuilt", 200, 0)  # the first index: bulk insert, then one build

    new = _write(path, "new", 3, rng)[1]
    assert _maintain(path) == ("none", 200, 3)  # a small delta waits
    for filters in (Filters(), Filters(session_id="new")):
        assert _nearest(path, new["embedding"], filters) == new["chunk_id"]

    monkeypatch.setattr(warehouse, "VECTOR_DELTA_MAX", 0)
    assert _maintain(path) == ("merged", 203, 0)
    for filters in (Filters(), Filters(session_id="new")):
        assert _nearest(path, new["embedding"], filters) == new["chunk_id"]

    with Warehouse(path) as wh:
        plan = wh.conn.execute(
            "EXPLAIN " + _nearest_sql(f"'{vector_literal(new['embedding'])}'::FLOAT[{DIMENSIONS}]", 5)
        ).fetchall()
    assert "HNSW_INDEX_SCAN" in str(plan)


def _indexed_sessions_a_and_b(path: Path, count: int, seed: int) -> list[dict]:
    """Sessions a and b with `count` vectors each, in the HNSW-indexed base; a's vectors."""
    rng = random.Random(seed)
    vectors = _write(path, "a", count, rng)
    _write(path, "b", count, rng)
    _maintain(path)
    return vectors


def test_deleted_vectors_are_compacted_only_past_the_threshold(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    _indexed_sessions_a_and_b(path, 100, seed=6)
    with Warehouse(path) as wh, wh.transaction():
        wh.delete_sessions(["a"])
    assert _maintain(path) == ("compacted", 100, 0)  # rebuilt over the live rows
    with Warehouse(path) as wh:
        assert wh.maintain_vector_index() == "none"


def test_an_unlinked_base_vector_is_not_found_and_an_older_view_learns_to_skip_it(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    gone = _indexed_sessions_a_and_b(path, 50, seed=7)[0]
    with Warehouse(path) as wh:
        wh.conn.execute(f"CREATE OR REPLACE VIEW chunk_embeddings AS FROM {VECTOR_BASE} UNION ALL BY NAME FROM {VECTOR_DELTA}")
        with wh.transaction():  # session a's chunks were rewritten (no chunk has its vectors' text hash any more)
            wh.conn.execute("UPDATE chunks SET context_hash = 'rewritten' WHERE session_id = 'a'")
            assert wh.delete_stale_embeddings(["a"]) == 50
        wh.ensure_embedding_table(MODEL, DIMENSIONS)
        assert wh.scalar("SELECT count(*) FROM chunk_embeddings") == 50
        assert wh.scalar(f"SELECT count(*) FROM {VECTOR_BASE}") == 100  # unlinked, the index untouched
    assert _nearest(path, gone["embedding"], Filters()) != gone["chunk_id"]


def test_vectors_are_unlinked_once_and_a_purge_also_deletes_the_unlinked_ones(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    _indexed_sessions_a_and_b(path, 20, seed=8)
    with Warehouse(path) as wh:
        with wh.transaction():
            wh.conn.execute("UPDATE chunks SET context_hash = CASE WHEN session_id = 'a' AND chunk_index < 5 "
                            "THEN 'rewritten' ELSE 'h' END")  # five of a's chunks rewritten
            assert wh.delete_stale_embeddings(["a"]) == 5
        with wh.transaction():  # the same stale vectors again: already unlinked, nothing to count twice
            assert wh.delete_stale_embeddings(["a", "b"]) == 0
        assert wh.get_meta("hnsw_deleted") == "5"
        with wh.transaction():  # forgetting session a: its unlinked vectors go with its live ones
            assert wh.delete_vectors("e.session_id = ?", ["a"], purge=True) == 20
        assert wh.scalar(f"SELECT count(*) FROM {VECTOR_BASE} WHERE session_id = 'a'") == 0
        assert wh.scalar(f"SELECT count(*) FROM {VECTOR_BASE}") == 20
