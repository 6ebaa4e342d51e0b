"""The per-session assets and the search index: each one calls its stage function (stages/) and reports metadata.

Asset key = the table it owns. Every asset that writes DuckDB runs in the `duckdb_warehouse` pool (limit 1) and
takes the same writer lock as `sessionmem index`; the per-session work (parsing and redaction, then collapse,
chunk and topics, embedding, summaries) is computed before that, outside the writer, in pool `sessionmem_compute`
(`staged_parses`, stages/ingest_staging.py; `staged_results`, stages/staging.py), and the writer's assets commit
it. A run may cover many partitions (the sensor asks for backfills with a multi-run policy), so assets work over
`context.partition_keys`.
"""


import contextlib
import time
import warnings
from collections.abc import Callable, Iterator

import dagster as dg

from sessionmem_pipeline.defs.partitions import COMPUTE_POOL, WAREHOUSE_POOL, session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.stages import ingest_staging, pipeline, staging
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


def compute_asset(**kwargs: object):
    """An asset of the compute half: partitioned like the writer's, in pool `sessionmem_compute` (any number at
    once: it never opens the live file), its results Parquet files in the staging folder."""
    return dg.asset(
        partitions_def=session_partitions,
        pool=COMPUTE_POOL,
        op_tags=COMPUTE_TAGS,
        backfill_policy=BACKFILL_POLICY,
        group_name="sessions",
        kinds={"parquet"},
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
    counts go into the run's row in `runs`. The snapshot is published at the end by the run's last writer asset
    (`search_index` when the run has it), so search sees any materialization with no other click and a run copies
    the file once, and always when `publish` (a compute step of the run may read the snapshot)."""
    settings = sessionmem.settings()
    report = IndexReport(run_id=context.run.run_id)
    started = time.perf_counter()
    holder = f"dagster run {context.run.run_id}"
    where = context.asset_key.to_user_string()
    with writer_lock(settings.warehouse, holder=holder), storage_guard(settings.warehouse, where):
        with Warehouse(settings.warehouse) as wh:
            keys = list(context.partition_keys) if partitioned else None
            scope = wh.sessions_of_partitions(keys) if keys is not None else None
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
            generation, outgrown = wh.finish(measure=report.indexed)
        if outgrown:
            rebuild_file(settings.warehouse)
        if publish or not _writer_follows(context):
            publish_if_stale(settings.warehouse, generation)


def _writer_follows(context: dg.AssetExecutionContext) -> bool:
    """Whether this run materializes a writer asset downstream of this one (which runs later and publishes)."""
    below = {context.asset_key}
    for asset in PIPELINE_ASSETS:  # in dependency order
        if asset.dependency_keys & below:
            below.add(asset.key)
    selected = context.run.asset_selection or context.job_def.asset_layer.selected_asset_keys  # none: the whole job
    return any(key in selected for key in below - {context.asset_key, staged_results.key})


def _partition_metadata(
    context: dg.AssetExecutionContext,
    ctx: StageContext,
    report: StageReport,
    fields: Callable[[str, dict], dict] = lambda key, counts: {},
) -> None:
    """Metadata per partition (its sessions' counts, project and title), not the run's totals. Only for the assets
    whose partitions have facts of their own (ingest's decision, the chunk counts): Dagster checks each call's
    partition against the instance's dynamic partitions (three storage reads per partition), which cost the
    writer's commit run more CPU than its DuckDB writes did."""
    rows = ctx.wh.query(
        "SELECT partition_key, session_id, project, title, first_request FROM sessions "
        "WHERE partition_key IN (SELECT unnest(?))",
        [list(context.partition_keys)],
    )
    by_partition: dict[str, list[dict]] = {}
    for row in rows:
        by_partition.setdefault(row["partition_key"], []).append(row)
    for key in context.partition_keys:
        sessions = by_partition.get(key, [])
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


def _computed_in_commit(report: StageReport, stage: str) -> dict[str, int]:
    """What the commit computed itself because no staging file held it (0: everything came from compute)."""
    return {"computed_in_commit": report.computed_in_commit.get(stage, 0)}


@compute_asset()
def staged_parses(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Each session file of the partitions parsed, validated, kept out or redacted by the privacy rules, outside the
    writer (never opens the live file, so many run at once), into the staging folder for `raw_messages` to commit
    (files the published snapshot holds unchanged are skipped)."""
    outcome = ingest_staging.compute_parses(sessionmem.settings(), list(context.partition_keys))
    for problem in outcome.not_staged:
        context.log.info(f"left to raw_messages: {problem}")
    return dg.MaterializeResult(
        metadata={
            "files_parsed": outcome.files,
            "left_to_commit": len(outcome.not_staged),
            "staged": dg.MetadataValue.json([str(outcome.path)] if outcome.path else []),
        }
    )


@session_asset(deps=[staged_parses], group_name="sessions")
def raw_messages(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Canonical messages of each session file: validated, privacy exclusions applied, redacted, quarantined when
    unusable, only new lines when grown; a vanished file's sessions stay, marked source-missing (published at once:
    a compute step that starts after it finds the parses consumed and works from the snapshot)."""
    with _stage_context(context, sessionmem, publish=True) as (ctx, report):
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
            **_computed_in_commit(report, "ingest"),
            "quarantine": dg.MetadataValue.md(
                "\n".join(f"- `{q['path']}`: {q['reason']}" for q in report.quarantined) or "none"
            ),
        }
    )


@compute_asset(deps=[staged_parses])
def staged_results(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Each per-session stage's results (collapsed messages, chunks with topics, vectors, summaries) that the
    published snapshot lacks, computed outside the writer (never opens the live file, so many run at once) into
    the staging folder (`staging.path`) for the writer's assets to commit: new sessions from their staged
    parses, so it may run beside the writer's `raw_messages`, not after it."""
    settings = sessionmem.settings()
    summarize = SUMMARIZE_DUE if SENSOR_RUN_TAG in context.run.tags else SUMMARIZE_NOW
    keys = list(context.partition_keys)
    parsed = ingest_staging.staged_sessions(settings, keys)
    outcome = staging.compute_sessions(settings, keys, Providers(settings), summarize=summarize, parsed=parsed)
    return dg.MaterializeResult(
        metadata={
            "sessions": outcome.sessions,
            **{f"computed_{stage}": count for stage, count in outcome.computed.items()},
            "embedding_failed": outcome.failed,
            "staged": dg.MetadataValue.json([str(path) for path in outcome.paths]),
        }
    )


@session_asset(deps=[raw_messages, staged_results], group_name="sessions")
def collapsed_messages(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Tool calls collapsed to one narrative line each (everything downstream reads this)."""
    with _stage_context(context, sessionmem) as (ctx, report):
        pipeline.collapse(ctx, report)
    return dg.MaterializeResult(metadata={"sessions_collapsed": report.collapsed, **_computed_in_commit(report, "collapse")})


@session_asset(deps=[collapsed_messages], group_name="sessions")
def chunks(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Exchange chunks with topic tags, decision/action flags and the contextual prefix."""
    with _stage_context(context, sessionmem) as (ctx, report):
        pipeline.chunk(ctx, report)
        for warning in report.warnings:
            context.log.warning(warning)

        def fields(key: str, counts: dict) -> dict:
            return {"dagster/row_count": counts.get("chunks", 0), "tokens": counts.get("tokens", 0)}

        _partition_metadata(context, ctx, report, fields)
    return dg.MaterializeResult(metadata=_computed_in_commit(report, "chunk"))


@session_asset(deps=[chunks], group_name="sessions")
def chunk_embeddings(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Vectors of each chunk's contextual content, committed from the staging files (what they lack is embedded
    here, or sent to the provider's Batch API and taken from it by a later run), cached by (model, text hash);
    failures retried next run."""
    with _stage_context(context, sessionmem) as (ctx, report):
        pipeline.embed(ctx, report)
    return dg.MaterializeResult(
        metadata={
            "embedded": report.embedded,
            "cached": report.embeddings_cached,
            "failed": report.embedding_failures,
            "batch_submitted": report.embed_batch_submitted,
            "batch_written": report.embed_batch_written,
            "batch_waiting": report.chunks_waiting,
            **_computed_in_commit(report, "embed"),
        }
    )


@session_asset(deps=[collapsed_messages], group_name="summaries")
def session_summaries(context: dg.AssetExecutionContext, sessionmem: SessionmemResource) -> dg.MaterializeResult:
    """Versioned, incremental summaries (a new version only when the input changed), embedded: what is due when
    a sensor asked, every stale session when a person launched the run."""
    with _stage_context(context, sessionmem) as (ctx, report):
        pipeline.summarize(ctx, report)
    for warning in report.warnings:
        context.log.warning(f"chat model failed, extractive summary used: {warning}")
    return dg.MaterializeResult(
        metadata={
            "versions_written": report.summaries_written,
            "batch_submitted": report.summary_batch_submitted,
            "batch_answers": report.summary_batch_answers,
            "sessions_waiting": report.summaries_waiting,
            **_computed_in_commit(report, "summarize"),
        }
    )


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
    staged_parses,
    raw_messages,
    staged_results,
    collapsed_messages,
    chunks,
    chunk_embeddings,
    session_summaries,
    session_threads,
    memories,
    search_index,
]
