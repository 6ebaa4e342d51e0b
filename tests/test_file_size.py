"""The file stays its data's size (issue 15): small changes through the real pipeline neither leak blocks (the
HNSW-indexed base is never changed in place) nor let fragmentation pile up (the file is rebuilt past its bound)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sessionmem_pipeline import warehouse
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.providers.embedders import Embedder
from sessionmem_pipeline.stages.run import forget, index_sources
from sessionmem_pipeline.warehouse import VECTOR_BASE, Warehouse, connect

WORDS = "cache invoice parser retry queue schema migration token webhook checkout cart export timeout".split()


class HashEmbedder(Embedder):
    """Words hashed into a vector: cheap, deterministic, and as wide as the real model."""

    model_id = "test-hash"
    dimensions = 384
    max_input_tokens = 512
    batch_size = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.split():
                vectors[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimensions] += 1.0
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)

    def count_model_tokens(self, text: str) -> int:
        return len(text.split()) + 2


def _message(session: int, n: int, role: str | None = None) -> str:
    words = " ".join(WORDS[(session * 7 + n * 3 + k) % len(WORDS)] for k in range(12))
    return json.dumps({"id": f"m{n}", "role": role or ("user" if n % 2 == 0 else "assistant"),
                       "content": f"{words} (session {session} turn {n})",
                       "timestamp": f"2026-04-{1 + session % 28:02d}T10:{n // 60:02d}:{n % 60:02d}Z"}) + "\n"


class Sources:
    def __init__(self, root: Path, sessions: int) -> None:
        self.root = root
        self.turns = dict.fromkeys(range(sessions), 24)
        for session in self.turns:
            self.path(session).parent.mkdir(parents=True, exist_ok=True)
            self.path(session).write_text("".join(_message(session, n) for n in range(24)), encoding="utf-8")

    def path(self, session: int) -> Path:
        return self.root / f"project-{session % 3}" / f"session-{session:03d}.jsonl"

    def append(self, session: int) -> None:
        """One more reply in a session whose vectors are in the indexed base: its last chunk changes."""
        with open(self.path(session), "a", encoding="utf-8") as handle:
            handle.write(_message(session, self.turns[session], "assistant"))
        self.turns[session] += 1


def _settings(warehouse_path: Path, root: Path):
    return load_settings(flags={"warehouse": str(warehouse_path), "sources": [str(root)]}, env={})


def _blocks(path: Path) -> tuple[int, int]:
    """(used, free) 256 KB blocks of a closed warehouse file."""
    conn = connect(path, read_only=True)
    try:
        return conn.execute(
            "SELECT used_blocks, free_blocks FROM pragma_database_size() WHERE database_name = 'wh'"
        ).fetchone()
    finally:
        conn.close()


def test_changes_to_indexed_vectors_do_not_grow_the_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(warehouse, "REBUILD_MIN_EXCESS", 1 << 40)  # no rebuild: the file as the runs leave it
    sources = Sources(tmp_path / "sources", 12)
    settings = _settings(tmp_path / "w.duckdb", sources.root)
    embedder = HashEmbedder()
    index_sources(settings, embedder=embedder)
    sources.append(0)
    index_sources(settings, embedder=embedder)
    used_after_one, _ = _blocks(settings.warehouse)
    with Warehouse(settings.warehouse) as wh:
        assert wh.scalar(f"SELECT count(*) FROM {VECTOR_BASE} WHERE chunk_id IS NULL")  # unlinked, not deleted

    for round_ in range(8):
        sources.append(1 + round_ % 6)
        index_sources(settings, embedder=embedder)

    used, free = _blocks(settings.warehouse)
    assert used <= used_after_one + 3  # a leaked HNSW copy per change would add blocks every run
    assert free <= used


def test_fragmentation_past_the_bound_is_rebuilt_away_and_forget_purges_vectors(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(warehouse, "REBUILD_MIN_EXCESS", 0)  # small files: the bound alone decides
    sources = Sources(tmp_path / "sources", 12)
    settings = _settings(tmp_path / "w.duckdb", sources.root)
    embedder = HashEmbedder()
    index_sources(settings, embedder=embedder)
    rebuilds = 0
    for round_ in range(6):
        sources.append(round_ % 4)
        rebuilds += "rebuild" in index_sources(settings, embedder=embedder).stage_seconds

    fresh = _settings(tmp_path / "fresh.duckdb", sources.root)
    index_sources(fresh, embedder=embedder)
    assert rebuilds
    # the bound is against the need the last rebuild measured, scaled by rows: a few percent off a fresh copy
    assert settings.warehouse.stat().st_size <= warehouse.REBUILD_GROWTH * fresh.warehouse.stat().st_size * 1.05
    with Warehouse(settings.warehouse) as wh, Warehouse(fresh.warehouse) as clean:
        for sql in ("SELECT count(*) FROM chunks", "SELECT count(*) FROM chunk_embeddings"):
            assert wh.scalar(sql) == clean.scalar(sql)
        session = wh.scalar("SELECT session_id FROM chunks ORDER BY chunk_id LIMIT 1")

    forget(settings, session_id=session)
    with Warehouse(settings.warehouse) as wh:  # nothing derived from its words stays, not even unlinked vectors
        assert wh.scalar(f"SELECT count(*) FROM {VECTOR_BASE} WHERE session_id = ?", [session]) == 0

