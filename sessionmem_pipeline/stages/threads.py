"""Threads: related sessions linked across time (`session_threads`), built from the latest summaries.

A change re-clusters only what it can affect. The links at or above the similarity threshold are kept
(`thread_links`, without scores: clustering a component recomputes its links), with the input each session was
linked from (`thread_inputs`: also its topics and files, so the unchanged sessions a change is compared and
clustered with are read from there, not from their summaries' JSON). When sessions change (their summary, start or
project; or they appear or go), only their links are recomputed, against the sessions of their project within
MAX_GAP_DAYS of them, and only the strong components (core/threads.py `strong_components`) that hold a changed
session now or held one before are clustered again and have their threads replaced. Links depend only on their two
sessions, and clustering a component alone gives that component's threads of a whole-project clustering, so the
result is exactly a full rebuild's. A new stage key (version or configuration) rebuilds everything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

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

NOW = f"""SELECT s.session_id, coalesce(s.project, '') AS project, s.started_at, v.summary_id,
                v.version AS summary_version, v.embedding IS NOT NULL AS embedded {THREAD_INPUTS}"""
RECORDED = ("project", "started_at", "summary_id", "summary_version", "embedded")
"""What a session's links are made from, as `thread_inputs` records it: its project, start and latest summary (a
summary version is never rewritten, only its vector filled in once), whose topics and files are recorded with it."""

CANDIDATES = """
    SELECT coalesce(s.session_id, t.session_id)
    FROM (FROM sessions WHERE parent_session_id IS NULL) s FULL JOIN thread_inputs t USING (session_id)
    WHERE (coalesce(s.project, ''), s.started_at, s.summary_version) IS DISTINCT FROM
          (t.project, t.started_at, t.summary_version) OR NOT t.embedded
    UNION
    SELECT t.session_id FROM thread_inputs t
    JOIN session_summaries v ON v.session_id = t.session_id AND v.version = t.summary_version
    WHERE t.embedded AND v.embedding IS NULL"""
"""The sessions whose thread input may differ from the recorded one, from the sessions' own columns and whether
the recorded summary's vector is still there (a summary version is never rewritten; its vector is filled in, or
cleared by `reembed`), so a session outside these has the input it was linked from (reading every latest
summary to compare was most of a small change's cost at 10,000 sessions)."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
REACH = timedelta(days=MAX_GAP_DAYS + 1)
"""Sessions whose starts are further apart cannot link (the stage's inputs have no end, so the gap is the
difference of starts); a day of margin keeps the cut on the safe side of rounding."""


def _as_inputs(table: pa.Table, topics: Sequence[Sequence[str]], files: Sequence[Sequence[str]]) -> list[ThreadInput]:
    """Thread inputs from rows of session_id, project, started_us and embedding (starts read as microseconds and
    vectors through Arrow: per-row conversion of time zones and float lists was most of a small update's cost)."""
    embeddings = table.column("embedding").combine_chunks()
    vectors = embeddings.values.to_numpy(zero_copy_only=False)  # in the coordinates of `offsets` (flatten is not)
    offsets = embeddings.offsets.to_numpy()
    missing = embeddings.is_null().to_numpy(zero_copy_only=False)
    return [
        ThreadInput(
            session_id=session_id,
            project=project or "",
            started_at=None if started_us is None else EPOCH + timedelta(microseconds=started_us),
            topics=tuple(topics[row]),
            files=tuple(files[row]),
            summary_vector=None if missing[row] else vectors[offsets[row] : offsets[row + 1]],
        )
        for row, (session_id, project, started_us) in enumerate(zip(
            *(table.column(name).to_pylist() for name in ("session_id", "project", "started_us")), strict=True
        ))
    ]


def _inputs(wh: Warehouse, session_ids: Sequence[str]) -> list[ThreadInput]:
    """The sessions' thread inputs as they are now, their topics and files from their latest summary."""
    with wh._values(session_ids) as listed:
        table = wh.conn.execute(
            f"""SELECT s.session_id, s.project, epoch_us(s.started_at) AS started_us, v.summary, v.embedding
                {THREAD_INPUTS} AND s.session_id IN (SELECT v FROM {listed})"""
        ).to_arrow_table()
    summaries = [json.loads(summary) for summary in table.column("summary").to_pylist()]
    return _as_inputs(table, [summary.get("topics", ()) for summary in summaries],
                      [summary.get("files_modified", ()) for summary in summaries])


def _recorded_inputs(wh: Warehouse, session_ids: Sequence[str]) -> list[ThreadInput]:
    """The thread inputs of sessions whose input has not changed since `thread_inputs` recorded it (their summary's
    vector joined in): reading the summaries' JSON for a component's topics and files was most of a change's cost."""
    with wh._values(session_ids) as listed:
        table = wh.conn.execute(
            f"""SELECT t.session_id, t.project, epoch_us(t.started_at) AS started_us, t.topics, t.files, v.embedding
                FROM thread_inputs t
                JOIN session_summaries v ON v.session_id = t.session_id AND v.version = t.summary_version
                WHERE t.session_id IN (SELECT v FROM {listed})"""
        ).to_arrow_table()
    return _as_inputs(table, table.column("topics").to_pylist(), table.column("files").to_pylist())


def _record_inputs(wh: Warehouse, inputs: Sequence[ThreadInput]) -> None:
    """Record what the (changed) sessions were linked from: their input now, with the topics and files used."""
    table = pa.table(
        {"session_id": [s.session_id for s in inputs], "topics": [list(s.topics) for s in inputs],
         "files": [list(s.files) for s in inputs]},
        schema=pa.schema([("session_id", pa.string()), ("topics", pa.list_(pa.string())),
                          ("files", pa.list_(pa.string()))]),
    )
    with wh._registered(table) as incoming:
        wh.conn.execute(
            f"""INSERT INTO thread_inputs BY NAME
                SELECT now.*, i.topics, i.files
                FROM ({NOW} AND s.session_id IN (SELECT session_id FROM {incoming})) now
                JOIN {incoming} i USING (session_id)"""
        )


def _changed_sessions(wh: Warehouse) -> dict[str, set[str]]:
    """Per project, the sessions whose input differs from the one their stored links were made from (new, changed,
    gone, or moved: then in both projects)."""
    rows = wh.conn.execute(
        f"""WITH candidates AS ({CANDIDATES})
            SELECT coalesce(now.session_id, t.session_id), now.project, t.project
            FROM ({NOW} AND s.session_id IN (FROM candidates)) now
            FULL JOIN (FROM thread_inputs WHERE session_id IN (FROM candidates)) t USING (session_id)
            WHERE ({", ".join(f"now.{c}" for c in RECORDED)}) IS DISTINCT FROM
                  ({", ".join(f"t.{c}" for c in RECORDED)})"""
    ).fetchall()
    changed: dict[str, set[str]] = {}
    for session_id, project, before in rows:
        for name in {project, before} - {None}:
            changed.setdefault(name, set()).add(session_id)
    return changed


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
        others = present + _recorded_inputs(wh, sorted(reach))  # unchanged: the changed ones are `present`
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
        changes = _changed_sessions(wh)
        if not changes and not new_key:
            return None
        new_links, touched, components, inputs, scores = [], set(), [], {}, {}
        for project, changed in sorted(changes.items()):
            links, project_touched, project_components, scores[project] = _relink(wh, project, changed, inputs)
            new_links += links
            touched |= project_touched
            components += [(project, component) for component in project_components]
        changed_ids = sorted({s for sessions in changes.values() for s in sessions})
        present = [inputs[s] for s in changed_ids if s in inputs]  # every changed session still there was relinked
        inputs.update((s.session_id, s) for s in _recorded_inputs(wh, sorted(touched - inputs.keys() - {*changed_ids})))
        threads = [
            thread
            for project, component in components
            for thread in build_threads([inputs[s] for s in component if s in inputs and inputs[s].project == project],
                                        scored=scores[project].of)
        ]
        wh.delete_thread_links(changed_ids)
        wh.insert("thread_links", [dict(zip(("project", "session_a", "session_b"), link, strict=True))
                                   for link in new_links])
        _record_inputs(wh, present)
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
