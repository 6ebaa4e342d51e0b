"""Embed: vectors for chunks' contextual content (`chunk_embeddings`), cached by (model, text hash).

Work is committed batch by batch, so a run killed in the middle of a large session resumes with the chunks that
still have no vector. A chunk the provider could not embed (after its retries) is recorded in
`embedding_failures` and tried again on the next run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice

from sessionmem_pipeline.core.chunk import WORDPIECE_TOKENS_PER_CL100K, EmbedderWindow, effective_max_tokens
from sessionmem_pipeline.core.context import PREFIX_TOKEN_BUDGET
from sessionmem_pipeline.core.errors import ErrorType
from sessionmem_pipeline.providers.embedders import Embedder, LocalMiniLMEmbedder
from sessionmem_pipeline.warehouse import VECTOR_DELTA, Warehouse

BATCH_SIZE = 100  # spec 001: large sessions are embedded and written in batches of 100 chunks


@dataclass
class EmbedOutcome:
    embedded: int = 0  # vectors computed by the model
    cached: int = 0  # vectors reused from the cache
    failed: int = 0
    stale_removed: int = 0
    recreated: bool = False


def chunk_limits(embedder: Embedder, config_max: int) -> tuple[int, EmbedderWindow]:
    """The chunk size limit (cl100k tokens) and the embedder's own window after the prefix budget."""
    ratio = WORDPIECE_TOKENS_PER_CL100K if isinstance(embedder, LocalMiniLMEmbedder) else 1.0
    limit = effective_max_tokens(
        config_max, embedder.max_input_tokens, PREFIX_TOKEN_BUDGET, window_tokens_per_token=ratio
    )
    return limit, EmbedderWindow(embedder.count_model_tokens, embedder.max_input_tokens - PREFIX_TOKEN_BUDGET)


def embed_sessions(
    wh: Warehouse,
    session_ids: Sequence[str],
    embedder: Embedder,
    *,
    batch_size: int = BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
    leave: Callable[[list[dict]], set[str]] | None = None,
) -> EmbedOutcome:
    """Give every chunk of these sessions a vector of the configured model, but those whose context hash `leave`
    (given the chunks without a vector) returns: the provider's Batch API embeds them (stages/provider_batches.py)."""
    outcome = EmbedOutcome(recreated=wh.ensure_embedding_table(embedder.model_id, embedder.dimensions))
    with wh.transaction():
        outcome.stale_removed = wh.delete_stale_embeddings(session_ids)
    rows = wh.chunks_without_embedding(session_ids)
    if leave is not None:
        left = leave(rows)
        rows = [row for row in rows if row["context_hash"] not in left]
    pending = iter(rows)
    while batch := list(islice(pending, batch_size)):
        _embed_batch(wh, batch, embedder, outcome)
        if progress:
            progress(len(batch))
    return outcome


def _embed_batch(wh: Warehouse, batch: list[dict], embedder: Embedder, outcome: EmbedOutcome) -> None:
    model = embedder.model_id
    cached = wh.cached_embeddings(model, [row["context_hash"] for row in batch])
    misses = [row for row in batch if row["context_hash"] not in cached]
    result = embedder.embed_with_failures([row["context_content"] for row in misses]) if misses else None
    now = datetime.now(UTC)
    fresh = {}
    failures = []
    for index, row in enumerate(misses):
        vector = result.vector(index) if result else None
        if vector is None:
            failures.append((row, result.failures.get(index, "no vector") if result else "no vector"))
        else:
            fresh[row["context_hash"]] = [float(x) for x in vector]
    vectors = {**cached, **fresh}
    ids = [row["chunk_id"] for row in batch]
    tried = dict(wh.conn.execute(
        "SELECT chunk_id, attempts FROM embedding_failures WHERE chunk_id IN (SELECT unnest(?))", [ids]
    ).fetchall())
    with wh.transaction():
        wh.insert(
            "embedding_cache",
            [{"model": model, "text_hash": h, "embedding": v, "created_at": now} for h, v in fresh.items()],
        )
        embedded_rows = [
            {
                "chunk_id": row["chunk_id"],
                "session_id": row["session_id"],
                "text_hash": row["context_hash"],
                "embedding": vectors[row["context_hash"]],
            }
            for row in batch
            if row["context_hash"] in vectors
        ]
        wh.insert(VECTOR_DELTA, embedded_rows)  # searched exactly until the index takes it in
        wh.delete_where("embedding_failures", "chunk_id", ids)
        wh.insert(
            "embedding_failures",
            [
                {
                    "chunk_id": row["chunk_id"],
                    "session_id": row["session_id"],
                    "model": model,
                    "error": f"{ErrorType.EMBEDDING_FAILED}: {reason}",
                    "attempts": tried.get(row["chunk_id"], 0) + 1,  # runs that tried it
                    "last_attempt_at": now,
                }
                for row, reason in failures
            ],
        )
    outcome.embedded += len(fresh)
    outcome.cached += len(batch) - len(misses)
    outcome.failed += len(failures)
