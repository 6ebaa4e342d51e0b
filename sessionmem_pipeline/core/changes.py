"""Change detection (spec 001 "Change Detection & Incremental Indexing"): what to do with each source file.

Decisions are made from cheap facts first (size and mtime), reading bytes only when those are not enough:
- new: never indexed;
- unchanged: same size and mtime, or same bytes after all (a `touch`): skipped without reading the file whole;
- grown: longer, and the bytes indexed last time are intact (a live agent session appending): only the appended
  lines are new;
- rewritten: anything else (shorter, or the old bytes changed): the file's sessions are indexed again;
- deleted: indexed before, gone now: its rows are removed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

NEW = "new"
UNCHANGED = "unchanged"
GROWN = "grown"
REWRITTEN = "rewritten"
DELETED = "deleted"


@dataclass(frozen=True)
class FileStat:
    """What `stat` says about a file now."""

    size: int
    mtime_ns: int


@dataclass(frozen=True)
class IndexedState:
    """What the warehouse remembers of a file from its last indexing."""

    size: int
    mtime_ns: int
    sha256: str  # of the whole file as it was
    consumed_bytes: int  # bytes up to the last complete line that was indexed
    prefix_sha256: str  # of those consumed bytes


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decide(
    current: FileStat | None,
    previous: IndexedState | None,
    read_prefix: Callable[[int], bytes],
) -> str:
    """The decision for one file. `read_prefix(n)` returns the file's first n bytes (n < 0: all of it); it is
    called only when size and mtime cannot settle the question."""
    if current is None:
        return DELETED if previous is not None else UNCHANGED
    if previous is None:
        return NEW
    if current.size == previous.size and current.mtime_ns == previous.mtime_ns:
        return UNCHANGED
    if current.size == previous.size:
        return UNCHANGED if sha256_bytes(read_prefix(-1)) == previous.sha256 else REWRITTEN
    if current.size > previous.size and previous.consumed_bytes > 0:
        if sha256_bytes(read_prefix(previous.consumed_bytes)) == previous.prefix_sha256:
            return GROWN
    return REWRITTEN


def stat_changed(current: FileStat | None, remembered: tuple[int, int] | None) -> bool:
    """The sensor's test, from stats and its cursor only: anything a run should look at."""
    if current is None or remembered is None:
        return current is not None or remembered is not None
    return (current.size, current.mtime_ns) != tuple(remembered)
