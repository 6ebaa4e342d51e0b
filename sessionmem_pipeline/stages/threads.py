"""Threads: related sessions linked across time (`session_threads`), rebuilt from the latest summaries."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sessionmem_pipeline.core.threads import ThreadInput, build_threads
from sessionmem_pipeline.warehouse import Warehouse


def refresh_threads(wh: Warehouse) -> int:
    """Rebuild every thread from the sessions' latest summaries; the number of threads."""
    rows = wh.query(
        """SELECT s.session_id, s.project, s.started_at, v.summary, v.embedding
           FROM sessions s JOIN session_summaries v ON v.session_id = s.session_id AND v.version = s.summary_version
           WHERE s.parent_session_id IS NULL"""
    )
    inputs = []
    for row in rows:
        summary = json.loads(row["summary"])
        inputs.append(
            ThreadInput(
                session_id=row["session_id"],
                project=row["project"] or "",
                started_at=row["started_at"],
                topics=tuple(summary.get("topics", ())),
                files=tuple(summary.get("files_modified", ())),
                summary_vector=row["embedding"],
            )
        )
    threads = build_threads(inputs)
    now = datetime.now(UTC)
    with wh.transaction():
        wh.conn.execute("DELETE FROM session_threads")
        wh.insert(
            "session_threads",
            [
                {"thread_id": t.thread_id, "session_id": sid, "position": n, "title": t.title,
                 "topics": list(t.topics), "updated_at": now}
                for t in threads
                for n, sid in enumerate(t.session_ids)
            ],
        )
    return len(threads)
