"""The per-session assets and the search index: each one calls its stage function (stages/) and reports metadata.

Asset key = the table it owns. Every asset that writes DuckDB runs in the `duckdb_warehouse` pool (limit 1) and
takes the same writer lock as `sessionmem index`; the expensive embedding work is computed before that, outside
the writer, in pool `sessionmem_compute` (`staged_chunk_vectors`, stages/staging.py). A run may cover many partitions (the sensor asks for backfills
with a multi-run policy), so assets work over `context.partition_keys`.
"""


import contextlib
import time
import warnings
from collections.abc import Callable, Iterator

import dagster as dg

from sessionmem_pipeline.defs.partitions import COMPUTE_POOL, WAREHOUSE_POOL, session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.providers import embedder_from_settings
from sessionmem_pipeline.stages import pipeline, staging
from sessionmem_pipeline.stages.discover import scan_sources
from sessionmem_pipeline.stages.privacy import privacy_rules
from sessionmem_pipeline.stages.pipeline import StageReport
from sessionmem_pipeline.stages.registry import SUMMARIZE_DUE, SUMMARIZE_NOW, Providers, StageContext
from sessionmem_pipeline.stages.run import IndexReport, record_run
from sessionmem_pipeline.warehouse import Warehouse, publish_if_stale, rebuild_file, storage_guard, writer_lock

warnings.filterwarnings("ignore", category=dg.BetaWarning)  # backfill_policy is beta in Dagster 1.13

BACKFILL_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=200)
WRITER_TAGS = {"dagster-celery/queue": "sessionmem_writer"}
"""On the Celery executor (deploy/) steps that write DuckDB go to the one worker on the warehouse machine."""
COMPUTE_TAGS = {"dagster-celery/queue": "sessionmem_compute"}
SENSOR_RUN_TAG = "sessionmem/run_key"
"""Tag on runs a sensor asked for: their summaries follow the due rule; any other run summarizes now."""


def session_asset(**kwargs: object):
    """An asset with one partition per session file, in the writer pool, batched 200 partitions per run."""
    return dg.asset(
        partitions_def=session_partitions,
        pool=WAREHOUSE_POOL,
        backfill_policy=BACKFILL_POLICY,
        kinds={"duckdb"},
        op_tags=WRITER_TAGS,
        **kwargs,
    )


@contextlib.contextmanager
def _stage_context(
    context: dg.AssetExecutionContext,
    sessionmem: SessionmemResource,
    *,
    partitioned: bool = True,
    publish: bool = False,
) -> Iterator[tuple[StageContext, IndexReport]]:
    """The warehouse under the writer lock, a stage context scoped to the run's partitions, and a report whose
    counts go into the run's row in `runs`. The snapshot is published at the end when this run does not also
    materialize `search_index` (which publishes), so search sees any materialization with no other click, and
    always when `publish` (a compute step downstream reads the snapshot)."""
    settings = sessionmem.settings()
    report = IndexReport(run_id=context.run.run_id)
    started = time.perf_counter()
    holder = f"dagster run {context.run.run_id}"
    where = context.asset_key.to_user_string()
    with writer_lock(settings.warehouse, holder=holder), storage_guard(settings.warehouse, where):
        with Warehouse(settings.warehouse) as wh:
            keys = list(context.partition_keys) if partitioned else None
            scope = [s for key in keys for s in wh.sessions_of_partition(key)] if keys is not None else None
            from_sensor = SENSOR_RUN_TAG in context.run.tags
            ctx = StageContext(
                wh,
                settings,
                Providers(settings),
                context.run.run_id,
                scope=scope,
                partition_keys=keys,
                summarize=SUMMARIZE_DUE if from_sensor else SUMMARIZE_NOW,
                progress=lambda stage, done, total: None,
            )
            started_at = ctx.now
            yield ctx, report
            report.seconds = time.perf_counter() - started
            record_run(wh, report, started_at, "dagster")
            generation = wh.generation()
            wh.checkpoint()
            outgrown = report.indexed and wh.outgrown()
        if outgrown:
            rebuild_file(settings.warehouse)
        if publish or search_index.key not in (context.run.asset_selection or set()):
            publish_if_stale(settings.warehouse, generation)


