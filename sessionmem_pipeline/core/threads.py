"""Conversation threads (spec 001 "Track conversation threads"): related discussions across sessions, linked.

Two sessions of one project are linked by how related they are, 0..1 (`link_score`): a weighted mean of the cosine
of their summary embeddings, the best cosine between a chunk of one and a chunk of the other (one shared episode
links two otherwise different sessions), the Jaccard overlap of their topics and the overlap of the files they
modified, counting only the signals both sessions have; then lowered by the time between them (by at most
TIME_FLOOR's complement, half of that with every `half_life_days`) and cut to nothing beyond `max_gap_days`.
Vectors are compared on a fine grid, which makes each score exact and independent of the sessions computed with it
(`_on_grid`): links computed apart, as the threads stage does for what changed, combine exactly. Threads are grown
by average-linkage clustering: the two groups whose mean link is highest merge while that mean reaches
`similarity_threshold`, so one chatty session cannot chain unrelated work together the way connected components
would.

A session related to no other is in no thread: `build_threads` returns threads of two or more sessions, and a
session that appears in none has no related discussion. The result depends only on the input set, not its order.
The defaults are calibrated on the offline MiniLM embedder (related sessions score about 0.6-0.8, unrelated
sessions of the same project about 0.2-0.4); `benchmarks/threads.py` measures what keeping threads current costs.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
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
GRID_BITS = 24  # vectors are compared on a grid of 2**-24 (see _on_grid)


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


def _on_grid(unit_rows: np.ndarray) -> np.ndarray:
    """Unit vectors rounded to multiples of 2**-GRID_BITS, as float64: every product of two is an integer times
    2**-2*GRID_BITS and every partial sum of a dot product stays below 2**53 of those units (Cauchy-Schwarz), so a
    matrix product of them is exact, whatever the batch, order or BLAS kernel: a link never depends on which other
    sessions were computed with it (an incremental update then equals a full rebuild bit for bit)."""
    return np.round(unit_rows.astype(np.float64) * 2.0**GRID_BITS)


def _cosines(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Exact products of grid vectors (`_on_grid`), scaled back to cosines."""
    return (rows @ cols.T) * 2.0 ** (-2 * GRID_BITS)


def _segments(chunk_vectors: Sequence[Sequence[float]]) -> np.ndarray | None:
    """Unit chunk vectors on the grid; a long session's averaged into MAX_CHUNK_SEGMENTS consecutive stretches,
    which bounds the cost per pair while keeping the session's topical stretches apart."""
    if not len(chunk_vectors):
        return None
    rows = _unit_rows(np.asarray(chunk_vectors, dtype=np.float32))
    if len(rows) > MAX_CHUNK_SEGMENTS:
        rows = _unit_rows(np.stack([part.mean(axis=0) for part in np.array_split(rows, MAX_CHUNK_SEGMENTS)]))
    return _on_grid(rows)


def _best_chunk_similarity(
    rows: Sequence[np.ndarray | None], cols: Sequence[np.ndarray | None], linkable: np.ndarray
) -> np.ndarray:
    """For each pair (row session, column session), the cosine of their most similar pair of chunks (0 where one
    has none or they cannot link). Each row session is compared with the stretch of column sessions from the first
    to the last it can link with: in time order (the gap only grows) that is a window, so a long history costs
    time linear in its length, not quadratic."""
    best = np.zeros((len(rows), len(cols)))
    owners = np.array([j for j, segments in enumerate(cols) if segments is not None], dtype=int)
    if not len(owners):
        return best
    stacked = np.vstack([cols[j] for j in owners])
    offsets = np.concatenate([[0], np.cumsum([len(cols[j]) for j in owners])])
    for i, segments in enumerate(rows):
        reach = np.flatnonzero(linkable[i, owners]) if segments is not None else ()
        if not len(reach):
            continue
        first, last = reach[0], reach[-1]
        per_column = _cosines(segments, stacked[offsets[first] : offsets[last + 1]]).max(axis=0)
        window = np.maximum.reduceat(per_column, offsets[first : last + 1] - offsets[first])
        best[i, owners[first : last + 1]] = window
    return np.where(linkable, best, 0.0)


