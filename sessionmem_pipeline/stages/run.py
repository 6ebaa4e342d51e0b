"""`sessionmem index`: every stage in order, in-process, under the writer lock (the Dagster job runs the same
stage functions, asset by asset)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core import changes
from sessionmem_pipeline.providers import Embedder
from sessionmem_pipeline.stages.discover import SourceFile, discover, scan_sources
from sessionmem_pipeline.stages.pipeline import StageReport, run_all
from sessionmem_pipeline.stages.privacy import privacy_rules
from sessionmem_pipeline.stages.registry import Providers, StageContext, fault_point
from sessionmem_pipeline.stages.search_index import refresh_search_index
from sessionmem_pipeline.stages.summaries import embed_missing_summaries, latest_summary, summarize_sessions
from sessionmem_pipeline.stages.memories import ingest_memories
from sessionmem_pipeline.stages.embed import embed_sessions
from sessionmem_pipeline.core.formats import validate_file
from sessionmem_pipeline.warehouse import (
    Warehouse,
    publish_if_stale,
    publish_snapshot,
    rebuild_file,
    storage_guard,
    to_json,
    write_run_marker,
    writer_lock,
)

Progress = Callable[[str, int, int], None]
"""progress(stage, done, total)"""


@dataclass
class IndexReport(StageReport):
    """What one `index` run did, for the summary line, `--json` and the runs table."""

    run_id: str = ""
    seconds: float = 0.0
    snapshot: str | None = None

    def format_lines(self) -> list[str]:
        """Per transcript format: files, sessions, and messages written in this run."""
        return [
            f"  {name}: {n['files']} files, {n['sessions']} sessions, {n['messages']} new messages"
            for name, n in sorted(self.formats.items())
        ]

    def batch_line(self) -> str | None:
        """What went through the provider's Batch API in this run, when anything did or still waits."""
        counts = (self.embed_batch_submitted, self.embed_batch_written, self.chunks_waiting,
                  self.summary_batch_submitted, self.summary_batch_answers, self.summaries_waiting)
        if not any(counts):
            return None
        return (
            "provider batches: {} texts sent, {} vectors taken, {} chunks wait; "
            "{} summary requests sent, {} answers taken, {} sessions wait".format(*counts)
        )

    def summary_line(self) -> str:
        decided = ", ".join(f"{n} {d}" for d, n in sorted(self.decisions.items())) or "none"
        return (
            f"indexed {self.files_seen} files ({decided}): {self.sessions_changed} sessions changed, "
            f"{self.messages_written} messages, {self.chunks} chunks, {self.embedded} embedded "
            f"({self.embeddings_cached} cached), {self.summaries_written} summaries, {len(self.quarantined)} quarantined, "
            f"{self.sources_missing} sources missing in {self.seconds:.1f}s"
        )


def _select(files: Sequence[SourceFile], wh: Warehouse, session: str | None) -> list[SourceFile]:
    if session is None:
        return list(files)
    keys = {r["partition_key"] for r in wh.indexed_paths() if session in (r["session_ids"] or [])}
    return [f for f in files if f.partition_key in keys or f.partition_key == session]


def index_sources(
    settings: Settings,
    *,
    sources: Sequence[Path] | None = None,
    session: str | None = None,
    full: bool = False,
    since: datetime | None = None,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
    now: datetime | None = None,
) -> IndexReport:
    """Every registered stage in order, in-process, under the writer lock; then the snapshot is published if it
    is missing, unreadable or older than the warehouse. Each stage picks its own work from the stage state, so
    this also completes whatever an earlier run left undone."""
    started = time.perf_counter()
    report = IndexReport(run_id=f"cli-{uuid.uuid4().hex[:12]}")
    roots = list(sources) if sources else list(settings.sources)
    with writer_lock(settings.warehouse, holder="sessionmem index"), storage_guard(settings.warehouse, "index"):
        write_run_marker(settings.warehouse, report.run_id, "running")
        with Warehouse(settings.warehouse) as wh:
            started_at = datetime.now(UTC)
            ctx = StageContext(
                wh,
                settings,
                Providers(settings, embedder),
                report.run_id,
                now=now or started_at,
                progress=progress or (lambda stage, done, total: None),
            )
            with report.timed("walk"):
                scan = scan_sources(roots, since=since, rules=privacy_rules(settings))
            scan.files = _select(scan.files, wh, session)
            scope_roots = roots if session is None and since is None else None
            run_all(ctx, scan, scope_roots, report, full=full)
            report.seconds = time.perf_counter() - started
            record_run(wh, report, started_at, "cli")
            generation, outgrown = wh.finish(measure=report.indexed)
        fault_point("run", "after")
        if outgrown:
            with report.timed("rebuild"):
                rebuild_file(settings.warehouse)
        with report.timed("publish"):
            published = publish_if_stale(settings.warehouse, generation)
        report.snapshot = str(published) if published else None
        write_run_marker(settings.warehouse, report.run_id, "finished")
    report.seconds = time.perf_counter() - started
    return report


RUN_TOTALS = ("files_seen", "sessions_changed", "messages_written", "chunks", "embedded")


