"""`session_files_sensor`: new, changed and deleted session files, from file stats and the cursor only.

It never opens the warehouse and never reads a file: a changed size or mtime is enough to ask for a run, and the
run's ingest makes the exact decision (grown, rewritten, or unchanged after all). New and changed files become
one backfill over their partitions (split into runs of up to 200 partitions by the assets' backfill policy), so
1,000 new sessions cost a handful of runs, not 1,000.
"""


import hashlib
import json

import dagster as dg
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset

from sessionmem_pipeline.core.changes import stat_changed
from sessionmem_pipeline.defs.assets import PIPELINE_ASSETS, search_index
from sessionmem_pipeline.defs.partitions import session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.stages.discover import discover

PARTITIONED_ASSETS = [a for a in PIPELINE_ASSETS if a.partitions_def is not None]

def backfill_request(partition_keys: list[str], run_key: str) -> dg.RunRequest:
    """One backfill over these partitions of every pipeline asset, then the search index."""
    subset = session_partitions.empty_subset().with_partition_keys(partition_keys)
    graph_subset = AssetGraphSubset(
        partitions_subsets_by_asset_key={a.key: subset for a in PARTITIONED_ASSETS},
        non_partitioned_asset_keys={search_index.key},
    )
    return dg.RunRequest.for_asset_graph_subset(graph_subset, tags={"sessionmem/run_key": run_key})

@dg.sensor(
    asset_selection=dg.AssetSelection.assets(*PIPELINE_ASSETS),
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def session_files_sensor(context: dg.SensorEvaluationContext, sessionmem: SessionmemResource) -> dg.SensorResult:
    """Finds session files under the configured roots that are new, changed or gone since the last tick."""
    settings = sessionmem.settings()
    remembered: dict[str, list] = json.loads(context.cursor) if context.cursor else {}
    current = {f.partition_key: f for f in discover(settings.sources)}

    new = [k for k in current if k not in remembered]
    changed = [
        k for k, f in current.items() if k in remembered and stat_changed(f.stat, tuple(remembered[k][:2]))
    ]
    deleted = sorted(k for k in remembered if k not in current)
    cursor = json.dumps(
        {k: [f.stat.size, f.stat.mtime_ns] for k, f in sorted(current.items())}, separators=(",", ":")
    )
    to_run = sorted(new + changed)
    run_requests = []
    if to_run:
        digest = hashlib.sha256(cursor.encode()).hexdigest()[:16]
        run_requests.append(backfill_request(to_run, f"files-{digest}"))
    elif deleted:
        run_requests.append(dg.RunRequest(asset_selection=[search_index.key], run_key=f"deleted-{deleted[0]}"))
    partition_requests = []
    if new:
        partition_requests.append(session_partitions.build_add_request(sorted(new)))
    if deleted:
        partition_requests.append(session_partitions.build_delete_request(deleted))
    context.log.info(f"{len(new)} new, {len(changed)} changed, {len(deleted)} deleted session files")
    return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=partition_requests, cursor=cursor)
