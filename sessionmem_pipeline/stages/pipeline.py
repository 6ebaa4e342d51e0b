"""Each registered stage as one function of a `StageContext`: it selects its own stale work from the durable
stage state, does it, and records it. `sessionmem index` calls them in order (`run_all`); each Dagster asset calls
the one it stands for, scoped to its partitions. Nothing here depends on what an earlier stage of the same run
handed over, so any run, killed or failed anywhere, is completed by the next one. The per-session stages are the
commit half of the compute/commit split (stages/staging.py): they take what a compute step staged for exactly
their input and compute the rest themselves.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sessionmem_pipeline.core import changes
from sessionmem_pipeline.core.errors import ErrorType, SessionMemoryError
from sessionmem_pipeline.providers.embedders import OpenAIEmbedder
from sessionmem_pipeline.providers.llm import OpenAIChatModel
from sessionmem_pipeline.recaps import RECAPS_MADE_BY, refresh_recaps
from sessionmem_pipeline.stages.discover import Discovery, SourceFile, file_stat, record_source_problems
from sessionmem_pipeline.stages.embed import embed_sessions
from sessionmem_pipeline.stages.ingest import IngestOutcome, ingest_file, mark_missing
from sessionmem_pipeline.stages.ingest_staging import StagedParses, read_parses
from sessionmem_pipeline.stages.memories import find_memory_files, ingest_memories
from sessionmem_pipeline.stages.privacy import remove_excluded_sessions
from sessionmem_pipeline.stages.provider_batches import (
    WAITING,
    BatchedChat,
    BatchOutcome,
    batch_api_on,
    batch_backlog,
    batched_chat,
    chat_batch_api_on,
)
from sessionmem_pipeline.stages.registry import (
    CHUNK,
    COLLAPSE,
    EMBED,
    GLOBAL,
    INDEX,
    INGEST,
    INDEX_INPUTS,
    MEMORIES,
    SUMMARIZE,
    SUMMARIZE_NOW,
    THREADS,
    Stage,
    StageContext,
    fault_point,
)
from sessionmem_pipeline.stages.search_index import refresh_search_index
from sessionmem_pipeline.stages import staging
from sessionmem_pipeline.stages.summaries import (
    SessionResult,
    SummaryOutcome,
    due,
    embed_missing_summaries,
    pending,
    summarize_sessions,
)
from sessionmem_pipeline.stages.threads import refresh_threads
from sessionmem_pipeline.stages.transform import (
    chunk_session_rows,
    chunking_options,
    collapsed_rows,
    write_chunks,
    write_collapsed,
)
from sessionmem_pipeline.warehouse import Warehouse


@dataclass
class StageReport:
    """What the stages of one run (or one Dagster step) did: the counts `index` prints, `--json` returns, the
    runs table keeps and Dagster shows as metadata."""

    files_seen: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    formats: dict[str, dict[str, int]] = field(default_factory=dict)  # format -> files, sessions, new messages
    quarantined: list[dict[str, str]] = field(default_factory=list)
    source_problems: list[dict[str, str]] = field(default_factory=list)  # what the scan could not read
    excluded: list[dict[str, str]] = field(default_factory=list)  # files and sessions kept out by privacy rules, why
    excluded_removed: int = 0  # stored sessions removed because an exclusion now covers them
    sessions_changed: int = 0
    messages_written: int = 0
    sources_missing: int = 0
    collapsed: int = 0
    chunks: int = 0
    tokens: int = 0
    embedded: int = 0
    embeddings_cached: int = 0
    embedding_failures: int = 0
    embed_batch_submitted: int = 0  # texts sent to the provider's Batch API
    embed_batch_written: int = 0  # vectors a finished batch gave
    chunks_waiting: int = 0  # chunks whose vector a batch still owes
    summary_batch_submitted: int = 0  # summary requests sent to the provider's Batch API
    summary_batch_answers: int = 0  # answers a finished batch gave
    summaries_waiting: int = 0  # sessions whose summary waits for a batch
    summaries_written: int = 0
    memories: int = 0
    memories_embedded: int = 0
    threads: int | None = None  # threads rebuilt (None when nothing changed)
    indexed: bool = False
    warnings: list[str] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)  # typed (core/errors.py): type, message, recoverable
    stage_seconds: dict[str, float] = field(default_factory=dict)
    per_session: dict[str, dict[str, int]] = field(default_factory=dict)  # session -> counts (Dagster metadata)
    per_file: dict[str, dict[str, object]] = field(default_factory=dict)  # partition key -> ingest decision
    computed_in_commit: dict[str, int] = field(default_factory=dict)  # stage -> results no staging file held

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Adds the time spent in the block to `stage_seconds[stage]`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + time.perf_counter() - started

    def count(self, session_id: str, name: str, value: int = 1) -> None:
        counts = self.per_session.setdefault(session_id, {})
        counts[name] = counts.get(name, 0) + value

    def add_settled(self, fmt: str | None, files: int, sessions: int, partition_keys: Sequence[str]) -> None:
        """Files of one format settled unchanged from the walk's stat (pipeline._changed_since_walk), counted as
        `add_ingest` counts an unchanged file; a row per file only for the `partition_keys` given (a Dagster step
        names each of its partitions)."""
        self.decisions[changes.UNCHANGED] = self.decisions.get(changes.UNCHANGED, 0) + files
        for key in partition_keys:
            self.per_file[key] = {"decision": changes.UNCHANGED, "format": fmt or "", "messages_written": 0}
        if fmt:
            found = self.formats.setdefault(fmt, {"files": 0, "sessions": 0, "messages": 0})
            found["files"] += files
            found["sessions"] += sessions

    def add_ingest(self, outcome: IngestOutcome) -> None:
        decision = "quarantined" if outcome.quarantine_reason else outcome.decision
        self.decisions[decision] = self.decisions.get(decision, 0) + 1
        self.messages_written += outcome.messages_written
        self.sessions_changed += len(outcome.changed_session_ids)
        self.per_file[outcome.partition_key] = {
            "decision": decision,
            "format": outcome.format or "",
            "messages_written": outcome.messages_written,
        }
        if outcome.format and not outcome.quarantine_reason:
            found = self.formats.setdefault(outcome.format, {"files": 0, "sessions": 0, "messages": 0})
            found["files"] += 1
            found["sessions"] += len(outcome.session_ids)
            found["messages"] += outcome.messages_written
        self.warnings += outcome.warnings
        self.excluded += [{"session_id": sid, "reason": reason} for sid, reason in outcome.excluded]
        self.excluded_removed += outcome.excluded_removed
        self.errors += [SessionMemoryError(ErrorType.PARSE_ERROR, w).as_dict() for w in outcome.warnings]
        if outcome.quarantine_reason:
            self.quarantined.append({"path": outcome.path, "reason": outcome.quarantine_reason})
            message = f"{outcome.path}: quarantined: {outcome.quarantine_reason}"
            self.errors.append(SessionMemoryError(ErrorType.VALIDATION_ERROR, message).as_dict())


def _counter(ctx: StageContext, stage: str, total: int) -> Callable[[int], None]:
    """A progress callback taking batch sizes, reporting running totals."""
    done = 0

    def advance(count: int) -> None:
        nonlocal done
        done += count
        ctx.progress(stage, done, total)

    return advance


# ---- per-session stages --------------------------------------------------------------------------------------


def ingest(ctx: StageContext, scan: Discovery, report: StageReport, *, full: bool = False) -> None:
    """Each scanned file as its change decision says (new, grown, rewritten, unchanged); files stored under another
    ingest key are read again, each taking the parse a compute step staged for exactly the bytes it reads
    (stages/ingest_staging.py). What the scan could not read is recorded, and stored sessions that an exclusion
    added since now covers are forgotten (the privacy rules applied to what is already stored)."""
    record_source_problems(ctx.wh, scan)
    report.source_problems += [asdict(p) for p in scan.problems]
    report.excluded += [{"path": path, "reason": str(why)} for path, why in scan.excluded]
    report.files_seen += len(scan.files)
    pending = _changed_since_walk(ctx, scan.files, report, full=full)
    stored = ctx.wh.source_states([source.path for source in pending])
    parses = read_parses(ctx.settings, ctx.keys[INGEST.name])

    def ingest_one(source: SourceFile) -> IngestOutcome:
        found = stored.get(source.path, (None, None))
        outcome = ingest_file(ctx, source, full=full, stored=found, staged=parses.take)
        if source is pending[0]:  # raised in the batch, it is raised again once the file has committed alone
            fault_point("ingest", "in")
        return outcome

    settled_count = len(scan.files) - len(pending)
    for start in range(0, len(pending), INGEST_BATCH):
        batch = pending[start : start + INGEST_BATCH]
        for outcome in _ingest_batch(ctx.wh, batch, ingest_one, parses):
            report.add_ingest(outcome)
        ctx.progress("ingest", settled_count + start + len(batch), len(scan.files))
    report.computed_in_commit[INGEST.name] = report.computed_in_commit.get(INGEST.name, 0) + parses.parsed_here
    parses.remove_consumed(ctx.partition_keys)
    removed = remove_excluded_sessions(ctx.wh, ctx.settings)
    report.excluded_removed += len(removed)
    report.excluded += [{"session_id": sid, "reason": reason} for sid, reason in removed]


def _changed_since_walk(
    ctx: StageContext, files: Sequence[SourceFile], report: StageReport, *, full: bool
) -> list[SourceFile]:
    """The files whose stat at the walk differs from their indexed state under the ingest key (all of them when
    `full`), for the per-file ingest; the others are unchanged, settled without a read, a transaction or a row
    of their own handed back (most files of a long history, on every run: cost that follows the change). A change
    after the walk is the next run's, as one after the ingest is."""
    if full:
        return list(files)
    walked = [(source.path, source.partition_key, source.stat.size, source.stat.mtime_ns) for source in files]
    changed, settled = ctx.wh.settled_sources(walked, ctx.keys[INGEST.name])
    for fmt, count, sessions, keys in settled:
        report.add_settled(fmt, count, sessions, keys if ctx.partition_keys is not None else ())
    return [source for source in files if source.path in changed]


