"""Conversation threads (spec 001 "Track conversation threads"): related discussions across sessions, linked.

Two sessions of one project are linked by how related they are, 0..1 (`link_score`): a weighted mean of the cosine
of their summary embeddings, the best cosine between a chunk of one and a chunk of the other (one shared episode
links two otherwise different sessions), the Jaccard overlap of their topics and the overlap of the files they
modified, counting only the signals both sessions have; then lowered by the time between them (by at most
TIME_FLOOR's complement, half of that with every `half_life_days`) and cut to nothing beyond `max_gap_days`. Threads are grown by average-linkage
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


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def _segments(chunk_vectors: Sequence[Sequence[float]]) -> np.ndarray | None:
    """Unit chunk vectors; a long session's averaged into MAX_CHUNK_SEGMENTS consecutive stretches, which bounds
    the cost per pair while keeping the session's topical stretches apart."""
    if not len(chunk_vectors):
        return None
    rows = _unit_rows(np.asarray(chunk_vectors, dtype=np.float32))
    if len(rows) > MAX_CHUNK_SEGMENTS:
        rows = _unit_rows(np.stack([part.mean(axis=0) for part in np.array_split(rows, MAX_CHUNK_SEGMENTS)]))
    return rows


def _best_chunk_similarity(segments: Sequence[np.ndarray | None], linkable: np.ndarray) -> np.ndarray:
    """For each pair of sessions, the cosine of their most similar pair of chunks (0 where one has none), skipping
    what cannot link: each session is compared with the following ones up to the last it can link with, so in time
    order (the gap only grows) a long history costs time linear in its length, not quadratic."""
    best = np.zeros((len(segments), len(segments)), dtype=np.float32)
    owners = np.array([i for i, rows in enumerate(segments) if rows is not None], dtype=int)
    if len(owners) < 2:
        return best
    stacked = np.vstack([segments[i] for i in owners])
    offsets = np.concatenate([[0], np.cumsum([len(segments[i]) for i in owners])])
    for k, i in enumerate(owners[:-1]):
        reach = np.flatnonzero(linkable[i, owners[k + 1 :]])
        if not len(reach):
            continue
        last = k + 1 + reach[-1]
        block = stacked[offsets[k + 1] : offsets[last + 1]]
        per_row = (segments[i] @ block.T).max(axis=0)
        best[i, owners[k + 1 : last + 1]] = np.maximum.reduceat(per_row, offsets[k + 1 : last + 1] - offsets[k + 1])
    return np.maximum(best, best.T)


def _incidence(value_sets: Sequence[Sequence[str]]) -> np.ndarray:
    """Sessions x distinct values: 1 where the session has the value."""
    index = {value: i for i, value in enumerate(sorted({v for values in value_sets for v in values}))}
    matrix = np.zeros((len(value_sets), len(index)), dtype=np.float32)
    for row, values in enumerate(value_sets):
        matrix[row, [index[v] for v in set(values)]] = 1
    return matrix


def _set_overlaps(value_sets: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair: the Jaccard overlap, the overlap relative to the smaller set, and whether both sets are non-empty."""
    incidence = _incidence(value_sets)
    shared = incidence @ incidence.T
    sizes = incidence.sum(axis=1)
    union = sizes[:, None] + sizes[None, :] - shared
    smaller = np.minimum(sizes[:, None], sizes[None, :])
    jaccard = np.divide(shared, union, out=np.zeros_like(shared), where=union > 0)
    relative = np.divide(shared, smaller, out=np.zeros_like(shared), where=smaller > 0)
    return jaccard, relative, smaller > 0


def _time_factor(sessions: Sequence[ThreadInput], max_gap_days: float | None, half_life_days: float) -> np.ndarray:
    """Per pair, what time leaves of a link: from 1 (same day) down to TIME_FLOOR, and 0 beyond max_gap_days; 1
    where a start is unknown. The gap runs from the earlier session's end to the later one's start."""
    known = np.array([s.started_at is not None for s in sessions])
    start = np.array([s.started_at.timestamp() if s.started_at else 0.0 for s in sessions])
    end = np.array([(s.ended_at or s.started_at).timestamp() if s.started_at else 0.0 for s in sessions])
    gap = np.maximum(np.maximum(start[None, :] - end[:, None], start[:, None] - end[None, :]), 0.0) / 86400
    factor = TIME_FLOOR + (1 - TIME_FLOOR) * 0.5 ** (gap / half_life_days)
    if max_gap_days is not None:
        factor[gap > max_gap_days] = 0.0
    return np.where(np.outer(known, known), factor, 1.0)


def _link_matrix(
    sessions: Sequence[ThreadInput], *, weights: LinkWeights, max_gap_days: float | None, half_life_days: float
) -> np.ndarray:
    """Link scores of every pair (`link_score`), computed for all pairs at once."""
    has_summary = np.array([s.summary_vector is not None and len(s.summary_vector) > 0 for s in sessions])
    summaries = np.zeros((len(sessions), 1), dtype=np.float32)
    if has_summary.any():
        width = next(len(s.summary_vector) for s, ok in zip(sessions, has_summary, strict=True) if ok)
        summaries = _unit_rows(np.stack([
            np.asarray(s.summary_vector, dtype=np.float32) if ok else np.zeros(width, dtype=np.float32)
            for s, ok in zip(sessions, has_summary, strict=True)
        ]))
    projects = np.array([s.project for s in sessions], dtype=object)
    time_factor = _time_factor(sessions, max_gap_days, half_life_days) * (projects[:, None] == projects[None, :])
    segments = [_segments(s.chunk_vectors) for s in sessions]
    has_chunks = np.array([rows is not None for rows in segments])
    topic_jaccard, _, both_topics = _set_overlaps([s.topics for s in sessions])
    _, file_overlap, both_files = _set_overlaps([s.files for s in sessions])
    signals = [
        (weights.summary, summaries @ summaries.T, np.outer(has_summary, has_summary)),
        (weights.chunks, _best_chunk_similarity(segments, time_factor > 0), np.outer(has_chunks, has_chunks)),
        (weights.topics, topic_jaccard, both_topics),
        (weights.files, file_overlap, both_files),  # relative to the smaller set: a fix inside a refactor overlaps
    ]
    weighted = sum(weight * np.where(present, values, 0.0) for weight, values, present in signals)
    total = sum(weight * present for weight, _, present in signals)
    content = np.clip(np.divide(weighted, total, out=np.zeros_like(weighted), where=total > 0), 0.0, 1.0)
    links = content * time_factor
    np.fill_diagonal(links, 0.0)
    return links


def link_score(
    a: ThreadInput,
    b: ThreadInput,
    *,
    weights: LinkWeights = LinkWeights(),
    max_gap_days: float | None = MAX_GAP_DAYS,
    half_life_days: float = HALF_LIFE_DAYS,
) -> float:
    """How related two sessions are, 0..1 (0 across projects or beyond max_gap_days); symmetric."""
    links = _link_matrix([a, b], weights=weights, max_gap_days=max_gap_days, half_life_days=half_life_days)
    return float(links[0, 1])


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
    by_project: dict[str, list[ThreadInput]] = {}
    for session in sorted(sessions, key=_time_order):
        by_project.setdefault(session.project, []).append(session)
    threads: list[tuple[tuple, Thread]] = []
    for project, members in by_project.items():
        links = _link_matrix(members, weights=weights, max_gap_days=max_gap_days, half_life_days=half_life_days)
        for group in _average_linkage(links, similarity_threshold):
            if len(group) < 2:
                continue
            inputs = [members[i] for i in group]
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
