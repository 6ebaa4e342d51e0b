"""The Dagster code location: assets, checks, the sensor and the resource."""

import dagster as dg

from sessionmem_pipeline.defs.assets import PIPELINE_ASSETS
from sessionmem_pipeline.defs.checks import PIPELINE_CHECKS
from sessionmem_pipeline.defs.resources import SessionmemResource
from sessionmem_pipeline.defs.sensors import session_files_sensor, summary_due_sensor, warehouse_state_sensor

defs = dg.Definitions(
    assets=PIPELINE_ASSETS,
    asset_checks=PIPELINE_CHECKS,
    sensors=[session_files_sensor, summary_due_sensor, warehouse_state_sensor],
    resources={"sessionmem": SessionmemResource()},
)
