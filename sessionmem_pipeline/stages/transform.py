"""Transform: canonical messages -> collapsed, redacted narrative (`collapsed_messages`) -> exchange chunks with
topics, flags and the contextual prefix (`session_chunks`).

Each step is a pure compute per session (`collapsed_rows`, `chunk_session_rows`: run by a compute step outside the
writer, or by the stage itself) and a write per batch of sessions. A changed session is collapsed and chunked
whole; chunks are append-stable (core/chunk.py), so only new chunks get a new context hash and reach the
embedder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core.chunk import DEFAULT_MAX_CHUNKS, EmbedderWindow, chunk_session
from sessionmem_pipeline.core.collapse import collapse_messages
from sessionmem_pipeline.core.context import SessionContext, context_line, contextual_prefix, first_request
from sessionmem_pipeline.core.llm_protocol import ChatModel, LLMError, requests_at_once
from sessionmem_pipeline.core.models import CollapsedMessage, Message, content_hash
from sessionmem_pipeline.core.topics import keyword_topics_for_chunks, llm_topics, session_topics
from sessionmem_pipeline.providers import Embedder
from sessionmem_pipeline.stages.embed import chunk_limits
from sessionmem_pipeline.warehouse import Snapshot, Warehouse, collapsed_row


@dataclass
class TransformOutcome:
    chunks: int = 0
    tokens: int = 0
    dropped_messages: int = 0
    warnings: list[str] = field(default_factory=list)


def collapsed_rows(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """A session's canonical messages as the rows of `collapsed_messages` (the collapse stage's compute)."""
    return [collapsed_row(m) for m in collapse_messages(messages)]


def write_collapsed(wh: Warehouse, results: Mapping[str, list[dict[str, Any]]]) -> None:
    """These sessions' collapsed rows in place of their old ones (call inside the batch's transaction)."""
    wh.replace("collapsed_messages", "session_id", list(results), [row for rows in results.values() for row in rows])


def chunking_options(settings: Settings, embedder: Embedder, llm: ChatModel | None) -> dict[str, Any]:
    """`chunk_session_rows` keyword arguments from the configuration and the embedder's window."""
    max_tokens, window = chunk_limits(embedder, settings["chunking.max_tokens"])
    return {
        "max_tokens": max_tokens,
        "timezone": settings.timezone,
        "window": window,
        "max_chunks": settings["chunking.max_chunks"],
        "llm": llm,
    }


def chunk_topics(
    cache: Warehouse | Snapshot, texts: Sequence[str], speakers: set[str], llm: ChatModel | None
) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """Tags per chunk: from the chat model when one is configured (cached by content hash in `cache`, the live
    warehouse or the snapshot, so re-indexing never asks twice; a failed answer falls back to keywords), else
    keywords. Also the new `topic_cache` rows (the model's answers) for the commit to store. The model is asked
    `llm.max_in_flight` chunks at a time."""
    keywords = keyword_topics_for_chunks(texts, exclude=speakers)
    if llm is None:
        return keywords, []
    hashes = [content_hash(t) for t in texts]
    cached = cache.cached_topics(llm.model, hashes)
    asked = {digest: text for text, digest in zip(texts, hashes, strict=True) if digest not in cached}

    def ask(text: str) -> list[str] | None:
        try:
            return llm_topics(text, llm)
        except LLMError:
            return None

    with ThreadPoolExecutor(min(requests_at_once(llm), max(1, len(asked))), thread_name_prefix="topics") as pool:
        answers = dict(zip(asked, pool.map(ask, asked.values()), strict=True))
    fresh = [{"model": llm.model, "content_hash": d, "topics": tags} for d, tags in answers.items() if tags is not None]
    cached.update({digest: tags for digest, tags in answers.items() if tags is not None})
    return [cached.get(digest, fallback) for digest, fallback in zip(hashes, keywords, strict=True)], fresh


def chunk_session_rows(
    cache: Warehouse | Snapshot,
    session: Mapping[str, Any],
    collapsed: Sequence[CollapsedMessage],
    *,
    max_tokens: int,
    timezone: str,
    window: EmbedderWindow | None = None,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    llm: ChatModel | None = None,
) -> dict[str, Any]:
    """The chunk stage's compute for one session (its `sessions` row and collapsed messages): chunk rows with
    topics, flags and the contextual prefix, dropped messages, the session's topics, new topic cache rows and
    warnings, everything the commit writes."""
    session_id = session["session_id"]
    result = chunk_session(collapsed, max_tokens=max_tokens, window=window, max_chunks=max_chunks)
    speakers = {m.speaker for m in collapsed}
    topics, fresh_topics = chunk_topics(cache, [c.content for c in result.chunks], speakers, llm)
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
    return {
        "rows": rows,
        "dropped": [{"session_id": session_id, "message_id": m, "reason": r} for m, r in result.dropped.items()],
        "session_topics": session_topics(topics),
        "fresh_topics": fresh_topics,
        "warnings": [f"{session_id}: {w}" for w in result.warnings],
    }


def write_chunks(wh: Warehouse, results: Mapping[str, Mapping[str, Any]], now: datetime) -> TransformOutcome:
    """These sessions' chunk stage results in place of their old ones (call inside the batch's transaction)."""
    sessions = list(results)
    wh.replace("chunks", "session_id", sessions, [row for r in results.values() for row in r["rows"]])
    wh.replace("dropped_messages", "session_id", sessions, [row for r in results.values() for row in r["dropped"]])
    fresh = {(row["model"], row["content_hash"]): row for r in results.values() for row in r["fresh_topics"]}
    known = wh.cached_topics(next(iter(fresh))[0], [digest for _, digest in fresh]) if fresh else {}
    wh.insert("topic_cache", [{**row, "created_at": now} for (_, digest), row in fresh.items() if digest not in known])
    wh.set_session_topics({session_id: result["session_topics"] for session_id, result in results.items()})
    wh.sync_keyword_index("chunks", sessions)
    outcome = TransformOutcome()
    for result in results.values():
        outcome.chunks += len(result["rows"])
        outcome.tokens += sum(row["token_count"] for row in result["rows"])
        outcome.dropped_messages += len(result["dropped"])
        outcome.warnings += result["warnings"]
    return outcome
