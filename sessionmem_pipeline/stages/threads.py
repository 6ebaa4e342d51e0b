"""Threads: related sessions linked across time (`session_threads`), built from the latest summaries.

A change re-clusters only what it can affect. The links at or above the similarity threshold are kept
(`thread_links`, without scores: clustering a component recomputes its links), with the input each session was
linked from (`thread_inputs`). When sessions change (their summary, start or project; or they appear or go), only
their links are recomputed, against the sessions of their project within MAX_GAP_DAYS of them, and only the strong
components (core/threads.py `strong_components`) that hold a changed session now or held one before are clustered
again and have their threads replaced. Links depend only on their two sessions, and clustering a component alone
gives that component's threads of a whole-project clustering, so the result is exactly a full rebuild's. A new
stage key (version or configuration) rebuilds everything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np

from sessionmem_pipeline.core.threads import (
    MAX_GAP_DAYS,
    SIMILARITY_THRESHOLD,
    ThreadInput,
    build_threads,
    link_scores,
    strong_components,
)
from sessionmem_pipeline.warehouse import Warehouse

THREADS_BUILT = "threads_built_from"
"""meta: the key of the threads stage that built the stored threads, links and inputs."""

THREAD_INPUTS = """
    FROM sessions s JOIN session_summaries v ON v.session_id = s.session_id AND v.version = s.summary_version
    WHERE s.parent_session_id IS NULL"""

SESSION_INPUT = """s.session_id || '|' || coalesce(CAST(s.started_at AS VARCHAR), '') || '|' || v.version || '|'
                   || coalesce(v.summary_id, '') || '|' || (v.embedding IS NULL)"""
"""What a session's links are made from: its start and latest summary (a summary version is never rewritten, only
its vector filled in once)."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
REACH = timedelta(days=MAX_GAP_DAYS + 1)
"""Sessions whose starts are further apart cannot link (the stage's inputs have no end, so the gap is the
difference of starts); a day of margin keeps the cut on the safe side of rounding."""


def _inputs(wh: Warehouse, session_ids: Sequence[str]) -> list[ThreadInput]:
    """The sessions' thread inputs; starts read as microseconds and vectors through Arrow (per-row conversion of
    time zones and float lists was most of a small update's cost)."""
    with wh._values(session_ids) as listed:
        table = wh.conn.execute(
            f"""SELECT s.session_id, s.project, epoch_us(s.started_at) AS started_us, v.summary, v.embedding
                {THREAD_INPUTS} AND s.session_id IN (SELECT v FROM {listed})"""
        ).to_arrow_table()
    embeddings = table.column("embedding").combine_chunks()
    vectors = embeddings.values.to_numpy(zero_copy_only=False)  # in the coordinates of `offsets` (flatten is not)
    offsets = embeddings.offsets.to_numpy()
    missing = embeddings.is_null().to_numpy(zero_copy_only=False)
    inputs = []
    for row, (session_id, project, started_us, summary) in enumerate(zip(
        *(table.column(name).to_pylist() for name in ("session_id", "project", "started_us", "summary")), strict=True
    )):
        summary = json.loads(summary)
        inputs.append(
            ThreadInput(
                session_id=session_id,
                project=project or "",
                started_at=None if started_us is None else EPOCH + timedelta(microseconds=started_us),
                topics=tuple(summary.get("topics", ())),
                files=tuple(summary.get("files_modified", ())),
                summary_vector=None if missing[row] else vectors[offsets[row] : offsets[row + 1]],
            )
        )
    return inputs


def _changed_sessions(wh: Warehouse) -> tuple[dict[str, set[str]], list[dict]]:
    """Per project, the sessions whose input differs from the one their stored links were made from (new, changed,
    gone, or moved: then in both projects); and the `thread_inputs` rows of those still there."""
    rows = wh.conn.execute(
        f"""WITH now AS (SELECT s.session_id, coalesce(s.project, '') AS project, md5({SESSION_INPUT}) AS input_fp
                         {THREAD_INPUTS})
            SELECT coalesce(now.session_id, t.session_id), now.project, t.project, now.input_fp
            FROM now FULL JOIN thread_inputs t USING (session_id)
            WHERE now.input_fp IS DISTINCT FROM t.input_fp OR now.project IS DISTINCT FROM t.project"""
    ).fetchall()
    changed: dict[str, set[str]] = {}
    for session_id, project, before, _ in rows:
        for name in {project, before} - {None}:
            changed.setdefault(name, set()).add(session_id)
    inputs = [{"session_id": session_id, "project": project, "input_fp": input_fp}
              for session_id, project, _, input_fp in rows if input_fp is not None]
    return changed, inputs


def _strong_links(wh: Warehouse, project: str) -> list[tuple[str, str]]:
    return wh.conn.execute(
        "SELECT session_a, session_b FROM thread_links WHERE project = ?", [project]
    ).fetchall()


