"""Search latency at scale (issue 6): the client's vector query plans against an exact scan, BM25, HNSW builds.

    .venv/bin/python benchmarks/search_latency.py [--chunks 10000 100000] [--queries 200] [--json]
        [--workdir DIR]   keep the synthetic warehouses in DIR and reuse them (builds are then not re-timed)

Builds synthetic warehouses through the project's Warehouse module, rows written straight in with Arrow:
sessions of 1 to ~100 chunks spread over a year, 50 projects of skewed size, two user speakers and the assistant,
200 topics each project favours a few of, ~20% decisions, ~30% actions, pseudo-word text with a contextual prefix
(the project's own `contextual_prefix`) for BM25, and low-rank 384-d vectors (48 latent dimensions clustered by
topic and session, a shared direction, isotropic noise, L2-normalized) that are not embedded by the model. The
HNSW index is created the way the warehouse does it (before the rows, by `ensure_embedding_table`), and, for
comparison, on a copy of the vectors after a bulk insert.

Queries are stored vectors moved within the latent space and by noise (cosine ~0.8 to their source), handed to
`SessionMemory.vector_ranking` by a fixed-vector embedder, so latency excludes the query embedding. For each
filter, per query: the client's plan ("plan"), an exact scan of the same rows ("exact", the baseline, run
interleaved with the plan so load from other processes hits both), recall@10 of the plan against the exact scan,
and BM25 (`bm25_ranking`) with two topic words and a common word. Also the first query of a freshly opened client
(what one `sessionmem search` process pays: the HNSW index is read from disk on first use).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from sessionmem_pipeline.client import Filters, SessionMemory, vector_literal
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.core.context import SessionContext, contextual_prefix
from sessionmem_pipeline.warehouse import Warehouse, publish_snapshot

DIMENSIONS = 384
LATENT = 48
TOPICS = 200
PROJECTS = 50
LIMIT = 10
MODEL = "synthetic:low-rank-384"
TIMEZONE = "UTC"
YEAR_START = datetime(2025, 1, 1, tzinfo=UTC)
USERS = ("Jason", "Ana", "Wei", "Priya", "Tom")
AREAS = (
    "auth", "billing", "cache", "deploy", "docker", "search", "index", "api", "schema", "migration", "tests", "ui",
    "payments", "logging", "queue", "webhooks", "metrics", "alerts", "oauth", "cli", "parser", "embeddings",
    "backups", "ci", "terraform", "kubernetes", "dns", "email", "reports", "export",
)
SYLLABLES = ("ka", "lo", "mi", "ren", "tas", "vo", "bri", "den", "fu", "gal", "hor", "ix", "jun", "kel", "mor",
             "nab", "ost", "pra", "quin", "rux", "sel", "tor", "ul", "ves", "wim", "yar", "zed", "ba", "ce", "do")


@dataclass
class Corpus:
    """Rows for the warehouse and what the queries are drawn from."""

    sessions: pa.Table
    chunks: pa.Table
    embeddings: pa.Table
    vectors: np.ndarray
    chunk_topic: np.ndarray
    topic_words: list[list[str]]
    common_words: list[str]
    basis: np.ndarray


def topic_names() -> list[str]:
    return [f"{a}-{b}" for i, a in enumerate(AREAS) for b in AREAS[i + 1 :]][:TOPICS]


def pseudo_words(count: int, rng: np.random.Generator) -> list[str]:
    """Distinct made-up words of 2 to 4 syllables (BM25 only cares that they are tokens)."""
    words: dict[str, None] = {}
    while len(words) < count:
        parts = rng.integers(0, len(SYLLABLES), 4)
        words["".join(SYLLABLES[p] for p in parts[: 2 + len(words) % 3])] = None
    return list(words)


def synthetic_corpus(count: int, seed: int = 7) -> Corpus:
    """`count` chunks with realistic metadata, text and low-rank topic-clustered vectors."""
    rng = np.random.default_rng(seed)
    lengths = rng.geometric(1 / 20, size=count)  # chunks per session, mean 20
    sessions = int(np.searchsorted(np.cumsum(lengths), count)) + 1
    session_of = np.repeat(np.arange(sessions), lengths[:sessions])[:count]
    chunk_index = np.arange(count) - np.searchsorted(session_of, session_of)
    weights = 1 / np.arange(1, PROJECTS + 1) ** 0.8
    project_of_session = rng.choice(PROJECTS, sessions, p=weights / weights.sum())
    favourites = rng.integers(0, TOPICS, (PROJECTS, 8))
    session_topics = np.where(
        rng.random((sessions, 3)) < 0.8,
        favourites[project_of_session[:, None], rng.integers(0, 8, (sessions, 3))],
        rng.integers(0, TOPICS, (sessions, 3)),
    )
    topic_count = rng.integers(1, 4, sessions)
    primary = session_topics[session_of, (rng.random(count) * topic_count[session_of]).astype(int)]
    secondary = session_topics[session_of, (rng.random(count) * topic_count[session_of]).astype(int)]
    user_of_session = rng.integers(0, len(USERS), sessions)
    starts = [YEAR_START + timedelta(seconds=float(s)) for s in rng.uniform(0, 365 * 86400, sessions)]
    minutes = rng.uniform(1, 8, count)
    offsets = np.cumsum(minutes) - np.cumsum(minutes)[np.searchsorted(session_of, session_of)]
    ts_start = [starts[s] + timedelta(minutes=float(m)) for s, m in zip(session_of, offsets, strict=True)]

    names = topic_names()
    vocabulary = pseudo_words(TOPICS * 30 + 800, rng)
    topic_words = [vocabulary[t * 30 : (t + 1) * 30] for t in range(TOPICS)]
    common_words = vocabulary[TOPICS * 30 :]
    zipf = 1 / np.arange(1, len(common_words) + 1)
    common_picks = rng.choice(len(common_words), (count, 56), p=zipf / zipf.sum())
    topic_picks = rng.integers(0, 30, (count, 24))
    contents = [
        " ".join([*(topic_words[t][i] for i in tp), *(common_words[i] for i in cp)])
        for t, tp, cp in zip(primary, topic_picks, common_picks, strict=True)
    ]
    first_requests = [f"help me with the {names[session_topics[s, 0]].replace('-', ' ')} work" for s in range(sessions)]
    chunk_topics = [
        [names[p]] if p == q else [names[p], names[q]] for p, q in zip(primary, secondary, strict=True)
    ]
    speakers = [[USERS[user_of_session[s]], "assistant"] for s in session_of]
    prefixes = [
        contextual_prefix(
            SessionContext(f"project-{project_of_session[s]}", starts[s], first_requests[s], TIMEZONE),
            speakers[i],
            chunk_topics[i],
            ts_start[i],
        )
        for i, s in enumerate(session_of)
    ]
    context_content = [f"{p}\n\n{c}" for p, c in zip(prefixes, contents, strict=True)]
    content_hashes = [hashlib.sha256(c.encode()).hexdigest() for c in contents]
    context_hashes = [hashlib.sha256(c.encode()).hexdigest() for c in context_content]
    session_ids = [f"session-{s:06d}" for s in session_of]
    chunk_ids = [f"{sid}:{i}:{h[:16]}" for sid, i, h in zip(session_ids, chunk_index, content_hashes, strict=True)]
    roles = [["assistant"] if r < 0.15 else ["user", "assistant"] for r in rng.random(count)]

    basis = rng.normal(size=(LATENT, DIMENSIONS)).astype(np.float32) / np.sqrt(LATENT)
    centers = rng.normal(size=(TOPICS, LATENT)).astype(np.float32)
    shared = rng.normal(size=LATENT).astype(np.float32)
    latent = (
        0.5 * shared
        + centers[primary]
        + 0.35 * centers[secondary]
        + 0.5 * rng.normal(size=(sessions, LATENT)).astype(np.float32)[session_of]
        + 0.6 * rng.normal(size=(count, LATENT)).astype(np.float32)
    )
    vectors = latent @ basis + 0.35 * rng.normal(size=(count, DIMENSIONS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    first_chunk = np.searchsorted(session_of, np.arange(sessions))
    last_chunk = np.searchsorted(session_of, np.arange(sessions), side="right") - 1
    session_table = pa.table(
        {
            "session_id": [f"session-{s:06d}" for s in range(sessions)],
            "partition_key": [f"session-{s:06d}" for s in range(sessions)],
            "project": [f"project-{p}" for p in project_of_session],
            "source_path": [f"/home/dev/.claude/projects/p{p}/session-{s:06d}.jsonl"
                            for s, p in enumerate(project_of_session)],
            "format": ["claude_code"] * sessions,
            "started_at": starts,
            "ended_at": [ts_start[i] + timedelta(minutes=3) for i in last_chunk],
            "message_count": (last_chunk - first_chunk + 1) * 4,
            "first_request": first_requests,
            "speakers": [[USERS[u], "assistant"] for u in user_of_session],
        }
    )
    chunk_table = pa.table(
        {
            "chunk_id": chunk_ids,
            "session_id": session_ids,
            "project": [f"project-{project_of_session[s]}" for s in session_of],
            "chunk_index": chunk_index.astype(np.int32),
            "message_ids": [[f"{sid}-m{4 * i + k}" for k in range(4)] for sid, i in zip(session_ids, chunk_index)],
            "ts_start": ts_start,
            "ts_end": [t + timedelta(minutes=3) for t in ts_start],
            "speakers": speakers,
            "roles": roles,
            "topics": chunk_topics,
            "has_decision": rng.random(count) < 0.2,
            "has_action": rng.random(count) < 0.3,
            "continued": np.zeros(count, dtype=bool),
            "token_count": rng.integers(80, 400, count).astype(np.int32),
            "content": contents,
            "context": [f"project-{project_of_session[s]} session" for s in session_of],
            "context_content": context_content,
            "content_hash": content_hashes,
            "context_hash": context_hashes,
        }
    )
    embedding_table = pa.table(
        {
            "chunk_id": chunk_ids,
            "session_id": session_ids,
            "text_hash": context_hashes,
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIMENSIONS),
        }
    )
    return Corpus(session_table, chunk_table, embedding_table, vectors, primary, topic_words, common_words, basis)
