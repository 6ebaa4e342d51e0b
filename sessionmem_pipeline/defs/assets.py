"""The per-session assets and the search index: each one calls its stage function (stages/) and reports metadata.

Asset key = the table it owns. Every asset that writes DuckDB runs in the `duckdb_warehouse` pool (limit 1) and
takes the same writer lock as `sessionmem index`. A run may cover many partitions (the sensor asks for backfills
with a multi-run policy), so assets work over `context.partition_keys`.
"""


import contextlib
import time
import warnings
from collections.abc import Iterator

import dagster as dg

from sessionmem_pipeline.defs.partitions import WAREHOUSE_POOL, session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.providers import chat_model_from_settings
from sessionmem_pipeline.stages.discover import discover
from sessionmem_pipeline.stages.embed import embed_sessions
from sessionmem_pipeline.stages.ingest import ingest_file, remove_file
from sessionmem_pipeline.stages.memories import ingest_memories
from sessionmem_pipeline.stages.privacy import privacy_rules
from sessionmem_pipeline.stages.summaries import summarize_sessions
from sessionmem_pipeline.stages.threads import refresh_threads
from sessionmem_pipeline.stages.search_index import refresh_search_index, remove_orphans
from sessionmem_pipeline.stages.transform import chunk_sessions, chunking_options, collapse_sessions
from sessionmem_pipeline.warehouse import Warehouse, publish_snapshot, storage_guard, writer_lock

warnings.filterwarnings("ignore", category=dg.BetaWarning)  # backfill_policy is beta in Dagster 1.13

BACKFILL_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=200)


def session_asset(**kwargs: object):
    """An asset with one partition per session file, in the writer pool, batched 200 partitions per run."""
    return dg.asset(
        partitions_def=session_partitions,
        pool=WAREHOUSE_POOL,
        backfill_policy=BACKFILL_POLICY,
        kinds={"duckdb"},
        **kwargs,
    )


@contextlib.contextmanager
def _warehouse(sessionmem: SessionmemResource, context: dg.AssetExecutionContext) -> Iterator[Warehouse]:
    settings = sessionmem.settings()
    holder = f"dagster run {context.run.run_id}"
    with writer_lock(settings.warehouse, holder=holder), storage_guard(settings.warehouse, context.asset_key.to_user_string()):
        with Warehouse(settings.warehouse) as wh:
            yield wh


def _sessions(wh: Warehouse, context: dg.AssetExecutionContext) -> list[str]:
    return [s for key in context.partition_keys for s in wh.sessions_of_partition(key)]


@session_asset(
    group_name="sessions",
)
def raw_messages(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Canonical messages of each session file: validated, quarantined when unusable, only new lines when grown."""
    started = time.perf_counter()
    settings = sessionmem.settings()
    rules = privacy_rules(settings)
    files = {f.partition_key: f for f in discover(settings.sources, rules=rules)}
    decisions: dict[str, int] = {}
    written = warnings = 0
    quarantined: list[str] = []
    with _warehouse(sessionmem, context) as wh:
        for key in context.partition_keys:
            source = files.get(key)
            if source is None:
                for row in wh.indexed_paths():
                    if row["partition_key"] == key:
                        remove_file(wh, row["path"])
                decisions["deleted"] = decisions.get("deleted", 0) + 1
                continue
            outcome = ingest_file(wh, source, max_bad_share=settings["validation.max_bad_line_share"], privacy=rules)
            decision = "quarantined" if outcome.quarantine_reason else outcome.decision
            decisions[decision] = decisions.get(decision, 0) + 1
            written += outcome.messages_written
            warnings += len(outcome.warnings)
            if outcome.quarantine_reason:
                quarantined.append(f"- `{source.path}`: {outcome.quarantine_reason}")
                context.log.warning(f"quarantined {source.path}: {outcome.quarantine_reason}")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": written,
            "files": len(context.partition_keys),
            "decisions": dg.MetadataValue.json(decisions),
            "malformed_lines_skipped": warnings,
            "quarantined": len(quarantined),
            "quarantine": dg.MetadataValue.md("\n".join(quarantined) or "none"),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )


@session_asset(
    deps=[raw_messages],
    group_name="sessions",
)
def collapsed_messages(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Tool calls collapsed to one narrative line each, secrets redacted (everything downstream reads this)."""
    started = time.perf_counter()
    with _warehouse(sessionmem, context) as wh:
        outcome = collapse_sessions(wh, _sessions(wh, context))
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": outcome.messages,
            "sessions": outcome.sessions,
            "tool_calls": outcome.tool_calls,
            "seconds": round(time.perf_counter() - started, 3),
        }
    )


