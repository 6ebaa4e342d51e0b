"""Finding session files under the configured source roots (read-only: stat and list, never open for writing)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sessionmem_pipeline.core.changes import FileStat
from sessionmem_pipeline.core.formats import REGISTRY
from sessionmem_pipeline.core.formats.source import FileContext

MEMORIES_FILE = "memories.jsonl"  # curated memories, not a session (stages/memories.py)


@dataclass(frozen=True)
class SourceFile:
    """A session file and the partition it is indexed in."""

    path: str  # absolute
    root: str  # absolute source root it was found under
    partition_key: str  # the file-derived session id (INTERFACES.md), unique across roots
    stat: FileStat


def _walk(root: Path) -> Iterator[Path]:
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if REGISTRY.wants(Path(folder) / name, excluded_names=(MEMORIES_FILE,)):
                yield Path(folder) / name


def file_stat(path: str | Path) -> FileStat | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return FileStat(info.st_size, info.st_mtime_ns)


def discover(roots: Sequence[Path], *, since: datetime | None = None) -> list[SourceFile]:
    """Every session file under the roots, in a stable order; `since` skips files last written before it."""
    found: list[SourceFile] = []
    keys: set[str] = set()
    cutoff = since.timestamp() * 1e9 if since else None
    for root in roots:
        root = root.resolve()
        if not root.is_dir():
            continue
        for path in _walk(root):
            stat = file_stat(path)
            if stat is None or (cutoff is not None and stat.mtime_ns < cutoff):
                continue
            key = FileContext(str(path), str(root)).file_session_id
            if key in keys:  # the same relative path under two roots
                key = f"{root.name}:{key}"
            keys.add(key)
            found.append(SourceFile(str(path), str(root), key, stat))
    return found
