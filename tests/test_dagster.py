"""The Dagster layer: real materializations of the per-session assets on a temporary warehouse, idempotent
re-materialization, the search index publishing a snapshot, and the sensor's requests from file stats."""

import hashlib
import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from sessionmem_pipeline.defs.assets import PIPELINE_ASSETS, search_index, staged_parses, staged_results
from sessionmem_pipeline.defs.checks import PIPELINE_CHECKS
from sessionmem_pipeline.defs.partitions import session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.defs.sensors import session_files_sensor, summary_due_sensor
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.definitions import defs
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.warehouse import Warehouse, snapshot_path

SAMPLES = Path(__file__).parent.parent / "samples"
PARTITIONED = [a for a in PIPELINE_ASSETS if a.partitions_def is not None]


@pytest.fixture()
def project(tmp_path: Path) -> dict:
    sources = tmp_path / "sources"
    shutil.copytree(SAMPLES / "generic", sources / "generic")
    shutil.copytree(SAMPLES / "claude", sources / "claude")
    config = tmp_path / "sessionmem.toml"
    config.write_text(f'warehouse = "{tmp_path / "w.duckdb"}"\nsources = ["{sources}"]\n', encoding="utf-8")
    resource = SessionmemResource(config_file=str(config))
    return {"sources": sources, "warehouse": tmp_path / "w.duckdb", "resources": {"sessionmem": resource}}


def _counts(warehouse: Path) -> dict[str, int]:
    with Warehouse(warehouse) as wh:
        return {t: wh.scalar(f"SELECT count(*) FROM {t}") for t in ("sessions", "messages", "chunks", "chunk_embeddings")}


def test_definitions_load_with_sensor_checks_and_partitions() -> None:
    repo = defs.get_repository_def()
    assert {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()} == {
        "staged_parses", "raw_messages", "collapsed_messages", "chunks", "staged_results", "chunk_embeddings",
        "session_summaries",
        "session_threads", "memories", "search_index",
    }
    assert repo.get_sensor_def("session_files_sensor") and repo.get_sensor_def("summary_due_sensor")
    for asset in PARTITIONED:
        assert asset.partitions_def == session_partitions
        assert asset.backfill_policy is not None and asset.backfill_policy.max_partitions_per_run == 200
    compute = [staged_parses, staged_results]
    writers = [a for a in PIPELINE_ASSETS if a not in compute]
    assert {a.op.pool for a in writers} | {c.op.pool for c in PIPELINE_CHECKS[1:]} == {"duckdb_warehouse"}
    assert {a.op.pool for a in compute} == {"sessionmem_compute"}  # read the sources and snapshot only: in parallel
    assert len(PIPELINE_CHECKS) == 6


def test_materialize_partitions_then_index_and_rematerialize_idempotently(project: dict) -> None:
    instance = dg.DagsterInstance.ephemeral()
    keys = ["claude/-home-dev-webshop/3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863", "generic/planning/2026-03-02"]
    instance.add_dynamic_partitions(session_partitions.name, keys)
    run_range = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[1]}
    result = dg.materialize(
        PARTITIONED + PIPELINE_CHECKS[1:5], instance=instance, resources=project["resources"], tags=run_range
    )
    assert result.success
    first = _counts(project["warehouse"])
    assert first["sessions"] == 3  # one Claude Code session, a generic file split at a 3-hour gap
    assert first["chunks"] > 0 and first["chunk_embeddings"] == first["chunks"]
    raw = result.asset_materializations_for_node("raw_messages")
    assert {m.partition for m in raw} == set(keys)
    assert raw[0].metadata["decisions"].value == {"new": 2}
    assert [e.passed for e in result.get_asset_check_evaluations()] == [True] * 4

    index = dg.materialize([search_index, PIPELINE_CHECKS[0]], instance=instance, resources=project["resources"])
    assert index.success and snapshot_path(project["warehouse"]).exists()
    assert [e.passed for e in index.get_asset_check_evaluations()] == [True]

    again = dg.materialize(PARTITIONED, instance=instance, resources=project["resources"], partition_key=keys[1])
    assert again.success
    assert _counts(project["warehouse"]) == first
    raw_again = again.asset_materializations_for_node("raw_messages")[0]
    assert raw_again.metadata["decisions"].value == {"unchanged": 1}
    embed_again = again.asset_materializations_for_node("chunk_embeddings")[0]
    assert embed_again.metadata["embedded"].value == 0