def record_run(wh: Warehouse, report: IndexReport, started_at: datetime, trigger: str) -> None:
    """The run's row in `runs` (a Dagster run adds its steps' counts to the same row)."""
    run_id = report.run_id
    previous = wh.query("SELECT * FROM runs WHERE run_id = ?", [run_id])
    totals = {
        "files_seen": report.files_seen,
        "files_changed": report.files_seen - report.decisions.get(changes.UNCHANGED, 0),
        "sessions": report.sessions_changed,
        "messages": report.messages_written,
        "chunks": report.chunks,
        "embedded": report.embedded,
        "quarantined": len(report.quarantined),
    }
    if previous:
        totals = {k: v + (previous[0][k] or 0) for k, v in totals.items()}
        started_at = previous[0]["started_at"]
    with wh.transaction():
        wh.delete_where("runs", "run_id", [run_id])
        wh.insert(
            "runs",
            [
                {
                    "run_id": run_id,
                    "trigger": trigger,
                    "started_at": started_at,
                    "finished_at": datetime.now(UTC),
                    "status": "success",
                    **totals,
                    "seconds": (datetime.now(UTC) - started_at).total_seconds(),
                    "details": to_json({"decisions": report.decisions, "warnings": report.warnings}),
                }
            ],
        )


def reembed(settings: Settings, *, embedder: Embedder | None = None, progress: Progress | None = None) -> IndexReport:
    """Every chunk embedded again with the configured model (vectors it already cached are reused), then the
    index refreshed and the snapshot published."""
    started = time.perf_counter()
    report = IndexReport(run_id=f"reembed-{uuid.uuid4().hex[:12]}")
    embedder = embedder or Providers(settings).embedder
    tick = progress or (lambda stage, done, total: None)
    with writer_lock(settings.warehouse, holder="sessionmem reembed"), storage_guard(settings.warehouse, "reembed"):
        with Warehouse(settings.warehouse) as wh:
            started_at = datetime.now(UTC)
            wh.ensure_embedding_table(embedder.model_id, embedder.dimensions, reset=True)
            sessions = [r[0] for r in wh.conn.execute("SELECT session_id FROM sessions").fetchall()]
            total = wh.scalar("SELECT count(*) FROM chunks")
            done = 0

            def advance(count: int) -> None:
                nonlocal done
                done += count
                tick("embed", done, total)

            outcome = embed_sessions(wh, sessions, embedder, progress=advance)
            report.embedded, report.embeddings_cached = outcome.embedded, outcome.cached
            report.embedding_failures = outcome.failed
            with wh.transaction():
                wh.conn.execute("UPDATE session_summaries SET embedding = NULL")
                wh.conn.execute("UPDATE memories SET embedding = NULL")
                wh.bump_generation()
            embed_missing_summaries(wh, embedder)
            ingest_memories(wh, list(settings.sources), embedder)
            refresh_search_index(wh)
            report.seconds = time.perf_counter() - started
            record_run(wh, report, started_at, "reembed")
            wh.finish(measure=False)
        report.snapshot = str(publish_snapshot(settings.warehouse))
    return report


def summarize_now(settings: Settings, session_id: str, *, full: bool = False, lock_timeout: float = 600.0):
    """`sessionmem summarize` / the `summarize_session` tool: one session's summary now (a new version only if its
    input changed). Returns (version, summary, written, fallback error or None)."""
    with (
        writer_lock(settings.warehouse, holder="sessionmem summarize", timeout=lock_timeout),
        storage_guard(settings.warehouse, "summarize"),
    ):
        with Warehouse(settings.warehouse) as wh:
            if wh.session_row(session_id) is None:
                raise ValueError(f"no session {session_id!r} in {settings.warehouse}")
            providers = Providers(settings)
            outcome = summarize_sessions(wh, [session_id], llm=providers.llm, embedder=providers.embedder, full=full)
            if outcome.versions_written:
                with wh.transaction():
                    wh.bump_generation()
                refresh_search_index(wh)
            version, summary = latest_summary(wh, session_id)
            generation, _ = wh.finish(measure=False)
        publish_if_stale(settings.warehouse, generation)
    fallback = outcome.llm_fallbacks[0] if outcome.llm_fallbacks else None
    return version, summary, bool(outcome.versions_written), fallback


def forget(settings: Settings, *, session_id: str | None = None, project: str | None = None) -> list[str]:
    """`sessionmem forget`: remove one session, or every session of a project, from the warehouse and the
    snapshot. Forgotten sessions are not indexed again from files still on disk."""
    if (session_id is None) == (project is None):
        raise ValueError("forget needs exactly one of a session id or --project")
    with writer_lock(settings.warehouse, holder="sessionmem forget"), storage_guard(settings.warehouse, "forget"):
        with Warehouse(settings.warehouse) as wh:
            column, value = ("session_id", session_id) if session_id is not None else ("project", project)
            ids = [r[0] for r in wh.conn.execute(f"SELECT session_id FROM sessions WHERE {column} = ?", [value]).fetchall()]
            if not ids:
                raise ValueError(f"no session with {column} {value!r} in {settings.warehouse}")
            with wh.transaction():
                wh.forget_sessions(ids, datetime.now(UTC))
            refresh_search_index(wh)
            generation, _ = wh.finish(measure=False)
        publish_if_stale(settings.warehouse, generation)
    return ids


def validate_sources(roots: Sequence[Path], *, max_bad_share: float, since: datetime | None = None) -> list[dict]:
    """`index --validate-only`: each file's validation report (spec 001), reading sources and writing nothing."""
    reports = []
    for source in discover(roots, since=since):
        try:
            with open(source.path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            reports.append({"path": source.path, "valid": False, "format": None, "errors": [str(exc)], "warnings": []})
            continue
        report = validate_file(source.path, source.root, data, max_bad_share=max_bad_share)
        reports.append(
            {
                "path": source.path,
                "valid": report.valid,
                "format": report.format,
                "quarantine_reason": report.quarantine_reason,
                "lines": report.lines,
                "bad_lines": report.bad_lines,
                "errors": list(report.errors),
                "warnings": list(report.warnings),
            }
        )
    return reports
