"""Curated memories (spec 000 `remember` / `search_memories`): facts an agent chose to keep, read from
`memories.jsonl` files in the source roots and from the inbox beside the warehouse (one JSON object per line:
id, content, timestamp, optional session_id and importance), embedded, and kept apart from session search.

`remember` appends to the inbox: that needs no lock on the warehouse (source roots are only ever read), and the
pipeline, the one writer, picks it up on its next run.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sessionmem_pipeline.core.formats.source import parse_timestamp
from sessionmem_pipeline.core.sanitize import sanitize_text
from sessionmem_pipeline.providers import Embedder
from sessionmem_pipeline.stages.discover import MEMORIES_FILE
from sessionmem_pipeline.warehouse import Warehouse


@dataclass
class MemoryOutcome:
    files: int = 0
    memories: int = 0
    embedded: int = 0
    warnings: list[str] = field(default_factory=list)


def memory_inbox(warehouse: Path) -> Path:
    """Where `remember` appends: beside the warehouse, because source roots are only ever read."""
    return Path(warehouse).with_name(MEMORIES_FILE)


def find_memory_files(roots: Sequence[Path], warehouse: Path | None = None) -> list[Path]:
    """Memories files in the source roots, and the inbox beside the warehouse."""
    found = {p for root in roots if Path(root).is_dir() for p in Path(root).rglob(MEMORIES_FILE)}
    if warehouse is not None and memory_inbox(warehouse).is_file():
        found.add(memory_inbox(warehouse))
    return sorted(found)


def remember(
    warehouse: Path, content: str, *, importance: float | None = None, session_id: str | None = None
) -> dict:
    """Append a memory, sanitized (private spans out, secrets redacted), to the inbox: no lock on the warehouse
    needed; readers search the inbox until the next pipeline run indexes it."""
    if not content.strip():
        raise ValueError("a memory needs some content")
    if importance is not None and not 0 <= importance <= 1:
        raise ValueError(f"importance must be between 0 and 1, got {importance}")
    entry = {
        "id": f"mem-{uuid.uuid4().hex[:12]}",
        "content": sanitize_text(content.strip()),
        "timestamp": datetime.now(UTC).isoformat(),
        "session_id": session_id,
        "importance": importance,
    }
    inbox = memory_inbox(warehouse)
    inbox.parent.mkdir(parents=True, exist_ok=True)
    with open(inbox, "a", encoding="utf-8") as handle:  # one write of one line: appends never interleave
        handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return entry


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
                    "content": sanitize_text(content.strip()),
                    "timestamp": parse_timestamp(data.get("timestamp")),
                    "session_id": data.get("session_id"),
                    "importance": float(importance) if isinstance(importance, (int, float)) else None,
                    "source": str(path),
                }
            )
    return memories, warnings


def ingest_memories(wh: Warehouse, roots: Sequence[Path], embedder: Embedder) -> MemoryOutcome:
    """Replace the stored memories with those in the memories files, embedding only new texts."""
    outcome = MemoryOutcome()
    rows: list[dict] = []
    for path in find_memory_files(roots, wh.path):
        memories, warnings = parse_memories(path)
        outcome.files += 1
        outcome.warnings += warnings
        rows += memories
    stored = {
        (r["memory_id"], r["content"]): r["embedding"]
        for r in wh.query("SELECT memory_id, content, embedding FROM memories WHERE embedding IS NOT NULL")
    }
    new = [m for m in rows if (m["memory_id"], m["content"]) not in stored]
    result = embedder.embed_with_failures([m["content"] for m in new]) if new else None
    for index, memory in enumerate(new):
        vector = result.vector(index) if result else None
        if vector is not None:  # a memory the provider failed on is stored without one and embedded next run
            stored[(memory["memory_id"], memory["content"])] = [float(x) for x in vector]
    for memory in rows:
        memory["embedding"] = stored.get((memory["memory_id"], memory["content"]))
    with wh.transaction():
        wh.conn.execute("DELETE FROM memories")
        wh.insert("memories", rows)
        wh.sync_keyword_index("memories")
    outcome.memories = len(rows)
    outcome.embedded = sum(1 for m in new if m["embedding"] is not None)
    return outcome