def test_source_files_are_byte_identical_after_a_run(project: dict) -> None:
    def digests() -> dict[str, str]:
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in project["sources"].rglob("*") if p.is_file()}

    before = digests()
    instance = dg.DagsterInstance.ephemeral()
    key = "generic/planning/2026-03-02"
    instance.add_dynamic_partitions(session_partitions.name, [key])
    assert dg.materialize(PARTITIONED, instance=instance, resources=project["resources"], partition_key=key).success
    assert digests() == before


def _tick(instance: dg.DagsterInstance, resources: dict, cursor: str | None) -> dg.SensorResult:
    context = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources, definitions=defs)
    return session_files_sensor(context)


def test_sensor_batches_new_files_into_one_backfill_then_sees_changes_and_deletions(project: dict) -> None:
    instance = dg.DagsterInstance.ephemeral()
    first = _tick(instance, project["resources"], None)
    added = first.dynamic_partitions_requests[0]
    assert sorted(added.partition_keys) == [
        "claude/-home-dev-webshop/3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863",
        "generic/planning/2026-03-02",
    ]
    assert len(first.run_requests) == 1  # one backfill for all new sessions, not a run per session
    subset = first.run_requests[0].asset_graph_subset
    assert subset is not None
    assert set(subset.get_partitions_subset(dg.AssetKey("raw_messages")).get_partition_keys()) == set(
        added.partition_keys
    )
    assert dg.AssetKey("search_index") in subset.non_partitioned_asset_keys
    instance.add_dynamic_partitions(session_partitions.name, list(added.partition_keys))  # as the daemon does

    quiet = _tick(instance, project["resources"], first.cursor)
    assert quiet.run_requests == [] and quiet.dynamic_partitions_requests == []

    generic = project["sources"] / "generic" / "planning" / "2026-03-02.jsonl"
    with open(generic, "a", encoding="utf-8") as handle:
        handle.write('{"role": "user", "content": "one more thing", "timestamp": "2026-03-02T14:20:00Z"}\n')
    grown = _tick(instance, project["resources"], quiet.cursor)
    assert grown.dynamic_partitions_requests == []
    grown_subset = grown.run_requests[0].asset_graph_subset
    assert list(grown_subset.get_partitions_subset(dg.AssetKey("chunks")).get_partition_keys()) == [
        "generic/planning/2026-03-02"
    ]

    generic.unlink()  # its sessions stay (source-missing): the partition is asked for once and kept
    gone = _tick(instance, project["resources"], grown.cursor)
    assert gone.dynamic_partitions_requests == []
    gone_subset = gone.run_requests[0].asset_graph_subset
    assert list(gone_subset.get_partitions_subset(dg.AssetKey("raw_messages")).get_partition_keys()) == [
        "generic/planning/2026-03-02"
    ]
    assert _tick(instance, project["resources"], gone.cursor).run_requests == []


