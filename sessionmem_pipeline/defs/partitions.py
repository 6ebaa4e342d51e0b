"""One dynamic partition per session file (keyed by the file-derived session id of INTERFACES.md).

A partition is a file rather than a parsed session id because the sensor must name partitions from file stats
alone; in every agent format a file is one session, and a generic file split at 30-minute gaps keeps its
sessions together so a growing file re-splits consistently.
"""

import dagster as dg

session_partitions = dg.DynamicPartitionsDefinition(name="session_files")
WAREHOUSE_POOL = "duckdb_warehouse"
COMPUTE_POOL = "sessionmem_compute"
"""Steps that never open the live warehouse (they read the published snapshot and write staging files): many may run
at once. Set its limit per instance: `dagster instance concurrency set sessionmem_compute 4`."""