INGEST_BATCH = 100
"""Source files whose ingest commits in one transaction (one commit and one generation bump for all of them)."""


def _ingest_batch(
    wh: Warehouse,
    batch: Sequence[SourceFile],
    ingest_one: Callable[[SourceFile], IngestOutcome],
    parses: StagedParses,
) -> list[IngestOutcome]:
    """The files of a batch in one transaction; if it fails, each file again in its own, so one file's failure
    loses the others nothing (and raises as it would alone)."""
    parsed_here = parses.parsed_here
    try:
        with wh.transaction():
            return [ingest_one(source) for source in batch]
    except Exception:  # noqa: BLE001  rolled back whole: file by file, the failing one raises
        parses.parsed_here = parsed_here
        return [ingest_one(source) for source in batch]


def mark_missing_sources(
    ctx: StageContext, roots: Sequence[Path] | None, report: StageReport, scan: Discovery | None = None
) -> None:
    """Indexed files (under the given roots, or the given partitions' files) that are gone: their sessions stay,
    marked source-missing. Quarantine records of vanished files are dropped. Files the `scan` just found are
    there: only the others are looked at again."""
    prefixes = tuple(str(Path(r).resolve()) + os.sep for r in roots) if roots is not None else None
    keys = set(ctx.partition_keys) if ctx.partition_keys is not None else None
    for row in ctx.wh.stored_files_besides([source.path for source in scan.files] if scan is not None else []):
        if prefixes is not None and not row["path"].startswith(prefixes):
            continue
        if keys is not None and row["partition_key"] not in keys:
            continue
        if file_stat(row["path"]) is None:
            mark_missing(ctx.wh, row["path"])
            report.sources_missing += 1
    for path in ctx.wh.quarantined_paths():  # never indexed, so not in source_files
        if (prefixes is None or path.startswith(prefixes)) and file_stat(path) is None:
            mark_missing(ctx.wh, path)


