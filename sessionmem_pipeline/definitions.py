"""The Dagster code location: assets, checks, the sensor and the resource."""

import os

import dagster as dg

from sessionmem_pipeline.defs.assets import PIPELINE_ASSETS
from sessionmem_pipeline.defs.checks import PIPELINE_CHECKS
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.defs.sensors import (
    provider_batches_sensor,
    session_files_sensor,
    summary_due_sensor,
    warehouse_state_sensor,
)


def _executor() -> dg.ExecutorDefinition | None:
    """`DAGSTER_EXECUTOR_SESSIONMEM=celery` (deploy/, the `[deploy]` extra): steps run on Celery workers on other
    machines; otherwise Dagster's default executor."""
    if os.environ.get("DAGSTER_EXECUTOR_SESSIONMEM") == "celery":
        from dagster_celery import celery_executor

        return celery_executor
    return None


defs = dg.Definitions(
    executor=_executor(),
    assets=PIPELINE_ASSETS,
    asset_checks=PIPELINE_CHECKS,
    sensors=[session_files_sensor, summary_due_sensor, warehouse_state_sensor, provider_batches_sensor],
    resources={"sessionmem": SessionmemResource()},
)
