"""Curated memories (spec 000 `remember` / `search_memories`): facts an agent chose to keep, read from
`memories.jsonl` files in the source roots (one JSON object per line: id, content, timestamp, optional
session_id and importance), embedded, and kept apart from session search.

A memories file is the agent's inbox: writing to it needs no lock on the warehouse, and the pipeline (the one
writer) picks it up on its next run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sessionmem_pipeline.core.formats.source import parse_timestamp
from sessionmem_pipeline.core.redact import redact
from sessionmem_pipeline.providers import Embedder
from sessionmem_pipeline.stages.discover import MEMORIES_FILE
from sessionmem_pipeline.warehouse import Warehouse


@dataclass
class MemoryOutcome:
    files: int = 0
    memories: int = 0
    embedded: int = 0
    warnings: list[str] = field(default_factory=list)


def find_memory_files(roots: Sequence[Path]) -> list[Path]:
    return sorted(p for root in roots if Path(root).is_dir() for p in Path(root).rglob(MEMORIES_FILE))


def parse_memories(path: Path) -> tuple[list[dict], list[str]]:
    """The file's memories and a warning per line that is not one (file:line: reason)."""
    memories, warnings = [], []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                warnings.append(f"{path}:{number}: invalid JSON ({exc.msg}); line skipped")
                continue
            content = data.get("content") if isinstance(data, dict) else None
            if not isinstance(content, str) or not content.strip():
                warnings.append(f"{path}:{number}: a memory needs a non-empty 'content'; line skipped")
                continue
            importance = data.get("importance")
            memories.append(
                {
                    "memory_id": str(data.get("id") or f"{path.stem}:L{number}"),
                    "content": redact(content.strip()),
                    "timestamp": parse_timestamp(data.get("timestamp")),
                    "session_id": data.get("session_id"),
                    "importance": float(importance) if isinstance(importance, (int, float)) else None,
                    "source": str(path),
                }
            )
    return memories, warnings


def ingest_memories(wh: Warehouse, roots: Sequence[Path], embedder: Embedder) -> MemoryOutcome:
    """Replace the stored memories with those in the roots' memories files, embedding only new texts."""
    outcome = MemoryOutcome()
    rows: list[dict] = []
    for path in find_memory_files(roots):
        memories, warnings = parse_memories(path)
        outcome.files += 1
        outcome.warnings += warnings
        rows += memories
    stored = {
        (r["memory_id"], r["content"]): r["embedding"]
        for r in wh.query("SELECT memory_id, content, embedding FROM memories WHERE embedding IS NOT NULL")
    }
    new = [m for m in rows if (m["memory_id"], m["content"]) not in stored]
    vectors = embedder.embed([m["content"] for m in new]) if new else []
    for memory, vector in zip(new, vectors, strict=True):
        stored[(memory["memory_id"], memory["content"])] = [float(x) for x in vector]
    for memory in rows:
        memory["embedding"] = stored[(memory["memory_id"], memory["content"])]
    with wh.transaction():
        wh.conn.execute("DELETE FROM memories")
        wh.insert("memories", rows)
    outcome.memories, outcome.embedded = len(rows), len(new)
    return outcome
