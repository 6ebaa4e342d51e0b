"""What `sessionmem status`, `health` and `sessions` report, read from the published snapshot (never the live
file, which a run may be writing), the run marker and the search log."""

from __future__ import annotations

import json
from pathlib import Path
from datetime import UTC, datetime, timedelta
from statistics import quantiles
from typing import Any

import duckdb

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core.formats import REGISTRY
from sessionmem_pipeline.core.models import SESSION_SKIP_REASONS
from sessionmem_pipeline.providers import embedder_from_settings
from sessionmem_pipeline.stages.discover import discover
from sessionmem_pipeline.stages.privacy import privacy_rules
from sessionmem_pipeline.stages.provider_batches import WAITING
from sessionmem_pipeline.warehouse import (
    SCHEMA_VERSION,
    Snapshot,
    Warehouse,
    WarehouseError,
    clear_storage_error,
    read_run_marker,
    read_storage_error,
    snapshot_generation,
    writer_is_running,
    writer_lock,
    open_reader,
    search_log_path,
    snapshot_path,
    sql_string_list,
)


UNSUPPORTED_FORMATS = frozenset(f.name for f in REGISTRY.formats if f.parser is None)  # files recorded as skipped

def _rows(conn: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    cursor = conn.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _count(conn: duckdb.DuckDBPyConnection, table: str) -> int:
    try:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except duckdb.CatalogException:
        return 0


def search_metrics(warehouse: Path, now: datetime | None = None) -> dict[str, Any]:
    """Count, searches in the last 24 h, and latency mean and percentiles of the logged searches."""
    latencies = []
    recent = 0
    since = (now or datetime.now(UTC)) - timedelta(hours=24)
    try:
        with open(search_log_path(warehouse), encoding="utf-8") as log:
            for line in log:
                try:
                    entry = json.loads(line)
                    latencies.append(float(entry["latency_ms"]))
                    recent += datetime.fromisoformat(entry["time"]) >= since
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    if not latencies:
        return {"count": 0, "last_24h": 0, "mean_ms": None, "p50_ms": None, "p95_ms": None}
    cuts = quantiles(latencies, n=20) if len(latencies) > 1 else [latencies[0]] * 19
    return {
        "count": len(latencies),
        "last_24h": recent,
        "mean_ms": round(sum(latencies) / len(latencies), 1),
        "p50_ms": round(cuts[9], 1),
        "p95_ms": round(cuts[18], 1),
    }


def _megabytes(*paths: Path) -> float:
    return round(sum(p.stat().st_size for p in paths if p.exists()) / 1e6, 2)


def stale_stages(settings: Settings, conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Per session stage, how many sessions in the snapshot this sessionmem and configuration would build again
    (stage versions or configuration changed since they were built)."""
    from sessionmem_pipeline.stages.registry import Providers, StageContext

    context = StageContext(Snapshot(conn), settings, Providers(settings), "status")
    return context.stale_report()


def read_status(settings: Settings) -> dict[str, Any]:
    warehouse = settings.warehouse
    conn = open_reader(warehouse)
    try:
        read_from = snapshot_path(warehouse)
        stale = stale_stages(settings, conn)
        source_missing = conn.execute("SELECT count(*) FROM sessions WHERE source_missing").fetchone()[0]
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
        per_session = conn.execute(
            "SELECT sum(seconds) / nullif(sum(sessions), 0) FROM runs WHERE sessions > 0"
        ).fetchone()[0]
        formats = _rows(
            conn,
            """SELECT format, count(*) AS files, coalesce(sum(len(session_ids)), 0) AS sessions,
                      coalesce(sum(message_count), 0) AS messages
               FROM source_files GROUP BY format ORDER BY format""",
        )
        quarantine = _rows(conn, "SELECT path, reason, details, sha256, quarantined_at FROM quarantine ORDER BY path")
        skipped_sessions = _skipped_sessions(conn)
        problems = _optional_rows(conn, SOURCE_PROBLEMS_SQL)
        excluded = _optional_rows(conn, EXCLUDED_SQL)
        waiting_batches = _optional_rows(conn, WAITING_BATCHES_SQL)
        model = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
        topics = conn.execute(
            """SELECT topic, count(*) AS n FROM (SELECT unnest(topics) AS topic FROM chunks)
               GROUP BY topic ORDER BY n DESC, topic LIMIT 10"""
        ).fetchall()
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
        "top_topics": [{"topic": t, "chunks": n} for t, n in topics],
        "seconds_per_session": round(per_session, 3) if per_session is not None else None,
        "storage_mb": {
            "warehouse": _megabytes(warehouse),
            "snapshot": _megabytes(snapshot_path(warehouse)),
        },
        "formats": [{**row, "supported": row["format"] not in UNSUPPORTED_FORMATS} for row in formats],
        "quarantine": quarantine,
        "skipped_sessions": skipped_sessions,
        "source_problems": problems,
        "excluded": excluded,
        "sessions_source_missing": source_missing,
        "stale_stages": stale,
        "provider_batches": waiting_batches,
        "last_writer": read_run_marker(warehouse),
        "searches": search_metrics(warehouse),
    }


def _skipped_sessions(conn: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Sessions the source files hold that were left out on purpose, by reason (e.g. warmup sidechains)."""
    counts = {}
    for reason in SESSION_SKIP_REASONS:
        path = '$."' + reason + '"'
        total = conn.execute(
            "SELECT sum(CAST(json_extract(skipped, ?) AS INTEGER)) FROM source_files WHERE status = 'indexed'", [path]
        ).fetchone()[0]
        if total:
            counts[reason] = int(total)
    return counts


def _optional_rows(conn: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    """Rows of a table a snapshot written by an older sessionmem may not have yet (none then)."""
    try:
        return _rows(conn, sql)
    except duckdb.CatalogException:
        return []


SOURCE_PROBLEMS_SQL = "SELECT root, path, kind, detail, recorded_at FROM source_problems ORDER BY root, path"
WAITING_BATCHES_SQL = f"""
    SELECT b.stage, b.local_id, b.batch_id, b.status, b.requests, b.created_at, b.checked_at,
           (SELECT count(*) FROM chunks c WHERE c.context_hash IN (
               SELECT r.input_fp FROM provider_batch_requests r WHERE r.local_id = b.local_id)) AS chunks
    FROM provider_batches b
    WHERE b.status IN ({sql_string_list(WAITING)})
    ORDER BY b.created_at"""
"""Batches sent to the provider's Batch API that have not been answered yet (stages/provider_batches.py)."""
EXCLUDED_SQL = "SELECT path, session_id, reason, excluded_at FROM excluded_sessions ORDER BY path, session_id"


def check_health(settings: Settings) -> tuple[str, list[str]]:
    """OK, DEGRADED (works, with problems worth a look) or ERROR (search cannot work), with reasons."""
    errors: list[str] = []
    problems: list[str] = []
    paused = read_storage_error(settings.warehouse)
    if paused:
        recovered, reason = try_recover(settings.warehouse)
        if not recovered:
            return "ERROR", [f"STORAGE_ERROR at {paused['time']} in {paused['where']}: {paused['error']}; "
                             f"indexing is paused ({reason})"]
        problems.append(f"recovered from the storage error of {paused['time']}: indexing resumes")
    if snapshot_generation(settings.warehouse) is None:
        if snapshot_path(settings.warehouse).exists():
            return "ERROR", [f"{snapshot_path(settings.warehouse)}: the published snapshot cannot be read; "
                             "run `sessionmem index` to publish it again"] + problems
        return "ERROR", [f"{settings.warehouse}: nothing indexed yet; run `sessionmem index`"] + problems
    marker = read_run_marker(settings.warehouse)
    if marker and marker["status"] == "running" and not writer_is_running(settings.warehouse):
        problems.append(f"the last run ({marker['run_id']}, {marker['time']}) was interrupted before it finished: "
                        "run `sessionmem index` to complete it")
    try:
        conn = open_reader(settings.warehouse)
    except WarehouseError as exc:
        return "ERROR", [str(exc)]
    try:
        stale = {stage: n for stage, n in stale_stages(settings, conn).items() if n}
        if stale:
            listed = ", ".join(f"{n} for {stage}" for stage, n in stale.items())
            problems.append(f"sessions not yet built by this sessionmem and configuration ({listed}): run `sessionmem index`")
        version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            errors.append(f"schema version {version}, this sessionmem expects {SCHEMA_VERSION}: run `sessionmem index`")
        chunks = _count(conn, "chunks")
        embedded = _count(conn, "chunk_embeddings")
        failures = _count(conn, "embedding_failures")
        quarantined = _count(conn, "quarantine")
        fts = _count(conn, "kw_docs")
        model_row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
        conn_model = model_row[0] if model_row else None
        last_indexed = conn.execute("SELECT max(last_indexed_at) FROM source_files").fetchone()[0]
        source_problems = [p for p in _optional_rows(conn, SOURCE_PROBLEMS_SQL) if p["kind"] != "missing_root"]
        waiting_batches = _optional_rows(conn, WAITING_BATCHES_SQL)
    finally:
        conn.close()
    if chunks and not fts:
        errors.append("keyword index missing: run `sessionmem index`")
    if waiting_batches:
        problems.append(_waiting_batches_problem(waiting_batches))
    if embedded < chunks:
        problems.append(f"{chunks - embedded} of {chunks} chunks have no embedding ({failures} failed)")
    if quarantined:
        problems.append(f"{quarantined} quarantined files (sessionmem status)")
    stored_model = conn_model
    configured = embedder_from_settings(settings).model_id
    if stored_model and stored_model != configured:
        errors.append(f"indexed with {stored_model} but configured for {configured}: run `sessionmem reembed`")
    changed = files_changed_since(settings, last_indexed)
    if changed:
        problems.append(f"{changed} session files changed since the last index run (stale index)")
    missing = [str(s) for s in settings.sources if not s.is_dir()]  # now, not as the last scan found them
    if missing:
        problems.append(f"source roots not found: {', '.join(missing)}")
    problems += [f"source problem ({p['kind']}): {p['path']}: {p['detail']}" for p in source_problems[:20]]
    if len(source_problems) > 20:
        problems.append(f"... and {len(source_problems) - 20} more source problems (sessionmem status --json)")
    if errors:
        return "ERROR", errors + problems
    return ("DEGRADED" if problems else "OK"), problems


def _waiting_batches_problem(batches: list[dict[str, Any]]) -> str:
    """One line on the open batches of the provider's Batch API: what waits for them, per stage."""
    chunks = sum(b["chunks"] for b in batches if b["stage"] == "embed")
    requests = sum(b["requests"] for b in batches if b["stage"] == "summarize")
    owed = [f"{chunks} chunks' vectors (found by keyword meanwhile)"] if chunks else []
    owed += [f"{requests} summary requests"] if requests else []
    return (
        f"{len(batches)} batches of the provider's Batch API are open, owing {' and '.join(owed) or 'nothing now'} "
        f"(the oldest sent {batches[0]['created_at']:%Y-%m-%d %H:%M}): `sessionmem index` polls them"
    )


def try_recover(warehouse: Path) -> tuple[bool, str]:
    """After a storage error: can the warehouse be opened and written again? If so, lift the pause."""
    try:
        with writer_lock(warehouse, timeout=5, holder="sessionmem health"), Warehouse(warehouse) as wh:
            with wh.transaction():
                wh.set_meta("last_health_write", datetime.now(UTC).isoformat())
    except (duckdb.Error, WarehouseError, OSError) as exc:  # OSError: the disk is still full for the lock file
        return False, f"still failing: {exc}"
    clear_storage_error(warehouse)
    return True, "writable again"


def files_changed_since(settings: Settings, moment: datetime | None) -> int:
    """Session files under the configured roots written after `moment` (from file stats only)."""
    if moment is None:
        return 0
    cutoff = moment.timestamp() * 1e9
    return sum(1 for f in discover(settings.sources, rules=privacy_rules(settings)) if f.stat.mtime_ns > cutoff)


def list_sessions(
    settings: Settings, *, project: str | None = None, with_summaries: bool = False
) -> list[dict[str, Any]]:
    conn = open_reader(settings.warehouse)
    try:
        sessions = _rows(
            conn,
            """
            SELECT session_id, project, title, started_at, ended_at, message_count, topics, summary_version,
                   summary_overview, parent_session_id, source_path
            FROM sessions WHERE ? IS NULL OR project = ? ORDER BY started_at DESC NULLS LAST, session_id
            """,
            [project, project],
        )
        if with_summaries:
            for session in sessions:
                session["summaries"] = _rows(
                    conn,
                    """SELECT version, created_at, model, is_incremental, parts, first_message_id, last_message_id,
                              message_count, overview FROM session_summaries WHERE session_id = ? ORDER BY version""",
                    [session["session_id"]],
                )
        return sessions
    finally:
        conn.close()


def session_history(settings: Settings, session_id: str, *, full: bool = False) -> dict[str, Any]:
    """A session as its summaries (latest, or every version) plus its messages (after the latest summary, or all)."""
    from sessionmem_pipeline.core.compact import agent_summaries
    from sessionmem_pipeline.core.summarize import SessionSummary

    conn = open_reader(settings.warehouse)
    try:
        if not conn.execute("SELECT count(*) FROM sessions WHERE session_id = ?", [session_id]).fetchone()[0]:
            raise ValueError(f"no session {session_id!r} in {settings.warehouse}")
        versions = _rows(
            conn, "SELECT version, summary FROM session_summaries WHERE session_id = ? ORDER BY version", [session_id]
        )
        if not full:
            versions = versions[-1:]
        summaries = [
            {"version": f"agent-{n}", "markdown": agent.content, "source": "agent", **agent.as_json()}
            for n, agent in enumerate(agent_summaries(Snapshot(conn).load_messages(session_id)), start=1)
        ]
        for row in versions:
            summary = SessionSummary.from_dict(json.loads(row["summary"]))
            summaries.append(
                {"version": row["version"], "markdown": summary.to_markdown(), "source": "sessionmem", **summary.to_dict()}
            )
        after = -1
        ours = [s for s in summaries if s["source"] == "sessionmem"]
        if ours and not full:
            found = conn.execute(
                "SELECT seq FROM collapsed_messages WHERE session_id = ? AND message_id = ?",
                [session_id, ours[-1]["last_message_id"]],
            ).fetchone()
            after = found[0] if found else -1
        messages = _rows(
            conn,
            """SELECT message_id, speaker, role, timestamp, text FROM collapsed_messages
               WHERE session_id = ? AND seq > ? ORDER BY seq""",
            [session_id, after],
        )
    finally:
        conn.close()
    return {"session_id": session_id, "summaries": summaries, "messages": messages}
