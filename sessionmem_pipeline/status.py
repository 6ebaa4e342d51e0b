"""What `sessionmem status`, `health` and `sessions` report, read from the published snapshot (never the live
file while a snapshot exists) and the search log."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import quantiles
from typing import Any

import duckdb

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.warehouse import SCHEMA_VERSION, WarehouseError, open_reader, search_log_path, snapshot_path


def _rows(conn: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    cursor = conn.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _count(conn: duckdb.DuckDBPyConnection, table: str) -> int:
    try:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except duckdb.CatalogException:
        return 0


def search_metrics(warehouse: Path) -> dict[str, Any]:
    """Count and latency percentiles of the searches logged beside the warehouse."""
    latencies = []
    try:
        with open(search_log_path(warehouse), encoding="utf-8") as log:
            for line in log:
                try:
                    latencies.append(float(json.loads(line)["latency_ms"]))
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    if not latencies:
        return {"count": 0, "p50_ms": None, "p95_ms": None}
    if len(latencies) == 1:
        return {"count": 1, "p50_ms": latencies[0], "p95_ms": latencies[0]}
    cuts = quantiles(latencies, n=20)
    return {"count": len(latencies), "p50_ms": round(cuts[9], 1), "p95_ms": round(cuts[18], 1)}


def read_status(settings: Settings) -> dict[str, Any]:
    warehouse = settings.warehouse
    conn = open_reader(warehouse)
    try:
        read_from = snapshot_path(warehouse) if snapshot_path(warehouse).exists() else warehouse
        counts = {
            "sessions": _count(conn, "sessions"),
            "messages": _count(conn, "messages"),
            "chunks": _count(conn, "chunks"),
            "embedded": _count(conn, "chunk_embeddings"),
            "embedding_failures": _count(conn, "embedding_failures"),
            "summaries": _count(conn, "session_summaries"),
            "files": _count(conn, "source_files"),
            "parse_warnings": _count(conn, "parse_warnings"),
        }
        runs = _rows(conn, "SELECT * FROM runs ORDER BY finished_at DESC LIMIT 1")
        quarantine = _rows(conn, "SELECT path, reason, details, sha256, quarantined_at FROM quarantine ORDER BY path")
        model = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
    finally:
        conn.close()
    last_run = runs[0] if runs else None
    if last_run:
        last_run.pop("details", None)
    return {
        "warehouse": str(warehouse),
        "read_from": str(read_from),
        "counts": counts,
        "embedding_model": model[0] if model else None,
        "last_run": last_run,
        "quarantine": quarantine,
        "searches": search_metrics(warehouse),
    }


def check_health(settings: Settings) -> tuple[str, list[str]]:
    """OK, DEGRADED (works, with problems worth a look) or ERROR (search cannot work), with reasons."""
    errors: list[str] = []
    problems: list[str] = []
    try:
        conn = open_reader(settings.warehouse)
    except WarehouseError as exc:
        return "ERROR", [str(exc)]
    try:
        version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            errors.append(f"schema version {version}, this sessionmem expects {SCHEMA_VERSION}: run `sessionmem index`")
        chunks = _count(conn, "chunks")
        embedded = _count(conn, "chunk_embeddings")
        failures = _count(conn, "embedding_failures")
        quarantined = _count(conn, "quarantine")
        fts = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'fts_main_chunks'"
        ).fetchone()[0]
    finally:
        conn.close()
    if chunks and not fts:
        errors.append("full-text index missing: run `sessionmem index`")
    if embedded < chunks:
        problems.append(f"{chunks - embedded} of {chunks} chunks have no embedding ({failures} failed)")
    if quarantined:
        problems.append(f"{quarantined} quarantined files (sessionmem status)")
    missing = [str(s) for s in settings.sources if not s.is_dir()]
    if missing:
        problems.append(f"source roots not found: {', '.join(missing)}")
    if not snapshot_path(settings.warehouse).exists():
        problems.append("no published snapshot yet: readers fall back to the live file")
    if errors:
        return "ERROR", errors + problems
    return ("DEGRADED" if problems else "OK"), problems


def list_sessions(settings: Settings, *, project: str | None = None) -> list[dict[str, Any]]:
    conn = open_reader(settings.warehouse)
    try:
        return _rows(
            conn,
            """
            SELECT session_id, project, title, started_at, ended_at, message_count, topics, summary_version,
                   summary_overview, parent_session_id, source_path
            FROM sessions WHERE ? IS NULL OR project = ? ORDER BY started_at DESC NULLS LAST, session_id
            """,
            [project, project],
        )
    finally:
        conn.close()