def _within_reach(wh: Warehouse, project: str, sessions: Sequence[ThreadInput]) -> list[str]:
    """The project's sessions that can link with any of `sessions` (by their starts; an unknown start reaches all)."""
    table = wh.conn.execute(
        f"""SELECT s.session_id, epoch_us(s.started_at) AS started_us {THREAD_INPUTS}
            AND coalesce(s.project, '') = ?""",
        [project],
    ).to_arrow_table()
    ids = np.array(table.column("session_id").to_pylist(), dtype=object)
    starts = table.column("started_us").to_numpy(zero_copy_only=False)  # NaN where unknown
    if any(session.started_at is None for session in sessions):
        return list(ids)
    changed = np.sort([(session.started_at - EPOCH) / timedelta(microseconds=1) for session in sessions])
    after = np.searchsorted(changed, starts)  # the nearest changed start is the one before or after each start
    before_gap = np.abs(starts - changed[np.clip(after - 1, 0, len(changed) - 1)])
    after_gap = np.abs(starts - changed[np.clip(after, 0, len(changed) - 1)])
    reach = np.isnan(starts) | (np.minimum(before_gap, after_gap) <= REACH / timedelta(microseconds=1))
    return list(ids[reach])


class _Scores:
    """Link scores computed while relinking (the changed sessions' rows against the sessions within their reach),
    handed to the clustering for a component they cover whole (a full rebuild: every component), so its links are
    not computed a second time (scores depend only on their two sessions: the same numbers either way)."""

    def __init__(self, rows: Sequence[ThreadInput] = (), cols: Sequence[ThreadInput] = (),
                 scores: np.ndarray | None = None) -> None:
        self.rows = {s.session_id: i for i, s in enumerate(rows)}
        self.cols = {s.session_id: j for j, s in enumerate(cols)}
        self.scores = scores

    def of(self, members: Sequence[ThreadInput]) -> np.ndarray | None:
        ids = [s.session_id for s in members]
        if self.scores is None or not all(i in self.rows and i in self.cols for i in ids):
            return None
        return self.scores[np.ix_([self.rows[i] for i in ids], [self.cols[i] for i in ids])]


def _relink(
    wh: Warehouse, project: str, changed: set[str], loaded: dict[str, ThreadInput]
) -> tuple[list[tuple], set[str], list[set[str]], _Scores]:
    """For one project: the changed sessions' strong links as they are now, the sessions whose threads must be
    replaced, the strong components to cluster again, and the scores computed (nothing written; the inputs it read
    go to `loaded`)."""
    before = _strong_links(wh, project)
    present = [s for s in _inputs(wh, sorted(changed)) if s.project == project]
    new_links: list[tuple] = []
    computed = _Scores()
    if present:
        reach = set(_within_reach(wh, project, present)) - {s.session_id for s in present}
        others = present + _inputs(wh, sorted(reach))
        loaded.update((s.session_id, s) for s in others)
        computed = _Scores(present, others, link_scores(present, others))
        strong = computed.scores >= SIMILARITY_THRESHOLD
        strong[:, : len(present)] &= np.triu(np.ones((len(present), len(present)), dtype=bool), 1)  # each pair once
        for i, j in zip(*np.nonzero(strong), strict=True):
            new_links.append((project, *sorted((present[i].session_id, others[j].session_id))))
    touched = set(changed)
    for component in strong_components({s for link in before for s in link} | changed, before):
        if component & changed:
            touched |= component
    links_now = [(a, b) for a, b in before if a not in changed and b not in changed] + [link[1:] for link in new_links]
    to_cluster = [component for component in strong_components({s for link in links_now for s in link} | touched,
                                                                links_now) if component & touched]
    return new_links, touched.union(*to_cluster), to_cluster, computed


def refresh_threads(wh: Warehouse, stage_key: str) -> int | None:
    """Bring the threads up to date with the sessions' inputs (all of them when the stage key changed); the number
    of threads rebuilt, None when no session's input changed (nothing written: the comparison with `thread_inputs`
    is the stage's change detection)."""
    now = datetime.now(UTC)
    with wh.transaction():
        new_key = json.loads(wh.get_meta(THREADS_BUILT) or "{}").get("key") != stage_key
        if new_key:
            for table in ("session_threads", "thread_links", "thread_inputs"):
                wh.conn.execute(f"DELETE FROM {table}")
        changes, inputs_now = _changed_sessions(wh)
        if not changes and not new_key:
            return None
        new_links, touched, components, inputs, scores = [], set(), [], {}, {}
        for project, changed in sorted(changes.items()):
            links, project_touched, project_components, scores[project] = _relink(wh, project, changed, inputs)
            new_links += links
            touched |= project_touched
            components += [(project, component) for component in project_components]
        inputs.update((s.session_id, s) for s in _inputs(wh, sorted(touched - inputs.keys())))
        threads = [
            thread
            for project, component in components
            for thread in build_threads([inputs[s] for s in component if s in inputs and inputs[s].project == project],
                                        scored=scores[project].of)
        ]
        changed_ids = sorted({s for sessions in changes.values() for s in sessions})
        wh.delete_thread_links(changed_ids)
        wh.insert("thread_links", [dict(zip(("project", "session_a", "session_b"), link, strict=True))
                                   for link in new_links])
        wh.insert("thread_inputs", inputs_now)
        wh.delete_where("session_threads", "session_id", sorted(touched))
        wh.insert(
            "session_threads",
            [
                {"thread_id": t.thread_id, "session_id": sid, "position": n, "title": t.title,
                 "topics": list(t.topics), "updated_at": now}
                for t in threads
                for n, sid in enumerate(t.session_ids)
            ],
        )
        wh.set_meta(THREADS_BUILT, json.dumps({"key": stage_key}))
    return len(threads)
