"""Search index: orphan cleanup, keyword-index and HNSW upkeep, then a published reader snapshot.

The keyword (BM25) index follows each change in the transaction that writes the rows (warehouse.sync_keyword_index);
here its postings are re-sorted when enough were appended. New vectors wait in a small delta searched exactly and
join the HNSW index in rare batches (warehouse.maintain_vector_index). Readers never see the live file: they open
the snapshot, published once the writer has checkpointed and closed the warehouse.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sessionmem_pipeline.stages.ingest import remove_file
from sessionmem_pipeline.warehouse import Warehouse


@dataclass
class IndexOutcome:
    chunks: int
    vectors: int


def remove_orphans(wh: Warehouse, roots: Sequence[Path] | None = None) -> int:
    """Rows of indexed files that no longer exist (under the given roots, or anywhere when None)."""
    removed = 0
    prefixes = tuple(str(Path(r).resolve()) + os.sep for r in roots) if roots is not None else None
    for row in wh.indexed_paths():
        if prefixes is not None and not row["path"].startswith(prefixes):
            continue
        if not os.path.exists(row["path"]):
            remove_file(wh, row["path"])
            removed += 1
    for path in wh.quarantined_paths():  # never indexed, so not in source_files
        if (prefixes is None or path.startswith(prefixes)) and not os.path.exists(path):
            remove_file(wh, path)
            removed += 1
    return removed


def refresh_search_index(wh: Warehouse) -> IndexOutcome:
    """Index every document if the keyword index is new, re-sort its postings and fold new vectors into the HNSW
    index when due, checkpoint."""
    wh.ensure_keyword_index()
    wh.compact_keyword_index()
    wh.maintain_vector_index()
    wh.checkpoint()
    vectors = wh.scalar("SELECT count(*) FROM chunk_embeddings") if wh.get_meta("embedding_model") else 0
    return IndexOutcome(wh.scalar("SELECT count(*) FROM chunks"), vectors)
