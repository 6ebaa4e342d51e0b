"""Threads: related sessions linked across time (`session_threads`), built from the latest summaries.

Threads never cross projects (core/threads.py), so a change rebuilds only the threads of the projects whose
sessions' summaries changed: each project's input is fingerprinted, and the fingerprints the stored threads were
built from are kept in `meta` (THREADS_BUILT). The result is the same as rebuilding every project.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from sessionmem_pipeline.core.threads import ThreadInput, build_threads
from sessionmem_pipeline.warehouse import Warehouse

THREADS_BUILT = "threads_built_from"
"""meta: the threads stage's key and, per project, the fingerprint of the input its stored threads were built from."""

THREAD_INPUTS = """
    FROM sessions s JOIN session_summaries v ON v.session_id = s.session_id AND v.version = s.summary_version
    WHERE s.parent_session_id IS NULL"""


def project_fingerprints(wh: Warehouse) -> dict[str, str]:
    """Per project, a fingerprint of what its threads are built from: its sessions, their starts and latest
    summaries (a summary version is never rewritten, only its vector filled in once)."""
    rows = wh.conn.execute(
        f"""SELECT coalesce(s.project, '') AS project,
                   md5(string_agg(s.session_id || '|' || coalesce(CAST(s.started_at AS VARCHAR), '') || '|'
                                  || v.version || '|' || coalesce(v.summary_id, '') || '|' || (v.embedding IS NULL),
                                  ',' ORDER BY s.session_id))
            {THREAD_INPUTS} GROUP BY 1"""
    ).fetchall()
    return dict(rows)


def _inputs(wh: Warehouse, projects: Sequence[str]) -> list[ThreadInput]:
    rows = wh.query(
        f"""SELECT s.session_id, s.project, s.started_at, v.summary, v.embedding {THREAD_INPUTS}
            AND coalesce(s.project, '') IN (SELECT unnest(?))""",
        [list(projects)],
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
    return inputs


def refresh_threads(wh: Warehouse, stage_key: str, current: dict[str, str]) -> int:
    """Rebuild the threads of every project whose input (`current`: `project_fingerprints`) changed since its
    threads were built (all of them when the stage key changed); the number of threads rebuilt."""
    built = json.loads(wh.get_meta(THREADS_BUILT) or "{}")
    previous: dict[str, str] = built.get("projects", {}) if built.get("key") == stage_key else {}
    changed = sorted(p for p in current.keys() | previous.keys() if current.get(p) != previous.get(p))
    threads = build_threads(_inputs(wh, changed))
    now = datetime.now(UTC)
    with wh.transaction():
        if previous:  # the changed projects' threads, and any whose sessions are gone
            wh.conn.execute(
                """DELETE FROM session_threads WHERE thread_id IN (
                       SELECT t.thread_id FROM session_threads t LEFT JOIN sessions s USING (session_id)
                       WHERE s.session_id IS NULL OR coalesce(s.project, '') IN (SELECT unnest(?)))""",
                [changed],
            )
        else:
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
        wh.set_meta(THREADS_BUILT, json.dumps({"key": stage_key, "projects": current}, sort_keys=True))
    return len(threads)