@session_asset(
    deps=[collapsed_messages],
    group_name="sessions",
)
def chunks(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Exchange chunks with topic tags, decision/action flags and the contextual prefix."""
    started = time.perf_counter()
    settings = sessionmem.settings()
    options = chunking_options(settings, sessionmem.embedder(), chat_model_from_settings(settings))
    with _warehouse(sessionmem, context) as wh:
        session_ids = _sessions(wh, context)
        outcome = chunk_sessions(wh, session_ids, **options)
        preview = wh.query(
            "SELECT chunk_index, topics, left(content, 200) AS content FROM chunks "
            "WHERE session_id IN (SELECT unnest(?)) ORDER BY session_id, chunk_index LIMIT 3",
            [session_ids],
        )
    for warning in outcome.warnings:
        context.log.warning(warning)
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": outcome.chunks,
            "tokens": outcome.tokens,
            "max_tokens": options["max_tokens"],
            "dropped_messages": outcome.dropped_messages,
            "llm_topic_calls": outcome.llm_calls,
            "preview": dg.MetadataValue.md(
                "\n\n".join(f"**{r['chunk_index']}** {', '.join(r['topics'] or [])}\n\n> {r['content']}" for r in preview)
                or "no chunks"
            ),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )


@session_asset(
    deps=[chunks],
    group_name="sessions",
)
def chunk_embeddings(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Vectors of each chunk's contextual content, cached by (model, text hash); failures retried next run."""
    started = time.perf_counter()
    embedder = sessionmem.embedder()
    with _warehouse(sessionmem, context) as wh:
        outcome = embed_sessions(
            wh, _sessions(wh, context), embedder, progress=lambda n: context.log.info(f"embedded a batch of {n}")
        )
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": outcome.embedded + outcome.cached,
            "embedded": outcome.embedded,
            "cached": outcome.cached,
            "failed": outcome.failed,
            "model": embedder.model_id,
            "seconds": round(time.perf_counter() - started, 3),
        }
    )


@session_asset(
    deps=[collapsed_messages],
    group_name="summaries",
)
def session_summaries(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Versioned, incremental summaries of each session (a new version only when its input changed), embedded."""
    started = time.perf_counter()
    settings = sessionmem.settings()
    if not settings["summaries.enabled"]:
        return dg.MaterializeResult(metadata={"dagster/row_count": 0, "skipped": "summaries.enabled is false"})
    with _warehouse(sessionmem, context) as wh:
        outcome = summarize_sessions(
            wh, _sessions(wh, context), llm=chat_model_from_settings(settings), embedder=sessionmem.embedder()
        )
    for warning in outcome.llm_fallbacks:
        context.log.warning(f"chat model failed, extractive summary used: {warning}")
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": outcome.versions_written,
            "unchanged": outcome.unchanged,
            "messages_read": outcome.messages_read,
            "llm_fallbacks": len(outcome.llm_fallbacks),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )


@dg.asset(
    pool=WAREHOUSE_POOL,
    deps=[session_summaries],
    group_name="summaries",
    kinds={"duckdb"},
    automation_condition=dg.AutomationCondition.eager(),
)
def session_threads(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Related sessions linked into threads (summary similarity, shared topics and files, time)."""
    started = time.perf_counter()
    with _warehouse(sessionmem, context) as wh:
        count = refresh_threads(wh)
        linked = wh.scalar("SELECT count(*) FROM session_threads")
    return dg.MaterializeResult(
        metadata={"dagster/row_count": linked, "threads": count, "seconds": round(time.perf_counter() - started, 3)}
    )


@dg.asset(pool=WAREHOUSE_POOL, group_name="search", kinds={"duckdb"})
def memories(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Curated memories from the `memories.jsonl` files in the source roots, embedded."""
    started = time.perf_counter()
    settings = sessionmem.settings()
    with _warehouse(sessionmem, context) as wh:
        outcome = ingest_memories(wh, settings.sources, sessionmem.embedder())
    for warning in outcome.warnings:
        context.log.warning(warning)
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": outcome.memories,
            "files": outcome.files,
            "embedded": outcome.embedded,
            "malformed_lines_skipped": len(outcome.warnings),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )


@dg.asset(
    pool=WAREHOUSE_POOL,
    deps=[chunk_embeddings, session_summaries, session_threads, memories],
    group_name="search",
    kinds={"duckdb"},
    automation_condition=dg.AutomationCondition.eager(),
)
def search_index(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Orphans removed, BM25 rebuilt, HNSW compacted, and the reader snapshot published."""
    started = time.perf_counter()
    settings = sessionmem.settings()
    with _warehouse(sessionmem, context) as wh:
        orphans = remove_orphans(wh, settings.sources)
        outcome = refresh_search_index(wh)
    with writer_lock(settings.warehouse, holder=f"dagster run {context.run.run_id}"):
        snapshot = publish_snapshot(settings.warehouse)
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": outcome.chunks,
            "vectors": outcome.vectors,
            "orphans_removed": orphans,
            "snapshot": dg.MetadataValue.path(str(snapshot)),
            "seconds": round(time.perf_counter() - started, 3),
        }
    )


PIPELINE_ASSETS = [
    raw_messages,
    collapsed_messages,
    chunks,
    chunk_embeddings,
    session_summaries,
    session_threads,
    memories,
    search_index,
]
