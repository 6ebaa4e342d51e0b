"""Sensors: they never open the live warehouse, only file stats, their cursors and the published snapshot.

`session_files_sensor`: new, changed and vanished session files. A changed size or mtime is enough to ask for a
run, and the run's stages make the exact decision from the stage state. New and changed files become one backfill
over their partitions (split into runs of up to 200 partitions by the assets' backfill policy), so 1,000 new
sessions cost a handful of runs, not 1,000. On its first tick it starts from what the snapshot says is indexed,
so a warehouse the CLI built is not processed again.

`summary_due_sensor`: sessions due for a summary, from the snapshot.

`provider_batches_sensor`: partitions whose chunks wait for the provider's Batch API, from the snapshot: their
embed step polls the batches and takes the vectors of finished ones.

`warehouse_state_sensor`: what `sessionmem index` built outside Dagster, reported as materializations per
partition from the snapshot's stage state, so the catalog shows it (the CLI itself never imports Dagster).
"""


import hashlib
import json
from datetime import UTC, datetime

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset

from sessionmem_pipeline.config import Settings, load_settings
from sessionmem_pipeline.core.changes import stat_changed
from sessionmem_pipeline.defs.assets import (
    SENSOR_RUN_TAG,
    chunk_embeddings,
    chunks,
    collapsed_messages,
    memories,
    raw_messages,
    search_index,
    session_summaries,
    session_threads,
    staged_parses,
    staged_results,
)
from sessionmem_pipeline.defs.partitions import session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.stages.discover import discover, file_stat
from sessionmem_pipeline.stages.privacy import privacy_rules
from sessionmem_pipeline.stages.provider_batches import WAITING
from sessionmem_pipeline.stages.registry import EMBED, SUMMARIZE, Providers, StageContext
from sessionmem_pipeline.stages.memories import find_memory_files
from sessionmem_pipeline.stages.summaries import due, pending
from sessionmem_pipeline.warehouse import Snapshot, open_reader, read_storage_error, snapshot_generation, snapshot_path

SENSOR_SETTINGS = load_settings()  # intervals are fixed when Dagster loads the definitions (spec 000 cron interval)
INDEX_ASSETS = [
    staged_parses, raw_messages, staged_results, collapsed_messages, chunks, chunk_embeddings, session_summaries,
]
STAGE_ASSETS = {
    "ingest": raw_messages,
    "collapse": collapsed_messages,
    "chunk": chunks,
    "embed": chunk_embeddings,
    "summarize": session_summaries,
    "threads": session_threads,
    "memories": memories,
    "index": search_index,
}
"""The asset that stands for each registered stage (stages/registry.py)."""


def backfill_request(
    partitioned: list[dg.AssetsDefinition],
    partition_keys: list[str],
    unpartitioned: list[dg.AssetsDefinition],
    run_key: str,
) -> dg.RunRequest:
    """One backfill over these partitions of the given assets, then the unpartitioned ones (Dagster 1.13 has no
    public constructor for a sensor-requested backfill yet; this is the one its own automation uses)."""
    subset = session_partitions.empty_subset().with_partition_keys(partition_keys)
    graph_subset = AssetGraphSubset(
        partitions_subsets_by_asset_key={a.key: subset for a in partitioned},
        non_partitioned_asset_keys={a.key for a in unpartitioned},
    )
    return dg.RunRequest.for_asset_graph_subset(graph_subset, tags={SENSOR_RUN_TAG: run_key})


def _memory_stats(settings: Settings) -> dict[str, list[int]]:
    return {
        f"memories:{path}": [stat.size, stat.mtime_ns]
        for path in find_memory_files(settings.sources, settings.warehouse)
        if (stat := file_stat(path)) is not None
    }


def _indexed_stats(settings: Settings) -> dict[str, list[int]]:
    """The first cursor: each indexed file's stat as the snapshot has it (empty when nothing is published)."""
    if snapshot_generation(settings.warehouse) is None:
        return {}
    conn = open_reader(settings.warehouse)
    try:
        rows = conn.execute(
            "SELECT partition_key, size, mtime_ns FROM source_files WHERE status = 'indexed'"
        ).fetchall()
    finally:
        conn.close()
    return {key: [size, mtime_ns] for key, size, mtime_ns in rows}