COMMIT_BATCH = 100
"""Sessions whose results are written, with their stage state, in one transaction."""


def _commit(
    ctx: StageContext,
    stage: Stage,
    work: dict[str, str],
    report: StageReport,
    compute: Callable[[str], dict[str, Any] | None],
    write: Callable[[dict[str, dict[str, Any]]], None],
) -> dict[str, dict[str, Any]]:
    """A session stage's commit: each stale session's result from a staging file when a compute step built one
    from the same input (stages/staging.py), else `compute`d here (None: nothing to build yet); written with the
    stage state, one transaction per batch. Staging files of the run's scope are removed afterwards."""
    staged = staging.read_results(ctx.settings, stage, ctx.keys[stage.name])
    sessions = list(work)
    committed: dict[str, dict[str, Any]] = {}
    computed_here = report.computed_in_commit.setdefault(stage.name, 0)
    for start in range(0, len(sessions), COMMIT_BATCH):
        results = {}
        for session_id in sessions[start : start + COMMIT_BATCH]:
            result = staged.result(session_id, work[session_id])
            if result is None:
                computed_here += 1
                result = compute(session_id)
            if result is not None:
                results[session_id] = result
        with ctx.wh.transaction():
            write(results)
            ctx.record(stage, {session_id: work[session_id] for session_id in results})
        fault_point(stage.name, "in")
        committed.update(results)
    report.computed_in_commit[stage.name] = computed_here
    staged.remove_consumed(ctx.scope)
    return committed


