"""Summaries: versioned, incremental session summaries (`session_summaries`) with their embeddings.

A new version is written only when the input changed (new messages, or `full` with a different result); the
`sessions` row points at the latest. A summary the embedding provider could not embed is written without its
vector and embedded by a later run. Which sessions are due (idle, or enough new messages) is decided from the
warehouse by `due_sessions`, and by `summary_due_sensor` from the published snapshot with the same SQL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import duckdb

from sessionmem_pipeline.core.llm_protocol import AnswerDeferred, ChatModel
from sessionmem_pipeline.core.models import CollapsedMessage
from sessionmem_pipeline.core.summarize import (
    EXTRACTIVE_MODEL,
    SessionSummary,
    messages_after,
    summarize_with_fallback,
    summary_input_hash,
    summary_is_due,
)
from sessionmem_pipeline.providers import Embedder
from sessionmem_pipeline.warehouse import Warehouse

WRITE_BATCH = 50  # summaries embedded and committed together

PENDING_SQL = """
    SELECT s.session_id, s.partition_key, s.ended_at, s.summary_version,
           (SELECT count(*) FROM collapsed_messages m WHERE m.session_id = s.session_id AND {messages} AND m.seq > coalesce(
               (SELECT max(m2.seq) FROM collapsed_messages m2 JOIN session_summaries v
                    ON v.session_id = m2.session_id AND v.last_message_id = m2.message_id
                WHERE v.session_id = s.session_id AND {earlier} AND v.version = s.summary_version), -1)) AS unsummarized
    FROM sessions s WHERE {sessions}
"""
"""Per session (of those the scope conditions on `m.session_id`, `m2.session_id` and `s.session_id` keep): its
latest message time and how many collapsed messages its latest summary does not cover. The scope is repeated
inside the subqueries: DuckDB joins them over every collapsed message otherwise."""


@dataclass
class SummaryOutcome:
    versions_written: int = 0
    unchanged: int = 0
    llm_fallbacks: list[str] = field(default_factory=list)
    messages_read: int = 0
    handled: list[str] = field(default_factory=list)  # sessions whose summary is now up to date
    deferred: list[str] = field(default_factory=list)  # sessions waiting for the model's answer (a provider batch)


def pending(conn: duckdb.DuckDBPyConnection, session_ids: Sequence[str] | None = None) -> list[dict]:
    """Rows of PENDING_SQL, for these sessions only when given."""
    if session_ids is None:
        cursor = conn.execute(PENDING_SQL.format(messages="TRUE", earlier="TRUE", sessions="TRUE"))
    else:
        scope = {alias: f"{column}.session_id IN (SELECT unnest($ids))"
                 for alias, column in (("messages", "m"), ("earlier", "m2"), ("sessions", "s"))}
        cursor = conn.execute(PENDING_SQL.format(**scope), {"ids": list(session_ids)})
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def due(rows: Sequence[dict], *, now: datetime, idle_minutes: int, message_threshold: int) -> list[dict]:
    """The rows whose session has unsummarized messages and is idle, or has reached the threshold."""
    return [
        row
        for row in rows
        if row["unsummarized"] > 0
        and summary_is_due(
            last_message_at=row["ended_at"],
            now=now,
            new_messages_since_summary=row["unsummarized"],
            idle_minutes=idle_minutes,
            message_threshold=message_threshold,
        )
    ]


def latest_summary(wh: Warehouse, session_id: str) -> tuple[int, SessionSummary] | None:
    rows = wh.query(
        "SELECT version, summary FROM session_summaries WHERE session_id = ? ORDER BY version DESC LIMIT 1",
        [session_id],
    )
    if not rows:
        return None
    return rows[0]["version"], SessionSummary.from_dict(json.loads(rows[0]["summary"]))


@dataclass
class SessionResult:
    """The summarize stage's compute for one session: a new summary (None: nothing to summarize, or the same
    input as the latest), the latest version's input hash it was built on, and its vector once embedded."""

    base_hash: str | None
    summary: SessionSummary | None = None
    unchanged: bool = False
    error: str | None = None
    messages_read: int = 0
    vector: list[float] | None = None

    def to_row(self) -> dict[str, Any]:
        return {**vars(self), "summary": json.dumps(self.summary.to_dict()) if self.summary else None}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SessionResult:
        summary = SessionSummary.from_dict(json.loads(row["summary"])) if row["summary"] else None
        fields = ("base_hash", "unchanged", "error", "messages_read", "vector")
        return cls(**{name: row[name] for name in fields}, summary=summary)


def summarize_session(
    messages: Sequence[CollapsedMessage], latest: SessionSummary | None, llm: ChatModel | None, *, full: bool = False
) -> SessionResult:
    """Summarize one session's collapsed messages, incrementally on `latest` unless `full`."""
    result = SessionResult(base_hash=latest.input_hash if latest else None)
    model = llm.model if llm else EXTRACTIVE_MODEL
    if not messages:  # nothing to summarize (every message was dropped)
        return result
    if latest and not full and not messages_after(messages, latest):
        result.unchanged = True
        return result
    if full and latest and summary_input_hash(messages, None, model) == latest.input_hash:
        result.unchanged = True
        return result
    base = None if full else latest
    result.messages_read = len(messages_after(messages, base)) if base else len(messages)
    summary, result.error = summarize_with_fallback(messages, previous=base, llm=llm)
    if latest and summary.input_hash == latest.input_hash:
        result.unchanged = True
    else:
        result.summary = summary
    return result


