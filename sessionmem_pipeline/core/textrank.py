"""Centrality of texts within a set: TF-IDF rows and TextRank over their similarity graph.

Shared by the extractive summary (which sentences of a session say most of what it is about) and the recap
(which chunks are central to a session). Pure numpy, deterministic: no model, so it runs offline at no cost.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

DAMPING = 0.85
_MAX_ITERATIONS = 200
_CONVERGED = 1e-10


def tfidf_rows(documents: Sequence[Sequence[str]]) -> np.ndarray:
    """Unit-length TF-IDF rows (sublinear tf, idf = log(N/df)) of term lists, with only the columns that can link
    two documents.

    A term in every document weighs nothing (speaker labels, filler) and a term in one document links nothing, so
    neither gets a column; they still count in each row's length, so similarities stay true cosines. This keeps
    the matrix small for long sessions. A document without terms is a zero row.
    """
    counts = [Counter(document) for document in documents]
    document_frequency = Counter(term for count in counts for term in count)
    shared = sorted(term for term, df in document_frequency.items() if 1 < df < len(documents))
    columns = {term: i for i, term in enumerate(shared)}
    matrix = np.zeros((len(documents), len(columns)), dtype=np.float64)
    for row, count in enumerate(counts):
        weights = {
            term: (1 + math.log(n)) * math.log(len(documents) / document_frequency[term]) for term, n in count.items()
        }
        norm = math.sqrt(sum(w * w for w in weights.values()))
        for term in count.keys() & columns.keys():
            matrix[row, columns[term]] = weights[term] / norm
    return matrix


def textrank(rows: np.ndarray, damping: float = DAMPING) -> np.ndarray:
    """PageRank over the cosine-similarity graph of unit rows (negative similarities count as none); the ranks
    sum to 1. A row linked to nothing hands its rank to every row alike (the usual treatment of dangling nodes)."""
    count = len(rows)
    if count <= 1:
        return np.ones(count)
    similarity = np.clip(rows @ rows.T, 0.0, None)
    np.fill_diagonal(similarity, 0.0)
    out_weight = similarity.sum(axis=1, keepdims=True)
    transition = np.where(out_weight > 0, similarity / np.where(out_weight > 0, out_weight, 1.0), 1.0 / count)
    rank = np.full(count, 1.0 / count)
    for _ in range(_MAX_ITERATIONS):
        updated = (1 - damping) / count + damping * (transition.T @ rank)
        converged = float(np.abs(updated - rank).sum()) < _CONVERGED
        rank = updated
        if converged:
            break
    return rank