def collapse(ctx: StageContext, report: StageReport) -> None:
    work = ctx.stale(COLLAPSE)

    def compute(session_id: str) -> dict[str, Any]:
        return {"rows": collapsed_rows(ctx.wh.load_messages(session_id))}

    def write(results: dict[str, dict[str, Any]]) -> None:
        write_collapsed(ctx.wh, {session_id: result["rows"] for session_id, result in results.items()})

    report.collapsed += len(_commit(ctx, COLLAPSE, work, report, compute, write))


def chunk(ctx: StageContext, report: StageReport) -> None:
    work = ctx.stale(CHUNK)
    if not work:
        return
    options = chunking_options(ctx.settings, ctx.providers.embedder, ctx.providers.llm)

    def compute(session_id: str) -> dict[str, Any] | None:
        session = ctx.wh.session_row(session_id)
        if session is None:
            return None
        return chunk_session_rows(ctx.wh, session, ctx.wh.load_collapsed(session_id), **options)

    def write(results: dict[str, dict[str, Any]]) -> None:
        outcome = write_chunks(ctx.wh, results, ctx.now)
        report.chunks += outcome.chunks
        report.tokens += outcome.tokens
        report.warnings += outcome.warnings

    for session_id, result in _commit(ctx, CHUNK, work, report, compute, write).items():
        report.count(session_id, "chunks", len(result["rows"]))
        report.count(session_id, "tokens", sum(row["token_count"] for row in result["rows"]))


def embed(ctx: StageContext, report: StageReport) -> None:
    """Vectors for the chunks of stale sessions (those a compute step staged are taken from its files); a session
    is recorded once every chunk has one (failures stay stale and are retried by the next run). Open batches of
    the provider's Batch API are polled even when nothing is stale."""
    work = ctx.stale(EMBED)
    leave = _batch_api(ctx, report)
    if not work:
        if leave is not None:
            leave([])
        return
    sessions = list(work)
    staged = staging.read_vectors(ctx.settings, ctx.providers.embedder.model_id)
    embedder = staging.StagedEmbedder(ctx.providers.embedder, staged)
    total = len(ctx.wh.chunks_without_embedding(sessions)) if ctx.wh.get_meta("embedding_model") else 0
    outcome = embed_sessions(ctx.wh, sessions, embedder, progress=_counter(ctx, "embed", total), leave=leave)
    report.embedded += outcome.embedded
    report.embeddings_cached += outcome.cached
    report.embedding_failures += outcome.failed
    report.computed_in_commit[EMBED.name] = report.computed_in_commit.get(EMBED.name, 0) + embedder.computed_here
    incomplete = {row["session_id"] for row in ctx.wh.chunks_without_embedding(sessions)}
    with ctx.wh.transaction():
        ctx.record(EMBED, {s: fp for s, fp in work.items() if s not in incomplete})
    fault_point("embed", "in")
    staged.remove_consumed(ctx.scope)
    if outcome.failed:
        message = f"{outcome.failed} chunks could not be embedded; they are retried on the next run"
        report.errors.append(SessionMemoryError(ErrorType.EMBEDDING_FAILED, message).as_dict())


def _talks_to_batches(ctx: StageContext, stage: Stage, on: bool, remote: bool) -> bool:
    """Whether a stage with a remote model uses the Batch API this run: it is on, or batches it sent are open."""
    return remote and (on or bool(ctx.wh.provider_batches_in(stage.name, WAITING)))


