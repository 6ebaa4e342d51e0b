"""Conversation threads (spec 001 "Track conversation threads"): related discussions across sessions, linked.

Two sessions of one project are linked by how related they are, 0..1 (`link_score`): a weighted mean of the cosine
of their summary embeddings, the best cosine between a chunk of one and a chunk of the other (one shared episode
links two otherwise different sessions), the Jaccard overlap of their topics and the overlap of the files they
modified, counting only the signals both sessions have; then lowered by the time between them (by at most half,
halving with every `half_life_days`) and cut to nothing beyond `max_gap_days`. Threads are grown by average-linkage
clustering: the two groups whose mean link is highest merge while that mean reaches `similarity_threshold`, so one
chatty session cannot chain unrelated work together the way connected components would.

A session related to no other is in no thread: `build_threads` returns threads of two or more sessions, and a
session that appears in none has no related discussion. The result depends only on the input set, not its order.
The defaults are calibrated on the offline MiniLM embedder (related sessions score about 0.6-0.8, unrelated
sessions of the same project about 0.2-0.4); `benchmarks/threads.py` measures other thresholds.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

SIMILARITY_THRESHOLD = 0.5
MAX_GAP_DAYS = 90.0
HALF_LIFE_DAYS = 30.0
TIME_FLOOR = 0.7  # however far apart (within max_gap_days), time takes at most 30% of a link
MAX_CHUNK_SEGMENTS = 16  # a longer session's chunks are averaged into this many consecutive segments
TITLE_TOPICS = 3
THREAD_TOPICS = 5


@dataclass(frozen=True)
class LinkWeights:
    """How much each signal counts in a link; a signal only one of the two sessions has is left out."""

    summary: float = 0.4
    chunks: float = 0.3
    topics: float = 0.15
    files: float = 0.15


@dataclass(frozen=True)
class ThreadInput:
    """What threading needs of one session: its latest summary's topics, files and vector, its chunk vectors."""

    session_id: str
    project: str
    started_at: datetime | None
    ended_at: datetime | None = None
    topics: Sequence[str] = ()
    files: Sequence[str] = ()  # the summary's files_modified
    summary_vector: Sequence[float] | None = None
    chunk_vectors: Sequence[Sequence[float]] = ()  # in chunk order


@dataclass(frozen=True)
class Thread:
    """Related sessions of one project, in time order."""

    thread_id: str  # "t-" + hash of the earliest session id: stable while that session stays the earliest
    project: str
    session_ids: tuple[str, ...]
    title: str  # the topics its sessions share, else their most frequent ones
    topics: tuple[str, ...]
    cohesion: float  # mean link score over all pairs of its sessions, 0..1


