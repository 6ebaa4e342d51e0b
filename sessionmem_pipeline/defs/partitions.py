"""One dynamic partition per session file (keyed by the file-derived session id of INTERFACES.md).

A partition is a file rather than a parsed session id because the sensor must name partitions from file stats
alone; in every agent format a file is one session, and a generic file split at 30-minute gaps keeps its
sessions together so a growing file re-splits consistently.
"""

import dagster as dg

session_partitions = dg.DynamicPartitionsDefinition(name="session_files")
WAREHOUSE_POOL = "duckdb_warehouse"