def _batch_api(ctx: StageContext, report: StageReport) -> Callable[[list[dict]], set[str]] | None:
    """With a remote embedder: what the embed step leaves to the provider's Batch API (polled, and sent the
    backlog, first). Switched off, batches still open are polled to their end, and nothing is left to them."""
    on = batch_api_on(ctx.settings)
    if not _talks_to_batches(ctx, EMBED, on, ctx.settings.remote_embeddings):
        return None
    if not isinstance(real := ctx.providers.embedder, OpenAIEmbedder):
        return None
    min_backlog = ctx.settings["embedding.batch_min_backlog"] if on else None

    def leave(pending: list[dict]) -> set[str]:
        outcome = batch_backlog(ctx.wh, pending, real, min_backlog, ctx.now)
        report.embed_batch_submitted += outcome.submitted
        report.embed_batch_written += outcome.written
        report.chunks_waiting += len({row["chunk_id"] for row in pending if row["context_hash"] in outcome.waiting})
        report.warnings += outcome.errors
        return outcome.waiting

    return leave


def summarize(ctx: StageContext, report: StageReport) -> None:
    """Stale sessions that are due (idle, or enough new messages), or all stale ones when a person asked
    (`SUMMARIZE_NOW`) or the summarizer itself changed (its key). Summaries stored without a vector (the
    provider failed) are embedded first: they are recorded as built, so no stale state would bring them back."""
    if not ctx.settings["summaries.enabled"]:
        return
    embed_missing_summaries(ctx.wh, ctx.providers.embedder)
    batches = _batched_chat(ctx)  # open batches are polled even when nothing is stale
    _summarize_stale(ctx, report, batches[0] if batches else None)
    if batches is not None:
        report.summary_batch_submitted += batches[1].submitted
        report.summary_batch_answers += batches[1].written
        report.warnings += batches[1].errors


def _summarize_stale(ctx: StageContext, report: StageReport, chat: BatchedChat | None) -> None:
    work = ctx.stale(SUMMARIZE)
    if not work:
        return
    if ctx.summarize != SUMMARIZE_NOW:
        rows = pending(ctx.wh.conn, list(work))
        ready = due(
            rows,
            now=ctx.now,
            idle_minutes=ctx.settings["summaries.idle_minutes"],
            message_threshold=ctx.settings["summaries.message_threshold"],
        )
        settled = {r["session_id"] for r in rows if r["unsummarized"] == 0}  # no new version, just recorded
        recorded = ctx.wh.stage_inputs(SUMMARIZE.name, list(work))
        changed_key = {s for s, (_, key) in recorded.items() if key != ctx.keys[SUMMARIZE.name]}
        chosen = {r["session_id"] for r in ready} | settled | changed_key
        work = {s: fp for s, fp in work.items() if s in chosen}
    if not work:
        return
    files = staging.read_results(ctx.settings, SUMMARIZE, ctx.keys[SUMMARIZE.name])
    staged = {s: SessionResult.from_row(found) for s, fp in work.items() if (found := files.result(s, fp)) is not None}
    computed_here = report.computed_in_commit.get(SUMMARIZE.name, 0) + len(work) - len(staged)
    report.computed_in_commit[SUMMARIZE.name] = computed_here

    def summarize_now(sessions: list[str], llm: Any) -> SummaryOutcome:
        return summarize_sessions(ctx.wh, sessions, llm=llm, embedder=ctx.providers.embedder, now=ctx.now, staged=staged)

    if chat is None:
        outcome = summarize_now(list(work), ctx.providers.llm)
    else:
        outcome = _summarize_through_batches(ctx, chat, list(work), summarize_now)
    with ctx.wh.transaction():
        ctx.record(SUMMARIZE, {s: work[s] for s in outcome.handled})
        if chat is not None:
            ctx.wh.clear_batch_answers(sorted(chat.used))  # the summaries hold what they said
    fault_point("summarize", "in")
    files.remove_consumed(ctx.scope)
    report.summaries_written += outcome.versions_written
    report.warnings += outcome.llm_fallbacks
    report.summaries_waiting += len(outcome.deferred)


def _batched_chat(ctx: StageContext) -> tuple[BatchedChat, BatchOutcome] | None:
    """With `llm.batch_api` and a remote chat model: its summarize batches polled, and a model answering from
    them (stages/provider_batches.py). Switched off, batches still open are polled to their end, and no
    summary waits for them."""
    on = chat_batch_api_on(ctx.settings)
    if not _talks_to_batches(ctx, SUMMARIZE, on, ctx.settings.llm_enabled):
        return None
    if not isinstance(llm := ctx.providers.llm, OpenAIChatModel):
        return None
    outcome = BatchOutcome()
    return batched_chat(ctx.wh, llm, outcome, ctx.now, wait=on), outcome