def _partition_metadata(
    context: dg.AssetExecutionContext,
    ctx: StageContext,
    report: StageReport,
    fields: Callable[[str, dict], dict] = lambda key, counts: {},
) -> None:
    """Metadata per partition (its sessions' counts, project and title), not the run's totals."""
    for key in context.partition_keys:
        sessions = ctx.wh.query(
            "SELECT session_id, project, title, first_request, source_missing FROM sessions WHERE partition_key = ?",
            [key],
        )
        counts: dict[str, int] = {}
        for session in sessions:
            for name, value in report.per_session.get(session["session_id"], {}).items():
                counts[name] = counts.get(name, 0) + value
        first = sessions[0] if sessions else {}
        metadata = {
            "sessions": len(sessions),
            "project": first.get("project") or "",
            "title": (first.get("title") or first.get("first_request") or "")[:120],
            **fields(key, counts),
        }
        context.add_asset_metadata(metadata, partition_key=key)


@session_asset(group_name="sessions")
def raw_messages(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Canonical messages of each session file: validated, privacy exclusions applied, redacted, quarantined when
    unusable, only new lines when grown; a vanished file's sessions stay, marked source-missing."""
    with _stage_context(context, sessionmem) as (ctx, report):
        scan = scan_sources(ctx.settings.sources, rules=privacy_rules(ctx.settings))
        wanted = set(context.partition_keys)
        scan.files = [f for f in scan.files if f.partition_key in wanted]
        pipeline.ingest(ctx, scan, report)
        pipeline.mark_missing_sources(ctx, None, report, scan)
        for item in report.quarantined:
            context.log.warning(f"quarantined {item['path']}: {item['reason']}")
        for problem in report.source_problems:
            context.log.warning(f"source problem: {problem['path']}: {problem['detail']}")
        _partition_metadata(context, ctx, report, lambda key, counts: dict(report.per_file.get(key, {})))
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": report.messages_written,
            "decisions": dg.MetadataValue.json(report.decisions),
            "malformed_lines_skipped": len(report.warnings),
            "source_problems": len(report.source_problems),
            "kept_out_by_privacy": len(report.excluded),
            "quarantine": dg.MetadataValue.md(
                "\n".join(f"- `{q['path']}`: {q['reason']}" for q in report.quarantined) or "none"
            ),
        }
    )


