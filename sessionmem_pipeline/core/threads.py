"""Conversation threads (spec 001 "Track conversation threads"): related discussions across sessions, linked.

Two sessions are linked when their summaries say similar things (cosine of the summary embeddings), they share
topics or modified files, and they are not far apart in time; threads are the connected groups of linked
sessions. A session with no related session is in no thread. Deterministic: the same sessions give the same
threads and ids.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

LINK_THRESHOLD = 0.5
HALF_LIFE_DAYS = 30.0  # a month apart counts half as much as the same day
WEIGHTS = {"summary": 0.6, "topics": 0.25, "files": 0.15}


@dataclass(frozen=True)
class ThreadInput:
    """What threading needs of one session."""

    session_id: str
    project: str
    started_at: datetime | None
    topics: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    summary_vector: Sequence[float] | None = None


@dataclass(frozen=True)
class Thread:
    thread_id: str
    session_ids: tuple[str, ...]  # in time order
    title: str
    topics: tuple[str, ...] = field(default_factory=tuple)


def _jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    left, right = set(a), set(b)
    return len(left & right) / len(left | right) if left and right else 0.0


def _cosine(a: Sequence[float] | None, b: Sequence[float] | None) -> float:
    if a is None or b is None:
        return 0.0
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norm = np.linalg.norm(x) * np.linalg.norm(y)
    return float(x @ y / norm) if norm else 0.0


def link_score(a: ThreadInput, b: ThreadInput) -> float:
    """How related two sessions are, 0..1: content similarity, decayed by the time between them."""
    content = (
        WEIGHTS["summary"] * max(_cosine(a.summary_vector, b.summary_vector), 0.0)
        + WEIGHTS["topics"] * _jaccard(a.topics, b.topics)
        + WEIGHTS["files"] * _jaccard(a.files, b.files)
    )
    if a.started_at and b.started_at:
        days = abs((a.started_at - b.started_at).total_seconds()) / 86400
        content *= 0.5 + 0.5 * math.pow(0.5, days / HALF_LIFE_DAYS)  # time lowers a link, never erases it
    return content


def build_threads(sessions: Sequence[ThreadInput], *, threshold: float = LINK_THRESHOLD) -> list[Thread]:
    """Threads of two or more linked sessions (same project), earliest thread first."""
    parent = {s.session_id: s.session_id for s in sessions}

    def root(node: str) -> str:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    ordered = sorted(sessions, key=lambda s: (s.started_at is None, s.started_at or datetime.min, s.session_id))
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if a.project == b.project and link_score(a, b) >= threshold:
                parent[root(b.session_id)] = root(a.session_id)
    groups: dict[str, list[ThreadInput]] = {}
    for session in ordered:
        groups.setdefault(root(session.session_id), []).append(session)
    threads = []
    for members in groups.values():
        if len(members) < 2:
            continue
        counts = Counter(topic for member in members for topic in dict.fromkeys(member.topics))
        shared = tuple(topic for topic, n in counts.most_common(5) if n > 1) or tuple(t for t, _ in counts.most_common(3))
        ids = tuple(m.session_id for m in members)
        thread_id = "t-" + hashlib.sha256(ids[0].encode()).hexdigest()[:12]
        title = ", ".join(t.replace("-", " ") for t in shared[:3]) or f"{len(ids)} related sessions"
        threads.append(Thread(thread_id, ids, title, shared))
    return threads