def test_first_start_on_a_warehouse_the_cli_built_repeats_no_work_and_shows_it(project: dict) -> None:
    from sessionmem_pipeline.defs.sensors import warehouse_state_sensor

    index_sources(project["resources"]["sessionmem"].settings())
    instance = dg.DagsterInstance.ephemeral()
    first = _tick(instance, project["resources"], None)
    assert first.run_requests == []  # every file is indexed as it is
    assert len(first.dynamic_partitions_requests[0].partition_keys) == 2
    instance.add_dynamic_partitions(session_partitions.name, list(first.dynamic_partitions_requests[0].partition_keys))
    context = dg.build_sensor_context(instance=instance, resources=project["resources"], definitions=defs)
    reported = warehouse_state_sensor(context)
    materialized = {(e.asset_key.to_user_string(), e.partition) for e in reported.asset_events}
    assert ("chunks", "generic/planning/2026-03-02") in materialized
    assert ("raw_messages", "claude/-home-dev-webshop/3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863") in materialized
    assert ("search_index", None) in materialized
    again = dg.build_sensor_context(instance=instance, resources=project["resources"], definitions=defs,
                                    cursor=reported.cursor)
    assert not warehouse_state_sensor(again).asset_events  # reported once

    generic = project["sources"] / "generic" / "planning" / "2026-03-02.jsonl"
    with open(generic, "a", encoding="utf-8") as handle:
        handle.write('{"role": "user", "content": "one more thing", "timestamp": "2026-03-02T14:20:00Z"}\n')
    index_sources(project["resources"]["sessionmem"].settings())
    later = dg.build_sensor_context(instance=instance, resources=project["resources"], definitions=defs,
                                    cursor=reported.cursor)
    rebuilt = warehouse_state_sensor(later)
    partitions = {e.partition for e in rebuilt.asset_events} - {None}
    assert partitions == {"generic/planning/2026-03-02"}  # only what the new run built
    assert ("raw_messages", "generic/planning/2026-03-02") in {
        (e.asset_key.to_user_string(), e.partition) for e in rebuilt.asset_events}
    last = dg.build_sensor_context(instance=instance, resources=project["resources"], definitions=defs,
                                   cursor=rebuilt.cursor)
    assert not warehouse_state_sensor(last).asset_events


def _append_generic(path: Path, count: int, start: datetime) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        for n in range(count):
            moment = (start + timedelta(seconds=n)).isoformat().replace("+00:00", "Z")
            handle.write(json.dumps({"role": "user", "content": f"note {n} about caching", "timestamp": moment}) + "\n")


def test_summary_due_sensor_fires_on_idle_and_on_count_only(project: dict, tmp_path: Path) -> None:
    quiet = tmp_path / "index.toml"  # index without summarizing, so the sensor has work to find
    quiet.write_text(
        (tmp_path / "sessionmem.toml").read_text(encoding="utf-8") + "[summaries]\nenabled = false\n",
        encoding="utf-8",
    )
    index_settings = load_settings(quiet)
    index_sources(index_settings)
    instance = dg.DagsterInstance.ephemeral()

    def tick(cursor: str | None) -> dg.SensorResult:
        context = dg.build_sensor_context(instance=instance, cursor=cursor, resources=project["resources"], definitions=defs)
        return summary_due_sensor(context)

    first = tick(None)  # every sample session ended in March 2026: idle, never summarized
    subset = first.run_requests[0].asset_graph_subset
    assert set(subset.get_partitions_subset(dg.AssetKey("session_summaries")).get_partition_keys()) == {
        "claude/-home-dev-webshop/3f6c2b9e-71d4-4a8e-b5c0-9e2d7a41f863",
        "generic/planning/2026-03-02",
    }
    assert dg.AssetKey("raw_messages") not in subset.asset_keys
    assert tick(first.cursor).run_requests == []  # already requested

    generic = project["sources"] / "generic" / "planning" / "2026-03-02.jsonl"
    _append_generic(generic, 3, datetime.now(UTC) - timedelta(minutes=5))  # a new session, active right now
    index_sources(index_settings)
    assert tick(first.cursor).run_requests == []  # not idle, under the threshold

    _append_generic(generic, 20, datetime.now(UTC) - timedelta(minutes=4))  # now 23 new messages
    index_sources(index_settings)
    busy = tick(first.cursor)
    keys = busy.run_requests[0].asset_graph_subset.get_partitions_subset(dg.AssetKey("session_summaries"))
    assert list(keys.get_partition_keys()) == ["generic/planning/2026-03-02"]
