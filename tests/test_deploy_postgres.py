"""deploy/'s Dagster instance for real: run, event and schedule storage in a running PostgreSQL server, the compute
pool's limit set with the documented command, and real partitions materialized through compute and commit.

Needs a server: `.ci/run` starts one and exports TEST_POSTGRES_DSN_SESSIONMEM (and requires this test to run); on
a machine without one (the user's `scripts/test.sh`) it skips and says why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from openai_server import OpenAICompatibleServer

from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.defs.assets import PIPELINE_ASSETS, chunk_embeddings
from sessionmem_pipeline.defs.partitions import COMPUTE_POOL, session_partitions
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.stages.discover import discover
from sessionmem_pipeline.stages.staging import staging_folder
from sessionmem_pipeline.warehouse import Warehouse

ROOT = Path(__file__).parent.parent
DSN_VARIABLE = "TEST_POSTGRES_DSN_SESSIONMEM"
REQUIRED_VARIABLE = "TEST_POSTGRES_REQUIRED_SESSIONMEM"


@pytest.fixture()
def postgres_dsn() -> str:
    dsn = os.environ.get(DSN_VARIABLE)
    if not dsn:
        reason = f"no PostgreSQL server configured: set {DSN_VARIABLE} (`.ci/run` starts one)"
        if os.environ.get(REQUIRED_VARIABLE):
            pytest.fail(reason)
        pytest.skip(reason)
    if shutil.which("dagster", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("the dagster CLI is missing from the environment")
    try:
        import dagster_postgres  # noqa: F401
    except ImportError:
        (pytest.fail if os.environ.get(REQUIRED_VARIABLE) else pytest.skip)(
            'dagster-postgres is not installed: pip install -e ".[deploy]"'
        )
    return dsn


@pytest.mark.slow
def test_deploy_instance_on_postgres_materializes_partitions_through_compute_and_commit(
    tmp_path: Path, postgres_dsn: str, openai_server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_dsn)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    subprocess.run(  # as the README tells an operator to
        [str(Path(sys.executable).parent / "dagster"), "instance", "concurrency", "set", COMPUTE_POOL, "3"],
        check=True, capture_output=True,
    )
    sources = tmp_path / "sources"
    shutil.copytree(ROOT / "samples" / "claude", sources / "claude")
    config = tmp_path / "sessionmem.toml"
    config.write_text(
        f'warehouse = "{tmp_path / "w.duckdb"}"\nsources = ["{sources}"]\n[staging]\npath = "{tmp_path / "shared"}"\n'
        f'[embedding]\nprovider = "openai"\nbase_url = "{openai_server.base_url}"\ndimensions = 32\n',
        encoding="utf-8",
    )
    keys = sorted(f.partition_key for f in discover([sources]))

    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert instance.event_log_storage.get_concurrency_info(COMPUTE_POOL).slot_count == 3
        instance.add_dynamic_partitions(session_partitions.name, keys)
        result = dg.materialize(
            [a for a in PIPELINE_ASSETS if a.partitions_def is not None],
            instance=instance,
            resources={"sessionmem": SessionmemResource(config_file=str(config))},
            tags={"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]},
        )
        assert result.success
        stored = instance.get_run_by_id(result.run_id)  # read back from PostgreSQL
        assert stored is not None and stored.is_success
        committed = instance.fetch_materializations(chunk_embeddings.key, limit=100).records
        assert {r.partition_key for r in committed if r.run_id == result.run_id} == set(keys)
        assert all(r.asset_materialization.metadata["computed_in_commit"].value == 0 for r in committed
                   if r.run_id == result.run_id)

    assert list(staging_folder(load_settings(config, env={})).parent.glob("*/*.parquet")) == []  # all committed
    with Warehouse(tmp_path / "w.duckdb") as wh:
        assert wh.scalar("SELECT count(*) FROM chunk_embeddings") == wh.scalar("SELECT count(*) FROM chunks") > 0
