"""`sessionmem index`: every stage in order, in-process, under the writer lock (the Dagster job runs the same
stage functions, asset by asset)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core import changes
from sessionmem_pipeline.core.errors import ErrorType, SessionMemoryError
from sessionmem_pipeline.core.formats import validate_file
from sessionmem_pipeline.providers import Embedder, chat_model_from_settings, embedder_from_settings
from sessionmem_pipeline.stages.discover import SourceFile, discover, record_source_problems, scan_sources
from sessionmem_pipeline.stages.embed import embed_sessions
from sessionmem_pipeline.stages.ingest import IngestOutcome, ingest_file
from sessionmem_pipeline.stages.memories import ingest_memories
from sessionmem_pipeline.stages.privacy import privacy_rules, remove_excluded_sessions
from sessionmem_pipeline.stages.summaries import (
    due,
    embed_missing_summaries,
    latest_summary,
    pending,
    summarize_sessions,
)
from sessionmem_pipeline.stages.threads import refresh_threads
from sessionmem_pipeline.stages.search_index import refresh_search_index, remove_orphans
from sessionmem_pipeline.stages.transform import chunk_sessions, chunking_options, collapse_sessions
from sessionmem_pipeline.warehouse import (
    Warehouse,
    publish_snapshot,
    snapshot_path,
    storage_guard,
    to_json,
    writer_lock,
)

Progress = Callable[[str, int, int], None]
"""progress(stage, done, total)"""


@dataclass
class IndexReport:
    """What one `index` run did, for the summary line, `--json` and the runs table."""

    run_id: str
    files_seen: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    formats: dict[str, dict[str, int]] = field(default_factory=dict)  # format -> files, sessions, new messages
    quarantined: list[dict[str, str]] = field(default_factory=list)
    source_problems: list[dict[str, str]] = field(default_factory=list)  # what the scan could not read
    excluded: list[dict[str, str]] = field(default_factory=list)  # sessions kept out by privacy rules, and why
    excluded_removed: int = 0  # stored sessions removed because an exclusion now covers them
    notices_changed: bool = False  # source problems or exclusion records differ from what readers last saw
    sessions_changed: int = 0
    messages_written: int = 0
    chunks: int = 0
    tokens: int = 0
    embedded: int = 0
    embeddings_cached: int = 0
    embedding_failures: int = 0
    orphans_removed: int = 0
    summaries_written: int = 0
    memories: int = 0
    memories_embedded: int = 0
    threads: int | None = None  # threads rebuilt (None when nothing changed)
    warnings: list[str] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)  # typed (core/errors.py): type, message, recoverable
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    snapshot: str | None = None

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Adds the time spent in the block to `stage_seconds[stage]`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + time.perf_counter() - started

    @property
    def changed(self) -> bool:
        return bool(
            self.sessions_changed
            or self.orphans_removed
            or self.excluded_removed
            or self.notices_changed
            or self.quarantined
            or self.embedded
            or self.summaries_written
            or self.memories_embedded
        )

    def format_lines(self) -> list[str]:
        """Per transcript format: files, sessions, and messages written in this run."""
        return [
            f"  {name}: {n['files']} files, {n['sessions']} sessions, {n['messages']} new messages"
            for name, n in sorted(self.formats.items())
        ]

    def summary_line(self) -> str:
        decided = ", ".join(f"{n} {d}" for d, n in sorted(self.decisions.items())) or "none"
        return (
            f"indexed {self.files_seen} files ({decided}): {self.sessions_changed} sessions changed, "
            f"{self.messages_written} messages, {self.chunks} chunks, {self.embedded} embedded "
            f"({self.embeddings_cached} cached), {self.summaries_written} summaries, {len(self.quarantined)} quarantined, "
            f"{self.orphans_removed} removed in {self.seconds:.1f}s"
        )


def _counter(tick: Progress, stage: str, total: int) -> Callable[[int], None]:
    """A progress callback taking batch sizes, reporting running totals."""
    done = 0

    def advance(count: int) -> None:
        nonlocal done
        done += count
        tick(stage, done, total)

    return advance


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
) -> IndexReport:
    """Ingest, transform, embed, refresh the search index and publish the snapshot."""
    started = time.perf_counter()
    report = IndexReport(run_id=f"cli-{uuid.uuid4().hex[:12]}")
    roots = list(sources) if sources else list(settings.sources)
    tick = progress or (lambda stage, done, total: None)
    with writer_lock(settings.warehouse, holder="sessionmem index"), storage_guard(settings.warehouse, "index"):
        with Warehouse(settings.warehouse) as wh:
            started_at = datetime.now(UTC)
            rules = privacy_rules(settings)
            scan = scan_sources(roots, since=since, rules=rules)
            report.notices_changed = record_source_problems(wh, roots, scan.problems)
            report.source_problems = [asdict(p) for p in scan.problems]
            report.excluded = [{"path": path, "reason": str(why)} for path, why in scan.excluded]
            files = _select(scan.files, wh, session)
            report.files_seen = len(files)
            changed: list[str] = []
            with report.timed("ingest"):
                for done, source in enumerate(files, start=1):
                    outcome = ingest_file(
                        wh, source, max_bad_share=settings["validation.max_bad_line_share"], full=full, privacy=rules
                    )
                    _record(report, outcome)
                    changed += outcome.changed_session_ids
                    tick("ingest", done, len(files))
                removed = remove_excluded_sessions(wh, settings)
                report.excluded_removed = len(removed)
                report.excluded += [{"session_id": sid, "reason": reason} for sid, reason in removed]
            report.sessions_changed = len(changed)

            embedder = embedder or embedder_from_settings(settings)
            llm = chat_model_from_settings(settings)
            with report.timed("collapse"):
                collapse_sessions(wh, changed)
            with report.timed("chunk+topics"):
                chunked = chunk_sessions(wh, changed, **chunking_options(settings, embedder, llm))
            report.chunks, report.tokens = chunked.chunks, chunked.tokens
            report.warnings += chunked.warnings

            all_sessions = [r[0] for r in wh.conn.execute("SELECT session_id FROM sessions").fetchall()]
            to_embed = len(wh.chunks_without_embedding(all_sessions)) if wh.get_meta("embedding_model") else None
            total = to_embed if to_embed is not None else wh.scalar("SELECT count(*) FROM chunks")
            with report.timed("embed"):
                embedding = embed_sessions(wh, all_sessions, embedder, progress=_counter(tick, "embed", total))
            report.embedded, report.embeddings_cached = embedding.embedded, embedding.cached
            report.embedding_failures = embedding.failed
            if embedding.failed:
                message = f"{embedding.failed} chunks could not be embedded; they are retried on the next run"
                report.errors.append(SessionMemoryError(ErrorType.EMBEDDING_FAILED, message).as_dict())

            if settings["summaries.enabled"]:
                ready = due(
                    pending(wh.conn),
                    now=datetime.now(UTC),
                    idle_minutes=settings["summaries.idle_minutes"],
                    message_threshold=settings["summaries.message_threshold"],
                )
                with report.timed("summarize"):
                    summarized = summarize_sessions(wh, [r["session_id"] for r in ready], llm=llm, embedder=embedder)
                report.summaries_written = summarized.versions_written
                report.warnings += summarized.llm_fallbacks
            if report.summaries_written or report.sessions_changed or report.excluded_removed:
                with report.timed("threads"):
                    report.threads = refresh_threads(wh)
            with report.timed("memories"):
                memories = ingest_memories(wh, roots, embedder)
            report.memories, report.memories_embedded = memories.memories, memories.embedded
            report.warnings += memories.warnings

            if session is None:
                report.orphans_removed = remove_orphans(wh, roots)
            publish = report.changed or not snapshot_path(settings.warehouse).exists()
            if publish:
                with report.timed("search index"):
                    refresh_search_index(wh)
            report.seconds = time.perf_counter() - started
            _record_run(wh, report, started_at, "cli")
            wh.checkpoint()
        if publish:
            with report.timed("snapshot"):
                report.snapshot = str(publish_snapshot(settings.warehouse))
    report.seconds = time.perf_counter() - started
    return report


def _record(report: IndexReport, outcome: IngestOutcome) -> None:
    decision = "quarantined" if outcome.quarantine_reason else outcome.decision
    report.decisions[decision] = report.decisions.get(decision, 0) + 1
    report.messages_written += outcome.messages_written
    if outcome.format and not outcome.quarantine_reason:
        found = report.formats.setdefault(outcome.format, {"files": 0, "sessions": 0, "messages": 0})
        found["files"] += 1
        found["sessions"] += len(outcome.session_ids)
        found["messages"] += outcome.messages_written
    report.warnings += outcome.warnings
    report.excluded += [{"session_id": sid, "reason": reason} for sid, reason in outcome.excluded]
    report.notices_changed |= bool(outcome.excluded)
    report.errors += [SessionMemoryError(ErrorType.PARSE_ERROR, w).as_dict() for w in outcome.warnings]
    if outcome.quarantine_reason:
        report.quarantined.append({"path": outcome.path, "reason": outcome.quarantine_reason})
        message = f"{outcome.path}: quarantined: {outcome.quarantine_reason}"
        report.errors.append(SessionMemoryError(ErrorType.VALIDATION_ERROR, message).as_dict())


def _record_run(wh: Warehouse, report: IndexReport, started_at: datetime, trigger: str) -> None:
    with wh.transaction():
        wh.insert(
            "runs",
            [
                {
                    "run_id": report.run_id,
                    "trigger": trigger,
                    "started_at": started_at,
                    "finished_at": datetime.now(UTC),
                    "status": "success",
                    "files_seen": report.files_seen,
                    "files_changed": report.files_seen - report.decisions.get(changes.UNCHANGED, 0),
                    "sessions": report.sessions_changed,
                    "messages": report.messages_written,
                    "chunks": report.chunks,
                    "embedded": report.embedded,
                    "quarantined": len(report.quarantined),
                    "seconds": report.seconds,
                    "details": to_json({k: v for k, v in asdict(report).items() if k in ("decisions", "warnings")}),
                }
            ],
        )


def reembed(settings: Settings, *, embedder: Embedder | None = None, progress: Progress | None = None) -> IndexReport:
    """Every chunk embedded again with the configured model (vectors it already cached are reused), then the
    index refreshed and the snapshot published."""
    started = time.perf_counter()
    report = IndexReport(run_id=f"reembed-{uuid.uuid4().hex[:12]}")
    embedder = embedder or embedder_from_settings(settings)
    tick = progress or (lambda stage, done, total: None)
    with writer_lock(settings.warehouse, holder="sessionmem reembed"), storage_guard(settings.warehouse, "reembed"):
        with Warehouse(settings.warehouse) as wh:
            started_at = datetime.now(UTC)
            wh.ensure_embedding_table(embedder.model_id, embedder.dimensions, reset=True)
            sessions = [r[0] for r in wh.conn.execute("SELECT session_id FROM sessions").fetchall()]
            total = wh.scalar("SELECT count(*) FROM chunks")
            outcome = embed_sessions(wh, sessions, embedder, progress=_counter(tick, "embed", total))
            report.embedded, report.embeddings_cached = outcome.embedded, outcome.cached
            report.embedding_failures = outcome.failed
            with wh.transaction():
                wh.conn.execute("UPDATE session_summaries SET embedding = NULL")
                wh.conn.execute("UPDATE memories SET embedding = NULL")
            embed_missing_summaries(wh, embedder)
            ingest_memories(wh, list(settings.sources), embedder)
            refresh_search_index(wh)
            report.seconds = time.perf_counter() - started
            _record_run(wh, report, started_at, "reembed")
            wh.checkpoint()
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
            outcome = summarize_sessions(
                wh,
                [session_id],
                llm=chat_model_from_settings(settings),
                embedder=embedder_from_settings(settings),
                full=full,
            )
            if outcome.versions_written:
                refresh_search_index(wh)
            version, summary = latest_summary(wh, session_id)
        if outcome.versions_written:
            publish_snapshot(settings.warehouse)
    fallback = outcome.llm_fallbacks[0] if outcome.llm_fallbacks else None
    return version, summary, bool(outcome.versions_written), fallback


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