def embed_results(results: Sequence[SessionResult], embedder: Embedder | None) -> None:
    """Vectors for the new summaries that have none yet (one embedding call; a failure leaves None)."""
    waiting = [r for r in results if r.summary is not None and r.vector is None]
    vectors = _vectors_or_none(embedder, [r.summary.text_for_embedding() for r in waiting])
    for result, vector in zip(waiting, vectors, strict=True):
        result.vector = None if vector is None else [float(x) for x in vector]


def summarize_sessions(
    wh: Warehouse,
    session_ids: Sequence[str],
    *,
    llm: ChatModel | None,
    embedder: Embedder | None,
    full: bool = False,
    now: datetime | None = None,
    staged: Mapping[str, SessionResult] | None = None,
) -> SummaryOutcome:
    """Summarize each session (incrementally unless `full`), writing a version only when the input changed. A
    result `staged` by a compute step is used when it was built on the same latest version. A session the model
    answers later (AnswerDeferred: a provider batch) is left out, `deferred`."""
    outcome = SummaryOutcome()
    written: list[tuple[str, int, SessionResult]] = []
    for session_id in session_ids:
        latest = latest_summary(wh, session_id)
        version, previous = latest if latest else (wh.summary_versions_used([session_id]).get(session_id, 0), None)
        result = (staged or {}).get(session_id)
        if full or result is None or result.base_hash != (previous.input_hash if previous else None):
            try:
                result = summarize_session(wh.load_collapsed(session_id), previous, llm, full=full)
            except AnswerDeferred:
                outcome.deferred.append(session_id)
                continue
        outcome.handled.append(session_id)
        outcome.unchanged += result.unchanged
        outcome.messages_read += result.messages_read
        if result.error is not None:
            outcome.llm_fallbacks.append(f"{session_id}: {result.error}")
        if result.summary is None:
            continue
        written.append((session_id, version + 1, result))
        if len(written) >= WRITE_BATCH:
            _write_versions(wh, written, embedder, now or datetime.now(UTC))
            outcome.versions_written += len(written)
            written = []
    _write_versions(wh, written, embedder, now or datetime.now(UTC))
    outcome.versions_written += len(written)
    return outcome


def _write_versions(
    wh: Warehouse, versions: list[tuple[str, int, SessionResult]], embedder: Embedder | None, now: datetime
) -> None:
    """New summary versions with their embeddings (one embedding call for those not staged with one), in one
    transaction."""
    if not versions:
        return
    embed_results([result for _, _, result in versions], embedder)
    with wh.transaction():
        for session_id, version, result in versions:
            text = result.summary.text_for_embedding()
            _insert_version(wh, session_id, version, result.summary, text, result.vector, now)
        wh.sync_keyword_index("summaries", [session_id for session_id, _, _ in versions])


def _insert_version(
    wh: Warehouse, session_id: str, version: int, summary: SessionSummary, text: str, vector, now: datetime
) -> None:
    vector = [float(x) for x in vector] if vector is not None else None
    wh.insert(
        "session_summaries",
        [
            {
                "summary_id": f"{session_id}@{version}",
                "session_id": session_id,
                "version": version,
                "created_at": now,
                "model": summary.model,
                "input_hash": summary.input_hash,
                "is_incremental": summary.is_incremental,
                "parts": summary.parts,
                "first_message_id": summary.first_message_id,
                "last_message_id": summary.last_message_id,
                "message_count": summary.message_count,
                "token_count": summary.token_count,
                "overview": summary.overview,
                "topics": list(summary.topics),
                "summary": json.dumps(summary.to_dict(), ensure_ascii=False),
                "search_text": text,
                "embedding": vector,
            }
        ],
    )
    wh.conn.execute(
        "UPDATE sessions SET summary_version = $v, summary_versions_used = $v, summary_overview = $o WHERE session_id = $s",
        {"v": version, "o": summary.overview, "s": session_id},
    )


def embed_missing_summaries(wh: Warehouse, embedder: Embedder) -> int:
    """Vectors for latest summaries that have none (the provider failed on them, or `reembed` cleared them for a
    new model); the summarize stage calls it every run, so they are embedded once the provider answers."""
    rows = wh.query(
        """
        SELECT v.summary_id, v.search_text FROM session_summaries v JOIN sessions s
            ON s.session_id = v.session_id AND s.summary_version = v.version
        WHERE v.embedding IS NULL
        """
    )
    if not rows:
        return 0
    vectors = _vectors_or_none(embedder, [r["search_text"] for r in rows])
    embedded = [(row, vector) for row, vector in zip(rows, vectors, strict=True) if vector is not None]
    with wh.transaction():
        for row, vector in embedded:
            wh.conn.execute(
                "UPDATE session_summaries SET embedding = ? WHERE summary_id = ?",
                [[float(x) for x in vector], row["summary_id"]],
            )
        if embedded:
            wh.bump_generation()
    return len(embedded)


def _vectors_or_none(embedder: Embedder | None, texts: Sequence[str]) -> list:
    """A vector per text, None where the provider failed (or there is no embedder): summaries never wait on it."""
    if embedder is None or not texts:
        return [None] * len(texts)
    outcome = embedder.embed_with_failures(texts)
    return [outcome.vector(index) for index in range(len(texts))]
