"""Asset checks: statements about the warehouse that should always be true. They read through the writer's
connection (pool `duckdb_warehouse`), since checks run inside pipeline runs."""


import dagster as dg

from sessionmem_pipeline.defs.assets import chunk_embeddings, chunks, search_index
from sessionmem_pipeline.defs.partitions import WAREHOUSE_POOL
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.stages.embed import chunk_limits
from sessionmem_pipeline.warehouse import Warehouse, writer_lock


def _scalar(sessionmem: SessionmemResource, sql: str, params: list | None = None):
    settings = sessionmem.settings()
    with writer_lock(settings.warehouse, holder="dagster asset check"):
        with Warehouse(settings.warehouse) as wh:
            return wh.scalar(sql, params)


@dg.asset_check(asset=chunks, pool=WAREHOUSE_POOL, blocking=True)
def chunks_within_token_limit(sessionmem: SessionmemResource) -> dg.AssetCheckResult:
    """No chunk is larger than the chunk limit the embedder allows."""
    limit, _ = chunk_limits(sessionmem.embedder(), sessionmem.settings()["chunking.max_tokens"])
    over = _scalar(sessionmem, "SELECT count(*) FROM chunks WHERE token_count > ?", [limit])
    return dg.AssetCheckResult(passed=over == 0, metadata={"chunks_over_limit": over, "limit": limit})


@dg.asset_check(asset=chunks, pool=WAREHOUSE_POOL)
def no_empty_chunks(sessionmem: SessionmemResource) -> dg.AssetCheckResult:
    """Every chunk has content (an empty one would match nothing and waste a vector)."""
    empty = _scalar(sessionmem, "SELECT count(*) FROM chunks WHERE trim(content) = '' OR token_count = 0")
    return dg.AssetCheckResult(passed=empty == 0, metadata={"empty_chunks": empty})


@dg.asset_check(asset=chunks, pool=WAREHOUSE_POOL)
def every_message_is_chunked_or_dropped_with_a_reason(sessionmem: SessionmemResource) -> dg.AssetCheckResult:
    """No message silently disappears between the transcript and search."""
    lost = _scalar(
        sessionmem,
        """
        SELECT count(*) FROM collapsed_messages m
        WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.session_id = m.session_id AND list_contains(c.message_ids, m.message_id))
          AND NOT EXISTS (SELECT 1 FROM dropped_messages d WHERE d.session_id = m.session_id AND d.message_id = m.message_id)
        """,
    )
    return dg.AssetCheckResult(passed=lost == 0, metadata={"messages_lost": lost})


@dg.asset_check(asset=chunk_embeddings, pool=WAREHOUSE_POOL)
def every_chunk_has_an_embedding(sessionmem: SessionmemResource) -> dg.AssetCheckResult:
    """Every chunk has a vector of the configured model and dimension (a failed provider call leaves some
    without one; the next run retries them)."""
    embedder = sessionmem.embedder()
    missing = _scalar(
        sessionmem,
        "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM chunk_embeddings e WHERE e.chunk_id = c.chunk_id)",
    )
    stored = _scalar(sessionmem, "SELECT string_agg(value, '/' ORDER BY key) FROM meta WHERE key LIKE 'embedding_%'")
    expected = f"{embedder.dimensions}/{embedder.model_id}"
    return dg.AssetCheckResult(
        passed=missing == 0 and stored == expected,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"chunks_without_embedding": missing, "stored": stored or "", "configured": expected},
    )


@dg.asset_check(asset=search_index, pool=WAREHOUSE_POOL)
def search_index_covers_all_chunks(sessionmem: SessionmemResource) -> dg.AssetCheckResult:
    """The BM25 index has a document for every chunk."""
    missing = _scalar(
        sessionmem,
        "SELECT count(*) FROM chunks c WHERE NOT EXISTS "
        "(SELECT 1 FROM kw_docs d WHERE d.corpus = 'chunks' AND d.doc_id = c.chunk_id)",
    )
    return dg.AssetCheckResult(passed=missing == 0, metadata={"chunks_not_indexed": missing})


@dg.asset_check(asset=search_index)
def every_session_is_built_by_the_current_stages(sessionmem: SessionmemResource) -> dg.AssetCheckResult:
    """No session in the published snapshot waits for a stage of this sessionmem and configuration (the same
    stage state `health` and `status` read; summaries waiting for their session to go idle do not count)."""
    from sessionmem_pipeline.status import stale_stages
    from sessionmem_pipeline.warehouse import open_reader

    conn = open_reader(sessionmem.settings().warehouse)
    try:
        stale = stale_stages(sessionmem.settings(), conn)
    finally:
        conn.close()
    return dg.AssetCheckResult(passed=not any(stale.values()), metadata={f"stale_{k}": v for k, v in stale.items()})


PIPELINE_CHECKS = [
    every_session_is_built_by_the_current_stages,
    chunks_within_token_limit,
    no_empty_chunks,
    every_message_is_chunked_or_dropped_with_a_reason,
    every_chunk_has_an_embedding,
    search_index_covers_all_chunks,
]