@dataclass(frozen=True)
class _Session:
    """A ThreadInput with unit vectors and sets, computed once rather than once per pair."""

    source: ThreadInput
    summary: np.ndarray | None
    chunks: np.ndarray | None  # (segments, dimensions), unit rows
    topics: frozenset[str]
    files: frozenset[str]


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def _prepare(session: ThreadInput) -> _Session:
    summary = None
    if session.summary_vector is not None and len(session.summary_vector):
        summary = _unit_rows(np.asarray(session.summary_vector, dtype=np.float64))
    chunks = None
    if len(session.chunk_vectors):
        rows = _unit_rows(np.asarray(session.chunk_vectors, dtype=np.float64))
        if len(rows) > MAX_CHUNK_SEGMENTS:  # bounds the cost per pair; segments keep a session's topical stretches
            rows = _unit_rows(np.stack([part.mean(axis=0) for part in np.array_split(rows, MAX_CHUNK_SEGMENTS)]))
        chunks = rows
    return _Session(session, summary, chunks, frozenset(session.topics), frozenset(session.files))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b)


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Shared files relative to the smaller set: a short fix inside a long refactor still overlaps fully."""
    return len(a & b) / min(len(a), len(b))


def _gap_days(a: ThreadInput, b: ThreadInput) -> float | None:
    """Days between the end of the earlier session and the start of the later one (0 when they overlap)."""
    if a.started_at is None or b.started_at is None:
        return None
    first, second = sorted((a, b), key=lambda s: s.started_at)
    end = first.ended_at or first.started_at
    return max((second.started_at - end).total_seconds(), 0.0) / 86400


def _link(
    a: _Session, b: _Session, *, weights: LinkWeights, max_gap_days: float | None, half_life_days: float
) -> float:
    gap = _gap_days(a.source, b.source)
    if a.source.project != b.source.project or (gap is not None and max_gap_days is not None and gap > max_gap_days):
        return 0.0
    signals: list[tuple[float, float]] = []
    if a.summary is not None and b.summary is not None:
        signals.append((weights.summary, float(a.summary @ b.summary)))
    if a.chunks is not None and b.chunks is not None:
        signals.append((weights.chunks, float((a.chunks @ b.chunks.T).max())))
    if a.topics and b.topics:
        signals.append((weights.topics, _jaccard(a.topics, b.topics)))
    if a.files and b.files:
        signals.append((weights.files, _overlap(a.files, b.files)))
    total = sum(weight for weight, _ in signals)
    if not total:
        return 0.0
    content = max(sum(weight * value for weight, value in signals) / total, 0.0)
    if gap is None:
        return content
    return content * (TIME_FLOOR + (1 - TIME_FLOOR) * 0.5 ** (gap / half_life_days))


def link_score(
    a: ThreadInput,
    b: ThreadInput,
    *,
    weights: LinkWeights = LinkWeights(),
    max_gap_days: float | None = MAX_GAP_DAYS,
    half_life_days: float = HALF_LIFE_DAYS,
) -> float:
    """How related two sessions are, 0..1 (0 across projects or beyond max_gap_days); symmetric."""
    return _link(_prepare(a), _prepare(b), weights=weights, max_gap_days=max_gap_days, half_life_days=half_life_days)


def _time_order(session: ThreadInput) -> tuple:
    return (session.started_at is None, session.started_at or datetime.min, session.session_id)


def _average_linkage(links: np.ndarray, threshold: float) -> list[list[int]]:
    """Groups of indices, merged pairwise while the best mean link between two groups reaches the threshold."""
    groups: list[list[int]] = [[i] for i in range(len(links))]
    between = links.astype(np.float64, copy=True)
    np.fill_diagonal(between, -np.inf)
    alive = np.ones(len(links), dtype=bool)
    while alive.sum() > 1:
        best = int(np.argmax(between))  # first maximum in row-major order: ties resolve the same way every time
        i, j = divmod(best, len(links))
        if between[i, j] < threshold:
            break
        size_i, size_j = len(groups[i]), len(groups[j])
        merged = (between[i] * size_i + between[j] * size_j) / (size_i + size_j)
        between[i], between[:, i] = merged, merged
        between[i, i] = -np.inf
        between[j], between[:, j] = -np.inf, -np.inf
        groups[i] += groups[j]
        groups[j] = []
        alive[j] = False
    return [sorted(group) for group in groups if group]


def _describe(members: Sequence[ThreadInput]) -> tuple[tuple[str, ...], str]:
    """The thread's topics (those its sessions share, most shared first) and its title."""
    counts = Counter(topic for member in members for topic in dict.fromkeys(member.topics))
    ranked = [topic for topic, _ in counts.most_common()]  # ties keep first appearance, i.e. time order
    shared = [topic for topic in ranked if counts[topic] > 1]
    topics = tuple((shared or ranked)[:THREAD_TOPICS])
    title = ", ".join(topic.replace("-", " ") for topic in topics[:TITLE_TOPICS])
    return topics, title or f"{len(members)} related sessions"


def build_threads(
    sessions: Sequence[ThreadInput],
    *,
    similarity_threshold: float = SIMILARITY_THRESHOLD,
    max_gap_days: float | None = MAX_GAP_DAYS,
    half_life_days: float = HALF_LIFE_DAYS,
    weights: LinkWeights = LinkWeights(),
) -> list[Thread]:
    """Threads of two or more related sessions, per project, earliest thread first; sessions in no thread are
    related to none of the others. Pass each session once (ids are unique)."""
    by_project: dict[str, list[_Session]] = {}
    for session in sorted(sessions, key=_time_order):
        by_project.setdefault(session.project, []).append(_prepare(session))
    threads: list[tuple[tuple, Thread]] = []
    for project, members in by_project.items():
        links = np.zeros((len(members), len(members)))
        for i, a in enumerate(members):
            for j in range(i + 1, len(members)):
                links[i, j] = links[j, i] = _link(
                    a, members[j], weights=weights, max_gap_days=max_gap_days, half_life_days=half_life_days
                )
        for group in _average_linkage(links, similarity_threshold):
            if len(group) < 2:
                continue
            inputs = [members[i].source for i in group]
            topics, title = _describe(inputs)
            pairs = links[np.ix_(group, group)][np.triu_indices(len(group), 1)]
            threads.append((
                _time_order(inputs[0]),
                Thread(
                    thread_id="t-" + hashlib.sha256(inputs[0].session_id.encode()).hexdigest()[:12],
                    project=project,
                    session_ids=tuple(s.session_id for s in inputs),
                    title=title,
                    topics=topics,
                    cohesion=round(float(pairs.mean()), 4),
                ),
            ))
    return [thread for _, thread in sorted(threads, key=lambda item: item[0])]
