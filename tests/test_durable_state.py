"""Durable stage state: a run killed after any stage, or failing inside one, is completed by the next plain run,
which ends with the same warehouse as a clean build (compared table by table, timestamps and run ids aside)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sessionmem_pipeline.client import SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.stages.registry import FAULT_VARIABLE
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.status import check_health
from sessionmem_pipeline.warehouse import connect, snapshot_path
from warehouse_tables import BOOKKEEPING, warehouse_tables

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
NOW = datetime(2030, 1, 1, tzinfo=UTC)
STAGE_BOUNDARIES = ["ingest", "collapse", "chunk", "embed", "summarize", "threads", "memories", "index", "run"]
INSIDE_STAGES = ["ingest", "collapse", "chunk", "embed", "summarize"]
NOT_COMPARED = BOOKKEEPING | {"embedding_cache", "topic_cache"}
"""Caches may hold more after a repaired run, which is their point."""


def tables(path: Path) -> dict[str, list[tuple]]:
    return warehouse_tables(path, NOT_COMPARED)


def make_sources(root: Path) -> None:
    for relative in (
        "claude_code/-home-dev-shop",
        "codex/2025",
        "generic/team-sync",
        "openai_chat/support",
    ):
        shutil.copytree(FIXTURES / relative, root / relative)


def settings_for(tmp: Path, name: str, root: Path):
    return load_settings(
        None,
        {
            "warehouse": str(tmp / name / "sessionmem.duckdb"),
            "sources": [str(root)],
            "summaries.idle_minutes": 0,
            "timezone": "UTC",
        },
    )


def faulted_run(settings, fault: str) -> subprocess.CompletedProcess:
    """`index` in another process with a fault injected (the process exits hard, or raises)."""
    code = (
        "import sys; from datetime import datetime, UTC\n"
        "from sessionmem_pipeline.config import load_settings\n"
        "from sessionmem_pipeline.stages.run import index_sources\n"
        f"settings = load_settings(None, {{'warehouse': {str(settings.warehouse)!r}, "
        f"'sources': [{str(settings.sources[0])!r}], 'summaries.idle_minutes': 0, 'timezone': 'UTC'}})\n"
        "index_sources(settings, now=datetime(2030, 1, 1, tzinfo=UTC))\n"
    )
    environment = {**os.environ, FAULT_VARIABLE: fault}
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def clean_build(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("clean")
    root = tmp / "sources"
    make_sources(root)
    settings = settings_for(tmp, "clean", root)
    index_sources(settings, now=NOW)
    return root, tables(settings.warehouse)


def repaired(tmp_path: Path, root: Path, fault: str) -> tuple[subprocess.CompletedProcess, object]:
    settings = settings_for(tmp_path, "faulted", root)
    failed = faulted_run(settings, fault)
    return failed, settings


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGE_BOUNDARIES)
def test_a_kill_after_any_stage_is_repaired_by_the_next_plain_run(tmp_path: Path, clean_build, stage: str) -> None:
    root, expected = clean_build
    failed, settings = repaired(tmp_path, root, f"exit-after:{stage}")
    assert failed.returncode == 137, failed.stderr
    index_sources(settings, now=NOW)
    assert tables(settings.warehouse) == expected
    assert tables(snapshot_path(settings.warehouse)) == expected
    assert check_health(settings)[0] != "ERROR"


@pytest.mark.slow
@pytest.mark.parametrize("stage", INSIDE_STAGES)
def test_an_exception_inside_any_stage_is_repaired_by_the_next_plain_run(
    tmp_path: Path, clean_build, stage: str
) -> None:
    root, expected = clean_build
    failed, settings = repaired(tmp_path, root, f"raise-in:{stage}")
    assert failed.returncode != 0 and "InjectedFault" in failed.stderr, failed.stderr
    index_sources(settings, now=NOW)
    assert tables(settings.warehouse) == expected


def test_a_kill_before_publishing_is_reported_and_then_repaired(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    make_sources(root)
    settings = settings_for(tmp_path, "wh", root)
    index_sources(settings, now=NOW)
    (root / "generic" / "team-sync" / "late.jsonl").write_text(
        '{"id": "l1", "role": "user", "content": "The quokka migration finished late", '
        '"timestamp": "2026-01-20T10:00:00Z"}\n',
        encoding="utf-8",
    )
    failed = faulted_run(settings, "exit-after:run")
    assert failed.returncode == 137
    memory = SessionMemory(settings=settings)
    late = "generic/team-sync/late"
    assert memory.search("quokka migration", session_id=late) == []  # the snapshot is the older one
    state, reasons = check_health(settings)
    assert state != "OK" and any("interrupted" in r for r in reasons)
    index_sources(settings, now=NOW)
    assert memory.search("quokka migration", session_id=late)
    assert check_health(settings)[0] != "ERROR"


def test_a_truncated_snapshot_is_flagged_then_rebuilt_by_a_plain_run(tmp_path: Path) -> None:
    root = tmp_path / "sources"
    make_sources(root)
    settings = settings_for(tmp_path, "wh", root)
    index_sources(settings, now=NOW)
    snapshot = snapshot_path(settings.warehouse)
    with open(snapshot, "r+b") as handle:
        handle.truncate(snapshot.stat().st_size // 3)
    state, reasons = check_health(settings)
    assert state == "ERROR" and "cannot be read" in reasons[0]
    report = index_sources(settings, now=NOW)
    assert report.snapshot == str(snapshot)
    assert SessionMemory(settings=settings).search("refund")
    assert check_health(settings)[0] != "ERROR"


def test_readers_answer_empty_before_the_first_index(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, "wh", tmp_path / "sources")
    memory = SessionMemory(settings=settings)
    assert not memory.indexed
    assert memory.search("anything") == []
    assert memory.search_sessions("anything") == []
    assert check_health(settings)[0] == "ERROR"


def test_a_new_stage_version_rebuilds_existing_warehouses(tmp_path: Path, monkeypatch) -> None:
    from sessionmem_pipeline.stages import registry

    root = tmp_path / "sources"
    make_sources(root)
    settings = settings_for(tmp_path, "wh", root)
    first = index_sources(settings, now=NOW)
    assert index_sources(settings, now=NOW).chunks == 0
    monkeypatch.setattr(registry, "CHUNK", registry.Stage(**{**vars(registry.CHUNK), "version": 99}))
    monkeypatch.setattr(registry, "STAGES", tuple(registry.CHUNK if s.name == "chunk" else s for s in registry.STAGES))
    from sessionmem_pipeline.stages import pipeline

    monkeypatch.setattr(pipeline, "CHUNK", registry.CHUNK)
    again = index_sources(settings, now=NOW)
    assert again.chunks == first.chunks and again.messages_written == 0
    assert again.embedded == 0  # same chunks: every vector already stored


# ---- one pipeline, two shells ----------------------------------------------------------------------------------


def _config(tmp: Path, name: str, root: Path) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(
        f'warehouse = "{tmp / name / "sessionmem.duckdb"}"\nsources = ["{root}"]\ntimezone = "UTC"\n'
        "[summaries]\nidle_minutes = 0\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.slow
def test_dagster_and_the_cli_build_the_same_warehouse(tmp_path: Path) -> None:
    import dagster as dg

    from sessionmem_pipeline.definitions import defs
    from sessionmem_pipeline.defs.assets import PIPELINE_ASSETS, SENSOR_RUN_TAG, session_summaries
    from sessionmem_pipeline.defs.partitions import session_partitions
    from sessionmem_pipeline.defs.resources import SessionmemResource
    from sessionmem_pipeline.defs.sensors import session_files_sensor

    root = tmp_path / "sources"
    make_sources(root)
    cli = load_settings(_config(tmp_path, "cli", root))
    resources = {"sessionmem": SessionmemResource(config_file=str(_config(tmp_path, "dagster", root)))}
    dagster_settings = resources["sessionmem"].settings()
    instance = dg.DagsterInstance.ephemeral()
    partitioned = [a for a in PIPELINE_ASSETS if a.partitions_def is not None]
    unpartitioned = [a for a in PIPELINE_ASSETS if a.partitions_def is None]

    def sensor_cycle(cursor: str | None) -> str:
        """One tick of the files sensor, and the runs it asks for (as the daemon would launch them)."""
        context = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources, definitions=defs)
        result = session_files_sensor(context)
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(session_partitions.name, list(request.partition_keys))
        for request in result.run_requests:
            keys = sorted(request.asset_graph_subset.get_partitions_subset(dg.AssetKey("raw_messages")).get_partition_keys())
            tags = {SENSOR_RUN_TAG: "test"}
            for key in keys:  # the backfill's runs, one partition each here
                assert dg.materialize(partitioned, instance=instance, resources=resources, partition_key=key, tags=tags).success
            assert dg.materialize(unpartitioned, instance=instance, resources=resources, tags=tags).success
        return result.cursor

    cursor = sensor_cycle(None)
    index_sources(cli)
    # a person materializes one partition's summaries from the UI: it is published with no other click
    key = sorted(instance.get_dynamic_partitions(session_partitions.name))[0]
    assert dg.materialize([session_summaries], instance=instance, resources=resources, partition_key=key).success
    assert tables(snapshot_path(dagster_settings.warehouse)) == tables(dagster_settings.warehouse)

    grown = next((root / "generic" / "team-sync").glob("*.jsonl"))
    with open(grown, "a", encoding="utf-8") as handle:
        handle.write('{"id": "z9", "role": "user", "content": "Ship the quokka release", "timestamp": "2026-01-15T18:00:00Z"}\n')
    sensor_cycle(cursor)
    index_sources(cli)

    dagster_tables, cli_tables = tables(dagster_settings.warehouse), tables(cli.warehouse)
    assert dagster_tables == cli_tables
    assert tables(snapshot_path(dagster_settings.warehouse)) == dagster_tables
    for settings, trigger in ((dagster_settings, "dagster"), (cli, "cli")):
        conn = connect(settings.warehouse, read_only=True)
        try:
            assert conn.execute("SELECT count(*) FROM runs WHERE trigger = ?", [trigger]).fetchone()[0] >= 2
        finally:
            conn.close()