@session_asset(deps=[raw_messages], group_name="sessions")
def collapsed_messages(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> None:
    """Tool calls collapsed to one narrative line each (everything downstream reads this)."""
    with _stage_context(context, sessionmem) as (ctx, report):
        pipeline.collapse(ctx, report)
        _partition_metadata(context, ctx, report, lambda key, counts: {"rebuilt": bool(counts.get("collapsed"))})


@session_asset(deps=[collapsed_messages], group_name="sessions")
def chunks(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> None:
    """Exchange chunks with topic tags, decision/action flags and the contextual prefix (published at once: the
    vectors are computed from the snapshot)."""
    with _stage_context(context, sessionmem, publish=True) as (ctx, report):
        pipeline.chunk(ctx, report)
        for warning in report.warnings:
            context.log.warning(warning)

        def fields(key: str, counts: dict) -> dict:
            return {"dagster/row_count": counts.get("chunks", 0), "tokens": counts.get("tokens", 0)}

        _partition_metadata(context, ctx, report, fields)


@dg.asset(
    partitions_def=session_partitions,
    pool=COMPUTE_POOL,
    op_tags=COMPUTE_TAGS,
    backfill_policy=BACKFILL_POLICY,
    deps=[chunks],
    group_name="sessions",
    kinds={"parquet"},
)
def staged_chunk_vectors(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Vectors of the chunks the published snapshot lacks, computed outside the writer (never opens the live file,
    so many run at once) into the staging folder (`staging.path`) for `chunk_embeddings` to commit."""
    settings = sessionmem.settings()
    outcome = staging.compute_embeddings(settings, list(context.partition_keys), embedder_from_settings(settings))
    return dg.MaterializeResult(
        metadata={
            "sessions": outcome.sessions,
            "embedded": outcome.embedded,
            "failed": outcome.failed,
            "staged": dg.MetadataValue.path(str(outcome.path)) if outcome.path else "nothing to embed",
        }
    )


@session_asset(deps=[chunks, staged_chunk_vectors], group_name="sessions")
def chunk_embeddings(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Vectors of each chunk's contextual content, committed from the staging files (what they lack is embedded
    here), cached by (model, text hash); failures retried next run."""
    with _stage_context(context, sessionmem) as (ctx, report):
        computed_in_commit = staging.commit_staged(ctx, report)
        _partition_metadata(context, ctx, report)
    return dg.MaterializeResult(
        metadata={
            "embedded": report.embedded,
            "cached": report.embeddings_cached,
            "failed": report.embedding_failures,
            "computed_in_commit": computed_in_commit,
        }
    )


@session_asset(deps=[collapsed_messages], group_name="summaries")
def session_summaries(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Versioned, incremental summaries (a new version only when the input changed), embedded: what is due when
    a sensor asked, every stale session when a person launched the run."""
    with _stage_context(context, sessionmem) as (ctx, report):
        pipeline.summarize(ctx, report)
        _partition_metadata(context, ctx, report)
    for warning in report.warnings:
        context.log.warning(f"chat model failed, extractive summary used: {warning}")
    return dg.MaterializeResult(metadata={"versions_written": report.summaries_written})


@dg.asset(pool=WAREHOUSE_POOL, op_tags=WRITER_TAGS, deps=[session_summaries], group_name="summaries", kinds={"duckdb"})
def session_threads(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Related sessions linked into threads (summary similarity, shared topics and files, time)."""
    with _stage_context(context, sessionmem, partitioned=False) as (ctx, report):
        pipeline.threads(ctx, report)
        linked = ctx.wh.scalar("SELECT count(*) FROM session_threads")
    return dg.MaterializeResult(metadata={"dagster/row_count": linked, "rebuilt": report.threads is not None})


@dg.asset(pool=WAREHOUSE_POOL, op_tags=WRITER_TAGS, group_name="search", kinds={"duckdb"})
def memories(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Curated memories from the `memories.jsonl` files in the source roots and the inbox, embedded."""
    with _stage_context(context, sessionmem, partitioned=False) as (ctx, report):
        pipeline.memories(ctx, ctx.settings.sources, report)
        stored = ctx.wh.scalar("SELECT count(*) FROM memories")
    for warning in report.warnings:
        context.log.warning(warning)
    return dg.MaterializeResult(metadata={"dagster/row_count": stored, "embedded": report.memories_embedded})


@dg.asset(
    pool=WAREHOUSE_POOL,
    op_tags=WRITER_TAGS,
    deps=[chunk_embeddings, session_summaries, session_threads, memories],
    group_name="search",
    kinds={"duckdb"},
)
def search_index(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """The keyword and vector indexes brought up to date, and the reader snapshot published."""
    settings = sessionmem.settings()
    with _stage_context(context, sessionmem, partitioned=False) as (ctx, report):
        pipeline.index(ctx, report)
        chunk_count = ctx.wh.scalar("SELECT count(*) FROM chunks")
        generation = ctx.wh.generation()
    with writer_lock(settings.warehouse, holder=f"dagster run {context.run.run_id}"):
        snapshot = publish_if_stale(settings.warehouse, generation)
    return dg.MaterializeResult(
        metadata={
            "dagster/row_count": chunk_count,
            "rebuilt": report.indexed,
            "published": dg.MetadataValue.path(str(snapshot)) if snapshot else "already current",
        }
    )


PIPELINE_ASSETS = [
    raw_messages,
    collapsed_messages,
    chunks,
    staged_chunk_vectors,
    chunk_embeddings,
    session_summaries,
    session_threads,
    memories,
    search_index,
]