def _memberships(value_sets: Sequence[Sequence[str]], index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Each (session, value) the sessions have, as two arrays: session positions and value numbers (`index`)."""
    owners, values = [], []
    for owner, value_set in enumerate(value_sets):
        numbers = {index[v] for v in value_set}
        owners += [owner] * len(numbers)
        values += numbers
    return np.array(owners, dtype=np.intp), np.array(values, dtype=np.intp)


def _set_overlaps(
    rows: Sequence[Sequence[str]], cols: Sequence[Sequence[str]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair: the Jaccard overlap, the overlap relative to the smaller set, and whether both sets are non-empty.
    The shared counts are counted per value over the sessions holding it (a session has few values, so that costs
    far less than a product of sessions-by-values matrices; exact small integers either way)."""
    index = {value: i for i, value in enumerate(sorted({v for values in [*rows, *cols] for v in values}))}
    (row_owners, row_values), (col_owners, col_values) = _memberships(rows, index), _memberships(cols, index)
    by_value = np.argsort(col_values, kind="stable")
    col_owners, col_values = col_owners[by_value], col_values[by_value]
    first = np.searchsorted(col_values, row_values, side="left")
    holders = np.searchsorted(col_values, row_values, side="right") - first  # column sessions with each row value
    starts = np.repeat(first - (np.cumsum(holders) - holders), holders)
    pair_cols = col_owners[starts + np.arange(len(starts))]
    pair_rows = np.repeat(row_owners, holders)
    shared = np.bincount(pair_rows * len(cols) + pair_cols, minlength=len(rows) * len(cols))
    shared = shared.reshape(len(rows), len(cols)).astype(np.float32)  # counts below 2**24: exact
    row_sizes = np.bincount(row_owners, minlength=len(rows)).astype(np.float32)
    col_sizes = np.bincount(col_owners, minlength=len(cols)).astype(np.float32)
    union = row_sizes[:, None] + col_sizes[None, :] - shared
    smaller = np.minimum(row_sizes[:, None], col_sizes[None, :])
    jaccard = np.divide(shared, union, out=np.zeros_like(shared), where=union > 0)
    relative = np.divide(shared, smaller, out=np.zeros_like(shared), where=smaller > 0)
    return jaccard, relative, smaller > 0


def _times(sessions: Sequence[ThreadInput]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    known = np.array([s.started_at is not None for s in sessions])
    start = np.array([s.started_at.timestamp() if s.started_at else 0.0 for s in sessions])
    end = np.array([(s.ended_at or s.started_at).timestamp() if s.started_at else 0.0 for s in sessions])
    return known, start, end


def _time_factor(
    rows: Sequence[ThreadInput], cols: Sequence[ThreadInput], max_gap_days: float | None, half_life_days: float
) -> np.ndarray:
    """Per pair, what time leaves of a link: from 1 (same day) down to TIME_FLOOR, and 0 beyond max_gap_days; 1
    where a start is unknown. The gap runs from the earlier session's end to the later one's start."""
    (row_known, row_start, row_end), (col_known, col_start, col_end) = _times(rows), _times(cols)
    gap = np.maximum(np.maximum(col_start[None, :] - row_end[:, None], row_start[:, None] - col_end[None, :]), 0.0)
    factor = TIME_FLOOR + (1 - TIME_FLOOR) * 0.5 ** (gap / 86400 / half_life_days)
    if max_gap_days is not None:
        factor[gap / 86400 > max_gap_days] = 0.0
    return np.where(np.outer(row_known, col_known), factor, 1.0)


def _summary_grid(sessions: Sequence[ThreadInput], width: int) -> tuple[np.ndarray, np.ndarray]:
    """The sessions' summary vectors on the grid (zeros where a session has none), and which have one."""
    has_summary = np.array([s.summary_vector is not None and len(s.summary_vector) > 0 for s in sessions], dtype=bool)
    vectors = np.zeros((len(sessions), width), dtype=np.float32)
    for row in np.flatnonzero(has_summary):
        vectors[row] = np.asarray(sessions[row].summary_vector, dtype=np.float32)
    return _on_grid(_unit_rows(vectors)), has_summary


def _link_matrix(
    rows: Sequence[ThreadInput],
    cols: Sequence[ThreadInput],
    *,
    weights: LinkWeights,
    max_gap_days: float | None,
    half_life_days: float,
) -> np.ndarray:
    """Link scores (`link_score`) of every row session with every column session, computed at once; each score
    depends only on its two sessions (exact products, element-wise arithmetic)."""
    width = next((len(s.summary_vector) for s in [*rows, *cols] if s.summary_vector is not None
                  and len(s.summary_vector)), 1)
    (row_summaries, row_has_summary), (col_summaries, col_has_summary) = (
        _summary_grid(rows, width), _summary_grid(cols, width))
    row_projects = np.array([s.project for s in rows], dtype=object)
    col_projects = np.array([s.project for s in cols], dtype=object)
    time_factor = _time_factor(rows, cols, max_gap_days, half_life_days) * (row_projects[:, None] == col_projects)
    row_segments, col_segments = [_segments(s.chunk_vectors) for s in rows], [_segments(s.chunk_vectors) for s in cols]
    row_has_chunks = np.array([segments is not None for segments in row_segments], dtype=bool)
    col_has_chunks = np.array([segments is not None for segments in col_segments], dtype=bool)
    topic_jaccard, _, both_topics = _set_overlaps([s.topics for s in rows], [s.topics for s in cols])
    _, file_overlap, both_files = _set_overlaps([s.files for s in rows], [s.files for s in cols])
    signals = [
        (weights.summary, _cosines(row_summaries, col_summaries), np.outer(row_has_summary, col_has_summary)),
        (weights.chunks, _best_chunk_similarity(row_segments, col_segments, time_factor > 0),
         np.outer(row_has_chunks, col_has_chunks)),
        (weights.topics, topic_jaccard, both_topics),
        (weights.files, file_overlap, both_files),  # relative to the smaller set: a fix inside a refactor overlaps
    ]
    weighted = sum(weight * np.where(present, values, 0.0) for weight, values, present in signals)
    total = sum(weight * present for weight, _, present in signals)
    content = np.clip(np.divide(weighted, total, out=np.zeros_like(weighted), where=total > 0), 0.0, 1.0)
    return content * time_factor


def link_scores(
    rows: Sequence[ThreadInput],
    cols: Sequence[ThreadInput],
    *,
    weights: LinkWeights = LinkWeights(),
    max_gap_days: float | None = MAX_GAP_DAYS,
    half_life_days: float = HALF_LIFE_DAYS,
) -> np.ndarray:
    """How related each row session is to each column session, 0..1 (0 across projects or beyond max_gap_days).
    A score depends only on its two sessions, bit for bit, so scores computed in separate calls combine exactly."""
    return _link_matrix(rows, cols, weights=weights, max_gap_days=max_gap_days, half_life_days=half_life_days)


def link_score(a: ThreadInput, b: ThreadInput, **options) -> float:
    """How related two sessions are (`link_scores`); symmetric."""
    return float(link_scores([a], [b], **options)[0, 0])


def strong_components(sessions: Iterable[str], strong_links: Iterable[tuple[str, str]]) -> list[set[str]]:
    """The sessions grouped by the links at or above the similarity threshold: connected components.

    Average linkage merges two groups only while their mean link reaches the threshold, which needs one pair
    between them to reach it; so every thread lies inside one component, and since merges in different components
    never interact (the first maximum of a component's links is the first of the whole matrix restricted to it),
    clustering each component alone gives exactly the threads of clustering the whole project."""
    parent = {session: session for session in sessions}

    def root(session: str) -> str:
        while parent[session] != session:
            parent[session] = parent[parent[session]]
            session = parent[session]
        return session

    for a, b in strong_links:
        parent[root(a)] = root(b)
    groups: dict[str, set[str]] = {}
    for session in parent:
        groups.setdefault(root(session), set()).add(session)
    return list(groups.values())


def _time_order(session: ThreadInput) -> tuple:
    return (session.started_at is None, session.started_at or datetime.min, session.session_id)


def _average_linkage(links: np.ndarray, threshold: float) -> list[list[int]]:
    """Groups of indices, merged pairwise while the best mean link between two groups reaches the threshold.

    The pair merged is always the first maximum of the matrix in row-major order, so ties resolve the same way
    every time; it is found from each row's first maximum (kept up to date: a merge changes two columns, so only
    rows whose maximum was there are searched again), which makes a merge cost a row, not the matrix."""
    groups: list[list[int]] = [[i] for i in range(len(links))]
    between = links.astype(np.float64, copy=True)
    np.fill_diagonal(between, -np.inf)
    best_col = between.argmax(axis=1) if len(links) else np.zeros(0, dtype=int)
    best = between[np.arange(len(links)), best_col]
    while len(links) > 1:
        i = int(np.argmax(best))  # the first row holding the maximum, and its first column holding it
        j = int(best_col[i])
        if not best[i] >= threshold:
            break
        size_i, size_j = len(groups[i]), len(groups[j])
        merged = (between[i] * size_i + between[j] * size_j) / (size_i + size_j)
        between[i], between[:, i] = merged, merged
        between[i, i] = -np.inf
        between[j], between[:, j] = -np.inf, -np.inf
        groups[i] += groups[j]
        groups[j] = []
        stale = (best_col == i) | (best_col == j)
        stale[[i, j]] = True
        column = between[:, i]
        better = ~stale & ((column > best) | ((column == best) & (i < best_col)))
        best_col[better], best[better] = i, column[better]
        rows = np.flatnonzero(stale)
        best_col[rows] = between[rows].argmax(axis=1)
        best[rows] = between[rows, best_col[rows]]
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
    scored: Callable[[Sequence[ThreadInput]], np.ndarray | None] = lambda members: None,
) -> list[Thread]:
    """Threads of two or more related sessions, per project, earliest thread first; sessions in no thread are
    related to none of the others. Pass each session once (ids are unique). `scored(members)`: their link scores
    (`link_scores(members, members)`) where the caller has computed them already, else None."""
    by_project: dict[str, list[ThreadInput]] = {}
    for session in sorted(sessions, key=_time_order):
        by_project.setdefault(session.project, []).append(session)
    threads: list[tuple[tuple, Thread]] = []
    for project, members in by_project.items():
        links = scored(members)
        if links is None:
            links = _link_matrix(members, members, weights=weights, max_gap_days=max_gap_days,
                                 half_life_days=half_life_days)
        np.fill_diagonal(links, 0.0)
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
