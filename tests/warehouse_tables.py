"""Two warehouses compared whole: every user table's rows, without the columns that say when or by which run a
row was written."""

from __future__ import annotations

from pathlib import Path

from sessionmem_pipeline.warehouse import DATABASE, connect

VOLATILE = {"built_at", "run_id", "indexed_at", "last_indexed_at", "created_at", "quarantined_at", "recorded_at",
            "updated_at", "mtime_ns", "excluded_at", "recorded_seq"}
"""Columns that say when or by which run a row was written, not what it holds."""
BOOKKEEPING = {"runs", "meta", "schema_version"}
"""Tables about the runs themselves (the run log, the generation counter, the schema's version)."""


def warehouse_tables(path: Path, skip: set[str] = BOOKKEEPING) -> dict[str, list[tuple]]:
    """Every user table but `skip`, its rows without volatile columns, sorted: what two warehouses must agree on."""
    conn = connect(path, read_only=True)
    try:
        names = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? AND table_schema = 'main' "
            "AND table_type = 'BASE TABLE'", [DATABASE]).fetchall()]
        dump = {}
        for name in sorted(set(names) - skip):
            columns = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_catalog = ? AND table_name = ? "
                "ORDER BY ordinal_position", [DATABASE, name]).fetchall() if r[0] not in VOLATILE]
            select = ", ".join(f'CAST("{c}" AS VARCHAR)' for c in columns)
            dump[name] = sorted(conn.execute(f"SELECT {select} FROM {name}").fetchall(), key=repr)
        return dump
    finally:
        conn.close()