@dg.sensor(
    asset_selection=dg.AssetSelection.assets(*INDEX_ASSETS, session_threads, memories, search_index),
    minimum_interval_seconds=int(SENSOR_SETTINGS["sensors.files_interval_minutes"] * 60),
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def session_files_sensor(context: dg.SensorEvaluationContext, sessionmem: SessionmemResource) -> dg.SensorResult:
    """Finds session files under the configured roots that are new, changed or gone since the last tick."""
    settings = sessionmem.settings()
    paused = read_storage_error(settings.warehouse)
    if paused:
        return dg.SensorResult(skip_reason=f"paused after a storage error ({paused['error']}); run `sessionmem health`")
    remembered: dict[str, list] = json.loads(context.cursor) if context.cursor else _indexed_stats(settings)
    current = {f.partition_key: f for f in discover(settings.sources, rules=privacy_rules(settings))}

    memory_files = _memory_stats(settings)
    remembered_memories = {k: v for k, v in remembered.items() if k.startswith("memories:")}
    remembered = {k: v for k, v in remembered.items() if not k.startswith("memories:")}
    new = [k for k in current if k not in remembered]
    changed = [k for k, f in current.items() if k in remembered and stat_changed(f.stat, tuple(remembered[k][:2]))]
    vanished = [k for k in remembered if k not in current]  # their sessions stay, marked source-missing
    state = {k: [f.stat.size, f.stat.mtime_ns] for k, f in current.items()} | memory_files
    cursor = json.dumps(dict(sorted(state.items())), separators=(",", ":"))
    digest = hashlib.sha256(cursor.encode()).hexdigest()[:16]
    unpartitioned = [session_threads, search_index] + ([memories] if memory_files != remembered_memories else [])
    to_run = sorted(new + changed + vanished)
    run_requests = []
    if to_run:
        run_requests.append(backfill_request(INDEX_ASSETS, to_run, unpartitioned, f"files-{digest}"))
    elif memories in unpartitioned:
        run_requests.append(
            dg.RunRequest(
                asset_selection=[a.key for a in unpartitioned], run_key=f"other-{digest}", tags={SENSOR_RUN_TAG: digest}
            )
        )
    known = set(context.instance.get_dynamic_partitions(session_partitions.name))
    unknown = sorted(set(current) - known)
    partition_requests = [session_partitions.build_add_request(unknown)] if unknown else []
    context.log.info(f"{len(new)} new, {len(changed)} changed, {len(vanished)} vanished session files")
    return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=partition_requests, cursor=cursor)


