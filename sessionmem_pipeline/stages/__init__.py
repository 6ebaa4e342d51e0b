"""Pipeline stages: each wires one core step to the warehouse. Dagster assets and `sessionmem index` call the same
functions, so the CLI and the UI do exactly the same work."""
