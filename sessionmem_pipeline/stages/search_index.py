"""Search index: the BM25 index rebuild and HNSW compaction (the reader snapshot is published after it).

DuckDB's full-text index is a snapshot of its table, so it is rebuilt after every change; the HNSW index follows
inserts and deletes itself and is compacted here. Readers never see the live file: they open the snapshot, which
is replaced atomically once the writer has checkpointed and closed the warehouse.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessionmem_pipeline.warehouse import Warehouse


@dataclass
class IndexOutcome:
    chunks: int
    vectors: int


def refresh_search_index(wh: Warehouse) -> IndexOutcome:
    """Rebuild BM25, compact HNSW, checkpoint."""
    wh.refresh_fts()
    wh.compact_vector_index()
    wh.checkpoint()
    vectors = wh.scalar("SELECT count(*) FROM chunk_embeddings") if wh.get_meta("embedding_model") else 0
    return IndexOutcome(wh.scalar("SELECT count(*) FROM chunks"), vectors)