def _summarize_through_batches(
    ctx: StageContext,
    chat: BatchedChat,
    sessions: list[str],
    summarize_now: Callable[[list[str], Any], SummaryOutcome],
) -> SummaryOutcome:
    """Summaries whose requests a batch answered are written; the others' requests are sent as a batch when there
    are at least `llm.batch_min_backlog` (those sessions wait), else (or when the provider refused the batch) those
    sessions are summarized plainly."""
    outcome = summarize_now(sessions, chat)
    if len(chat.asked) >= max(ctx.settings["llm.batch_min_backlog"], 1):
        chat.send()
    if chat.unsent():
        chat.collecting = False
        again = summarize_now(outcome.deferred, chat)
        outcome.deferred = again.deferred
        outcome.handled += again.handled
        outcome.versions_written += again.versions_written
        outcome.unchanged += again.unchanged
        outcome.messages_read += again.messages_read
        outcome.llm_fallbacks += again.llm_fallbacks
    return outcome


# ---- stages over everything ------------------------------------------------------------------------------------


THREAD_INPUTS_TABLE = "thread_inputs"
"""The threads stage's recorded input: each session's input is kept per session in that table (stages/threads.py),
written with the threads, and compared with the sessions' inputs now by every run."""


def threads(ctx: StageContext, report: StageReport) -> None:
    """Threads of the sessions whose inputs (start, latest summary, project) changed since the stored threads were
    built, and of those linked with them (stages/threads.py); a run in which none changed writes nothing."""
    report.threads = refresh_threads(ctx.wh, ctx.keys[THREADS.name])
    if report.threads is None:
        return
    with ctx.wh.transaction():
        ctx.record(THREADS, {GLOBAL: THREAD_INPUTS_TABLE})


def memories(ctx: StageContext, roots: Sequence[Path], report: StageReport) -> None:
    files = find_memory_files(roots, ctx.wh.path)
    stats = "|".join(f"{p}:{s.size}:{s.mtime_ns}" for p in files if (s := file_stat(p)) is not None)
    input_fp = hashlib.md5(stats.encode()).hexdigest()
    unembedded = ctx.wh.scalar("SELECT count(*) FROM memories WHERE embedding IS NULL")  # the provider failed
    if not ctx.global_is_stale(MEMORIES, input_fp) and not unembedded:
        return
    outcome = ingest_memories(ctx.wh, roots, ctx.providers.embedder)
    with ctx.wh.transaction():
        ctx.record(MEMORIES, {GLOBAL: input_fp})
    report.memories, report.memories_embedded = outcome.memories, outcome.embedded
    report.warnings += outcome.warnings


def index(ctx: StageContext, report: StageReport) -> None:
    input_fp = ctx.global_input(INDEX_INPUTS, RECAPS_MADE_BY)  # a new recap version makes the hook's recaps again
    if not ctx.global_is_stale(INDEX, input_fp):
        return
    refresh_search_index(ctx.wh)
    with ctx.wh.transaction():
        refresh_recaps(ctx.wh)
        ctx.record(INDEX, {GLOBAL: input_fp})
    report.indexed = True


SESSION_STEPS: dict[str, Callable[[StageContext, StageReport], None]] = {
    COLLAPSE.name: collapse,
    CHUNK.name: chunk,
    EMBED.name: embed,
    SUMMARIZE.name: summarize,
}


def run_all(
    ctx: StageContext,
    scan: Discovery,
    roots: Sequence[Path] | None,
    report: StageReport,
    *,
    full: bool = False,
) -> None:
    """Every stage in order, each selecting its own work from the stage state."""
    with report.timed("ingest"):
        ingest(ctx, scan, report, full=full)
        mark_missing_sources(ctx, roots, report, scan)
    fault_point("ingest", "after")
    for name, step in SESSION_STEPS.items():
        with report.timed(name):
            step(ctx, report)
        fault_point(name, "after")
    with report.timed("threads"):
        threads(ctx, report)
    fault_point("threads", "after")
    if roots is not None:
        with report.timed("memories"):
            memories(ctx, roots, report)
        fault_point("memories", "after")
    with report.timed("index"):
        index(ctx, report)
    fault_point("index", "after")
