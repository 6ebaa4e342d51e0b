"""Transform: canonical messages -> collapsed, redacted narrative (`collapsed_messages`) -> exchange chunks with
topics, flags and the contextual prefix (`session_chunks`).

Both steps are cheap and pure, so a changed session is collapsed and chunked whole; chunks are append-stable
(core/chunk.py), so only new chunks get a new context hash and reach the embedder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from datetime import UTC, datetime

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core.chunk import DEFAULT_MAX_CHUNKS, EmbedderWindow, chunk_session
from sessionmem_pipeline.core.collapse import collapse_messages
from sessionmem_pipeline.core.context import SessionContext, context_line, contextual_prefix, first_request
from sessionmem_pipeline.core.llm_protocol import ChatModel, LLMError
from sessionmem_pipeline.core.models import content_hash
from sessionmem_pipeline.core.topics import keyword_topics_for_chunks, llm_topics, session_topics
from sessionmem_pipeline.providers import Embedder
from sessionmem_pipeline.stages.embed import chunk_limits
from sessionmem_pipeline.warehouse import Warehouse, collapsed_row


@dataclass
class TransformOutcome:
    sessions: int = 0
    messages: int = 0
    tool_calls: int = 0
    chunks: int = 0
    tokens: int = 0
    dropped_messages: int = 0
    llm_calls: int = 0
    warnings: list[str] = field(default_factory=list)


Written = Callable[[str], None]
"""Called inside the transaction that wrote a session's output, so its stage state commits with it."""


def collapse_sessions(wh: Warehouse, session_ids: Sequence[str], *, on_written: Written | None = None) -> TransformOutcome:
    """Collapse tool calls into narrative lines, one transaction per session."""
    outcome = TransformOutcome()
    for session_id in session_ids:
        collapsed = collapse_messages(wh.load_messages(session_id))
        with wh.transaction():
            wh.replace("collapsed_messages", "session_id", [session_id], [collapsed_row(m) for m in collapsed])
            if on_written:
                on_written(session_id)
        outcome.sessions += 1
        outcome.messages += len(collapsed)
        outcome.tool_calls += sum(len(m.tools) for m in collapsed)
    return outcome


def chunking_options(settings: Settings, embedder: Embedder, llm: ChatModel | None) -> dict[str, Any]:
    """`chunk_sessions` keyword arguments from the configuration and the embedder's window."""
    max_tokens, window = chunk_limits(embedder, settings["chunking.max_tokens"])
    return {
        "max_tokens": max_tokens,
        "timezone": settings.timezone,
        "window": window,
        "max_chunks": settings["chunking.max_chunks"],
        "llm": llm,
    }


def chunk_topics(
    wh: Warehouse, texts: Sequence[str], speakers: set[str], llm: ChatModel | None
) -> tuple[list[list[str]], int]:
    """Tags per chunk: from the chat model when one is configured (cached by content hash, so re-indexing never
    asks twice; a failed answer falls back to keywords), else keywords. Also how many model calls were made."""
    keywords = keyword_topics_for_chunks(texts, exclude=speakers)
    if llm is None:
        return keywords, 0
    hashes = [content_hash(t) for t in texts]
    cached = wh.cached_topics(llm.model, hashes)
    tags, fresh, calls = [], [], 0
    for text, digest, fallback in zip(texts, hashes, keywords, strict=True):
        if digest not in cached:
            calls += 1
            try:
                cached[digest] = llm_topics(text, llm)
                fresh.append({"model": llm.model, "content_hash": digest, "topics": cached[digest]})
            except LLMError:
                cached[digest] = fallback
        tags.append(cached[digest])
    with wh.transaction():
        wh.insert("topic_cache", [{**row, "created_at": datetime.now(UTC)} for row in fresh])
    return tags, calls


def chunk_sessions(
    wh: Warehouse,
    session_ids: Sequence[str],
    *,
    max_tokens: int,
    timezone: str,
    window: EmbedderWindow | None = None,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    llm: ChatModel | None = None,
    on_written: Written | None = None,
) -> TransformOutcome:
    """Chunk each session, tag topics, set flags and build the contextual prefix; one transaction per session."""
    outcome = TransformOutcome()
    for session_id in session_ids:
        session = wh.session_row(session_id)
        if session is None:
            continue
        collapsed = wh.load_collapsed(session_id)
        result = chunk_session(collapsed, max_tokens=max_tokens, window=window, max_chunks=max_chunks)
        speakers = {m.speaker for m in collapsed}
        topics, calls = chunk_topics(wh, [c.content for c in result.chunks], speakers, llm)
        outcome.llm_calls += calls
        context = SessionContext(session["project"] or "", session["started_at"], first_request(collapsed), timezone)
        rows = []
        for chunk, tags in zip(result.chunks, topics, strict=True):
            prefix = contextual_prefix(context, chunk.speakers, tags, chunk.ts_start)
            context_content = f"{prefix}\n\n{chunk.content}"
            rows.append(
                {
                    "chunk_id": chunk.chunk_id,
                    "session_id": session_id,
                    "project": session["project"],
                    "chunk_index": chunk.chunk_index,
                    "message_ids": list(chunk.message_ids),
                    "ts_start": chunk.ts_start,
                    "ts_end": chunk.ts_end,
                    "speakers": list(chunk.speakers),
                    "roles": list(chunk.roles),
                    "topics": tags,
                    "has_decision": chunk.has_decision,
                    "has_action": chunk.has_action,
                    "continued": chunk.continued,
                    "token_count": chunk.token_count,
                    "content": chunk.content,
                    "context": context_line(context, chunk.ts_start),
                    "context_content": context_content,
                    "content_hash": chunk.content_hash,
                    "context_hash": content_hash(context_content),
                }
            )
        with wh.transaction():
            wh.replace("chunks", "session_id", [session_id], rows)
            wh.replace(
                "dropped_messages",
                "session_id",
                [session_id],
                [{"session_id": session_id, "message_id": m, "reason": r} for m, r in result.dropped.items()],
            )
            wh.conn.execute(
                "UPDATE sessions SET topics = ? WHERE session_id = ?", [session_topics(topics), session_id]
            )
            wh.sync_keyword_index("chunks", [session_id])
            if on_written:
                on_written(session_id)
        outcome.sessions += 1
        outcome.chunks += len(rows)
        outcome.tokens += sum(r["token_count"] for r in rows)
        outcome.dropped_messages += len(result.dropped)
        outcome.warnings += [f"{session_id}: {w}" for w in result.warnings]
    return outcome
