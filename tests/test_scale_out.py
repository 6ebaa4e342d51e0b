"""Embedding computed outside the writer: staged by parallel compute steps from the published snapshot, committed
by the one writer, and the warehouse the same as an in-process run's."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest
from openai_server import OpenAICompatibleServer

from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.defs.assets import (
    PIPELINE_ASSETS,
    chunk_embeddings,
    chunks,
    collapsed_messages,
    raw_messages,
    search_index,
    staged_chunk_vectors,
)
from sessionmem_pipeline.defs.partitions import session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.providers import embedder_from_settings
from sessionmem_pipeline.stages.discover import discover
from sessionmem_pipeline.stages.run import index_sources
from sessionmem_pipeline.stages.staging import compute_embeddings, staging_folder
from sessionmem_pipeline.warehouse import Warehouse

SAMPLES = Path(__file__).parent.parent / "samples"
PARTITIONED = [a for a in PIPELINE_ASSETS if a.partitions_def is not None]
COMPARED = {
    "sessions": "SELECT session_id, project, message_count FROM sessions",
    "chunks": "SELECT chunk_id, session_id, context_hash, topics FROM chunks",
    "chunk_embeddings": "SELECT chunk_id, session_id, text_hash, embedding FROM chunk_embeddings",
    "embedding_cache": "SELECT model, text_hash, embedding FROM embedding_cache",
    "embedding_failures": "SELECT chunk_id FROM embedding_failures",
    "session_summaries": "SELECT session_id, version, summary FROM session_summaries",
    "stage_state": "SELECT stage, session_id, input_fp, stage_key FROM stage_state WHERE session_id <> '*'",  # per session
}


def write_config(folder: Path, sources: Path, server: OpenAICompatibleServer) -> Path:
    config = folder / "sessionmem.toml"
    config.write_text(
        f'warehouse = "{folder / "w.duckdb"}"\nsources = ["{sources}"]\n'
        f'[embedding]\nprovider = "openai"\nbase_url = "{server.base_url}"\nmodel = "text-embedding-3-small"\n'
        "dimensions = 32\nbatch_size = 4\nmax_in_flight = 1\n",
        encoding="utf-8",
    )
    return config


@pytest.fixture()
def sources(tmp_path: Path) -> Path:
    root = tmp_path / "sources"
    shutil.copytree(SAMPLES / "generic", root / "generic")
    shutil.copytree(SAMPLES / "claude", root / "claude")
    return root


def contents(warehouse: Path) -> dict[str, list[tuple]]:
    with Warehouse(warehouse) as wh:
        return {name: sorted(map(tuple, wh.conn.execute(sql).fetchall()), key=repr) for name, sql in COMPARED.items()}


def materialize(assets: list, config: Path, keys: list[str] | None = None) -> dg.ExecuteInProcessResult:
    instance = dg.DagsterInstance.ephemeral()
    tags = {}
    if keys is not None:
        instance.add_dynamic_partitions(session_partitions.name, keys)
        tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    resources = {"sessionmem": SessionmemResource(config_file=str(config))}
    result = dg.materialize(assets, instance=instance, resources=resources, tags=tags)
    assert result.success
    return result


@pytest.mark.slow
def test_parallel_compute_steps_then_one_commit_build_the_same_warehouse_as_a_serial_run(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    (tmp_path / "serial").mkdir()
    index_sources(load_settings(write_config(tmp_path / "serial", sources, openai_server), env={}))
    (tmp_path / "parallel").mkdir()
    config = write_config(tmp_path / "parallel", sources, openai_server)
    settings = load_settings(config, env={})
    keys = sorted(f.partition_key for f in discover(settings.sources))

    materialize([raw_messages, collapsed_messages, chunks], config, keys)  # publishes the snapshot compute reads
    with ThreadPoolExecutor(3) as pool:  # one compute step per partition, three at a time
        list(pool.map(lambda key: materialize([staged_chunk_vectors], config, [key]), keys))
    assert len(list(staging_folder(settings).glob("*.parquet"))) >= 2
    commit = materialize([chunk_embeddings], config, keys)
    materialize(PARTITIONED, config, keys)
    materialize([search_index], config)

    metadata = commit.get_asset_materialization_events()[0].materialization.metadata
    assert metadata["computed_in_commit"].value == 0  # every vector came from the compute steps
    assert metadata["embedded"].value > 0
    assert list(staging_folder(settings).glob("*.parquet")) == []  # committed files are removed
    parallel, serial = contents(tmp_path / "parallel" / "w.duckdb"), contents(tmp_path / "serial" / "w.duckdb")
    for table in COMPARED:
        assert {repr(r) for r in parallel[table]} ^ {repr(r) for r in serial[table]} == set(), table
        assert parallel[table] == serial[table], table


def test_compute_reads_the_published_snapshot_while_a_writer_holds_the_live_file(
    tmp_path: Path, sources: Path, openai_server: OpenAICompatibleServer
) -> None:
    settings = load_settings(write_config(tmp_path, sources, openai_server), env={})
    assert compute_embeddings(settings, None, embedder_from_settings(settings)).path is None  # nothing published yet
    index_sources(settings)
    wider = settings.with_overrides({"embedding.dimensions": 48})  # another model: every chunk needs a new vector

    with Warehouse(settings.warehouse) as live:  # a run is writing
        chunk_texts = live.scalar("SELECT count(DISTINCT context_content) FROM chunks")
        outcome = compute_embeddings(wider, None, embedder_from_settings(wider))

    staged = pq.read_table(outcome.path)
    assert staged.num_rows == outcome.embedded == chunk_texts
    assert {len(vector) for vector in staged.column("vector").to_pylist()} == {48}