@dg.sensor(
    asset_selection=dg.AssetSelection.assets(session_summaries, session_threads, search_index),
    minimum_interval_seconds=int(SENSOR_SETTINGS["sensors.summaries_interval_minutes"] * 60),
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def summary_due_sensor(context: dg.SensorEvaluationContext, sessionmem: SessionmemResource) -> dg.SensorResult:
    """Sessions idle for `summaries.idle_minutes` with unsummarized messages, or with `summaries.message_threshold`
    new messages, from the published snapshot (never the live file); one backfill for all of them."""
    settings = sessionmem.settings()
    if read_storage_error(settings.warehouse):
        return dg.SensorResult(skip_reason="paused after a storage error; run `sessionmem health`")
    snapshot = snapshot_path(settings.warehouse)
    if not settings["summaries.enabled"] or not snapshot.exists():
        return dg.SensorResult(skip_reason="summaries are off, or nothing is indexed yet")
    conn = open_reader(snapshot)
    try:  # only sessions whose summary is out of date in the stage state can be due: not every session is counted
        stale = StageContext(Snapshot(conn), settings, Providers(settings), "summary_due_sensor").stale(SUMMARIZE)
        ready = due(
            pending(conn, list(stale)),
            now=datetime.now(UTC),
            idle_minutes=settings["summaries.idle_minutes"],
            message_threshold=settings["summaries.message_threshold"],
        )
    finally:
        conn.close()
    requested = set(json.loads(context.cursor)) if context.cursor else set()
    marks = {f"{r['session_id']}@{r['summary_version']}+{r['unsummarized']}": r for r in ready}
    fresh = {mark: row for mark, row in marks.items() if mark not in requested}
    cursor = json.dumps(sorted(requested & set(marks) | set(fresh)))
    if not fresh:
        return dg.SensorResult(skip_reason="no session is due for a summary", cursor=cursor)
    keys = sorted({row["partition_key"] for row in fresh.values()})
    digest = hashlib.sha256(" ".join(sorted(fresh)).encode()).hexdigest()[:16]
    context.log.info(f"{len(fresh)} sessions due for a summary in {len(keys)} files")
    return dg.SensorResult(
        run_requests=[
            backfill_request([session_summaries], keys, [session_threads, search_index], f"summaries-{digest}")
        ],
        cursor=cursor,
    )


@dg.sensor(
    asset_selection=dg.AssetSelection.assets(chunk_embeddings, session_summaries, search_index),
    minimum_interval_seconds=int(SENSOR_SETTINGS["sensors.batches_interval_minutes"] * 60),
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def provider_batches_sensor(context: dg.SensorEvaluationContext, sessionmem: SessionmemResource) -> dg.SensorResult:
    """While batches of the provider's Batch API are open, each interval a run of the stage that sent them over the
    partitions waiting for them (it polls the batches and writes what finished ones answered): the embed step over
    the partitions whose chunks went in a batch, the summarize step over those with summaries still to build."""
    settings = sessionmem.settings()
    if read_storage_error(settings.warehouse):
        return dg.SensorResult(skip_reason="paused after a storage error; run `sessionmem health`")
    if snapshot_generation(settings.warehouse) is None:
        return dg.SensorResult(skip_reason="nothing published yet")
    conn = open_reader(settings.warehouse)
    try:
        snapshot = Snapshot(conn)
        waiting = {EMBED.name: snapshot.partitions_waiting_for_batches(EMBED.name, WAITING), SUMMARIZE.name: []}
        if snapshot.provider_batches_in(SUMMARIZE.name, WAITING):
            stale = StageContext(snapshot, settings, Providers(settings), "provider_batches_sensor").stale(SUMMARIZE)
            waiting[SUMMARIZE.name] = sorted({row["partition_key"] for row in pending(conn, list(stale))})
    finally:
        conn.close()
    tick = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    assets = {EMBED.name: chunk_embeddings, SUMMARIZE.name: session_summaries}
    requests = [
        backfill_request([assets[stage]], keys, [search_index], f"batches-{stage}-{tick}")
        for stage, keys in waiting.items()
        if keys
    ]
    if not requests:
        return dg.SensorResult(skip_reason="nothing waits for a provider batch")
    context.log.info(", ".join(f"{len(keys)} files wait for {stage} batches" for stage, keys in waiting.items()))
    return dg.SensorResult(run_requests=requests)


CLI_RUNS = "cli-"


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def warehouse_state_sensor(context: dg.SensorEvaluationContext, sessionmem: SessionmemResource) -> dg.SensorResult:
    """Reports what `sessionmem index` built (stage state written by CLI runs since the last tick) as asset
    materializations per partition, from the published snapshot, so the catalog shows the CLI's work."""
    settings = sessionmem.settings()
    generation = snapshot_generation(settings.warehouse)
    if generation is None:
        return dg.SensorResult(skip_reason="nothing published yet")
    seen = json.loads(context.cursor) if context.cursor else {"generation": -1, "built_at": ""}
    if seen["generation"] == generation:
        return dg.SensorResult(skip_reason="nothing new in the snapshot")
    conn = open_reader(settings.warehouse)
    try:  # only the state built since the cursor's time is read, not every session's
        rows = conn.execute(
            """SELECT DISTINCT t.stage, s.partition_key, t.run_id, t.built_at
               FROM stage_state t LEFT JOIN sessions s ON s.session_id = t.session_id
               WHERE starts_with(t.run_id, ?) AND (? IS NULL OR t.built_at > CAST(? AS TIMESTAMPTZ))
               ORDER BY t.built_at""",
            [CLI_RUNS] + [seen["built_at"] or None] * 2,
        ).fetchall()
    finally:
        conn.close()
    events = []
    partitions: set[str] = set()
    for stage, partition_key, run_id, _ in rows:
        asset = STAGE_ASSETS.get(stage)
        if asset is None or (asset.partitions_def is not None and partition_key is None):
            continue
        partition = partition_key if asset.partitions_def is not None else None
        if partition:
            partitions.add(partition)
        events.append(
            dg.AssetMaterialization(
                asset_key=asset.key, partition=partition, metadata={"built_by": run_id, "source": "sessionmem index"}
            )
        )
    known = set(context.instance.get_dynamic_partitions(session_partitions.name))
    unknown = sorted(partitions - known)
    latest = rows[-1][3].isoformat() if rows else seen["built_at"]
    return dg.SensorResult(
        asset_events=events,
        dynamic_partitions_requests=[session_partitions.build_add_request(unknown)] if unknown else [],
        cursor=json.dumps({"generation": generation, "built_at": latest}),
    )
