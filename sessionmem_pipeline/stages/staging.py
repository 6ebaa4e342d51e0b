"""Every per-session stage split in two: compute outside the writer, in parallel; commit by the one writer.

Compute (`compute_sessions`: any process on any machine that reaches the staging folder) opens only the published
reader snapshot, never the live DuckDB file another process may be writing. For the sessions of its partitions it
runs what the stages would run (collapse, chunk with topics, embed, summarize), starting from the snapshot's
messages and from whatever output the snapshot already holds up to date, or, for a new session a compute step
parsed, from that staged parse (its messages as ingest will store them, under the ingest fingerprint ingest will
record), so new sessions need not wait for the writer to ingest them; and leaves
one Parquet file per stage in the staging folder: each session's result under the input fingerprint and
stage key it was built from (the fingerprints chain: a stage's input is md5(upstream input || upstream key)), and
vectors by text. The stages themselves (stages/pipeline.py, the same functions `sessionmem index` runs in process)
are the commit: for each stale session they take the staged result built from exactly the input they are about to
build from, and compute anything the files do not hold (no compute step ran, or the input changed after the
snapshot was published) themselves. So staging can only make a run faster, never change its result.
"""

from __future__ import annotations

import hashlib
import os
import queue
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core.llm_protocol import requests_at_once
from sessionmem_pipeline.core.models import Message, ParsedSession
from sessionmem_pipeline.core.summarize import messages_after, summary_is_due
from sessionmem_pipeline.providers.embedders import Embedder, EmbeddingOutcome, vectors_or_raise
from sessionmem_pipeline.stages.ingest import session_fingerprint
from sessionmem_pipeline.stages.provider_batches import batch_api_on, chat_batch_api_on
from sessionmem_pipeline.stages.registry import (
    CHUNK,
    COLLAPSE,
    EMBED,
    INGEST,
    SUMMARIZE,
    SUMMARIZE_NOW,
    Providers,
    Stage,
    stage_keys,
)
from sessionmem_pipeline.stages.summaries import SessionResult, embed_results, latest_summary, summarize_session
from sessionmem_pipeline.stages.transform import chunk_session_rows, chunking_options, collapsed_rows
from sessionmem_pipeline.warehouse import (
    DATABASE,
    NothingIndexedYet,
    Snapshot,
    collapsed_from_row,
    empty_reader,
    open_reader,
    stored_message,
)

_VECTOR_SCHEMA = pa.schema(
    [
        ("session_id", pa.string()),
        ("model", pa.string()),
        ("text_key", pa.string()),
        ("vector", pa.list_(pa.float32())),
        ("error", pa.string()),
    ]
)


def staging_folder(settings: Settings, stage: Stage = EMBED) -> Path:
    """Where compute leaves a stage's results for the commit: `staging.path`, else a folder beside the warehouse."""
    configured = settings["staging.path"]
    base = Path(configured) if configured else settings.warehouse.with_name(f"{settings.warehouse.stem}.staging")
    return base / stage.name


def text_key(text: str) -> str:
    """What a staged vector is found by: the text the embed stage will ask for, hashed."""
    return hashlib.sha256(text.encode()).hexdigest()


def downstream_input(input_fp: str, stage_key: str) -> str:
    """The input fingerprint of the stages after one built from `input_fp` under `stage_key` (as `stale_sessions`
    computes it in SQL)."""
    return hashlib.md5(f"{input_fp}{stage_key}".encode()).hexdigest()


# ---- compute ---------------------------------------------------------------------------------------------------


@dataclass
class ComputeOutcome:
    sessions: int = 0  # sessions with at least one stage computed
    computed: dict[str, int] = field(default_factory=dict)  # stage -> sessions computed (embed: texts)
    failed: int = 0  # texts the embedder could not embed
    paths: list[Path] = field(default_factory=list)


@dataclass
class _SessionWork:
    """What compute built for one session, by stage."""

    results: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # stage -> (input fp, result)
    texts: dict[str, str] = field(default_factory=dict)  # text -> context hash, to embed


def compute_sessions(
    settings: Settings,
    partition_keys: Sequence[str] | None,
    providers: Providers,
    *,
    summarize: str = SUMMARIZE_NOW,
    now: datetime | None = None,
    parsed: Mapping[str, ParsedSession] | None = None,
) -> ComputeOutcome:
    """Every stage's results for these partitions' sessions (all sessions when None) that the published snapshot
    does not hold up to date, written to new staging files (none when there is nothing to do). `parsed`: the
    sessions of these partitions' staged parses (`ingest_staging.staged_sessions`): those the snapshot holds
    nothing of are computed from the parse, also before anything was published. Sessions are computed
    `llm.max_in_flight` at a time when a chat model is configured (its requests are latency-bound), and the chunk
    texts of those done are embedded while the next are computed (`_Embedding`)."""
    parsed = parsed or {}
    try:
        conn = open_reader(settings.warehouse, extensions=False)  # reads plain tables only
    except NothingIndexedYet:
        if not parsed:
            return ComputeOutcome()
        conn = empty_reader(extensions=False)  # no caches, no earlier summaries: every parsed session is new
    try:
        snapshot = Snapshot(conn)
        if partition_keys is None:
            sessions = [row["session_id"] for row in snapshot.query("SELECT session_id FROM sessions")]
        else:
            sessions = snapshot.sessions_of_partitions(partition_keys)
        parsed = _not_forgotten(snapshot, parsed)
        known = set(sessions)
        sessions += [session_id for session_id in parsed if session_id not in known]
        state = _stage_state(snapshot, sessions)
        run = _Compute(settings, providers, stage_keys(settings, providers), summarize, now or datetime.now(UTC))
        in_flight = requests_at_once(providers.llm) if providers.llm is not None else 1
        embedder = None if batch_api_on(settings) else providers.embedder  # else the writer's embed step sends them
        embedding = _Embedding(_thread_snapshot(conn), embedder)
        with ThreadPoolExecutor(in_flight, thread_name_prefix="compute") as pool, embedding:
            done: dict[str, _SessionWork] = {}
            work = pool.map(
                lambda s: run.session(_thread_snapshot(conn), s, state.get(s, {}), parsed.get(s)), sessions
            )
            for session_id, session_work in zip(sessions, work, strict=True):
                done[session_id] = session_work
                embedding.add(session_work.texts)
        return _write_outcome(settings, providers, run.keys, done, embedding.vector_rows(done))
    finally:
        conn.close()


def _thread_snapshot(conn: duckdb.DuckDBPyConnection) -> Snapshot:
    """A handle on the same snapshot for one thread (a DuckDB connection is not shared between threads)."""
    cursor = conn.cursor()
    cursor.execute(f"USE {DATABASE}")
    return Snapshot(cursor)


def _stage_state(snapshot: Snapshot, sessions: Sequence[str]) -> dict[str, dict[str, tuple[str, str]]]:
    """Session -> stage -> (input fp, stage key), as the snapshot records it."""
    state: dict[str, dict[str, tuple[str, str]]] = {}
    for row in snapshot.query(
        "SELECT session_id, stage, input_fp, stage_key FROM stage_state WHERE session_id IN (SELECT unnest(?))",
        [list(sessions)],
    ):
        state.setdefault(row["session_id"], {})[row["stage"]] = (row["input_fp"], row["stage_key"])
    return state


@dataclass
class _Compute:
    """One compute step's settings, providers and stage keys: `session` computes one session's stages."""

    settings: Settings
    providers: Providers
    keys: Mapping[str, str]
    summarize: str
    now: datetime

    def session(
        self,
        snapshot: Snapshot,
        session_id: str,
        state: Mapping[str, tuple[str, str]],
        parsed: ParsedSession | None,
    ) -> _SessionWork:
        """What the stages would build for this session, those whose output the snapshot does not already hold up
        to date: a new session (the snapshot holds none of it) from its staged parse, whose messages ingest will
        store as they are; any other from the snapshot (nothing while its ingest is out of date there: the stages
        wait for it; ingest keeps a grown session's stored messages, which its parse alone cannot tell)."""
        key = self.keys[INGEST.name]
        session = snapshot.session_row(session_id)
        if parsed is not None and session is None:
            messages = [stored_message(m, parsed.project or "", parsed.cwd) for m in parsed.messages]
            ingest = (session_fingerprint(parsed), key)
            return self._build(snapshot, _session_as_stored(parsed, messages), ingest, {}, messages)
        ingest = state.get(INGEST.name)
        if ingest is None or ingest[1] != key or session is None:
            return _SessionWork()
        return self._build(snapshot, session, ingest, state, None)

    def _build(
        self,
        snapshot: Snapshot,
        session: Mapping[str, Any],
        ingest: tuple[str, str],
        state: Mapping[str, tuple[str, str]],
        messages: Sequence[Message] | None,
    ) -> _SessionWork:
        """The stages after ingest from its fingerprint and key, skipping those `state` records as built from the
        same input; `messages`: the session's messages when not the snapshot's."""
        work = _SessionWork()
        session_id = session["session_id"]
        fps = {COLLAPSE.name: downstream_input(*ingest)}
        fps[CHUNK.name] = fps[SUMMARIZE.name] = downstream_input(fps[COLLAPSE.name], self.keys[COLLAPSE.name])
        fps[EMBED.name] = downstream_input(fps[CHUNK.name], self.keys[CHUNK.name])
        built = {stage for stage, fp in fps.items() if state.get(stage) == (fp, self.keys[stage])}
        if COLLAPSE.name in built:
            collapsed = snapshot.load_collapsed(session_id)
        else:
            rows = collapsed_rows(snapshot.load_messages(session_id) if messages is None else messages)
            work.results[COLLAPSE.name] = (fps[COLLAPSE.name], {"rows": rows})
            collapsed = [collapsed_from_row(row) for row in rows]
        if CHUNK.name not in built:
            options = chunking_options(self.settings, self.providers.embedder, self.providers.llm)
            chunked = chunk_session_rows(snapshot, session, collapsed, **options)
            work.results[CHUNK.name] = (fps[CHUNK.name], chunked)
            work.texts = {row["context_content"]: row["context_hash"] for row in chunked["rows"]}
        elif EMBED.name not in built:
            same_model = snapshot.get_meta("embedding_model") == self.providers.embedder.model_id
            rows = snapshot.chunks_without_embedding([session_id]) if same_model else snapshot.query(
                "SELECT context_content, context_hash FROM chunks WHERE session_id = ?", [session_id]
            )
            work.texts = {row["context_content"]: row["context_hash"] for row in rows}
        if self.settings["summaries.enabled"] and SUMMARIZE.name not in built and not chat_batch_api_on(self.settings):
            latest = latest_summary(snapshot, session_id)
            previous = latest[1] if latest else None
            try:
                if self._due(session, collapsed, previous):
                    result = summarize_session(collapsed, previous, self.providers.llm)
                    work.results[SUMMARIZE.name] = (fps[SUMMARIZE.name], result)
            except ValueError:  # the latest summary cannot be continued: the stage itself says why
                pass
        return work

    def _due(self, session: Mapping[str, Any], collapsed: Sequence[Any], previous: Any) -> bool:
        """Whether the summarize stage will want this session now (always when a person asked for summaries)."""
        if self.summarize == SUMMARIZE_NOW:
            return True
        return summary_is_due(
            last_message_at=session["ended_at"],
            now=self.now,
            new_messages_since_summary=len(messages_after(collapsed, previous)),
            idle_minutes=self.settings["summaries.idle_minutes"],
            message_threshold=self.settings["summaries.message_threshold"],
        )


def _not_forgotten(snapshot: Snapshot, parsed: Mapping[str, ParsedSession]) -> dict[str, ParsedSession]:
    """The parsed sessions not forgotten as the snapshot stands: a forgotten session's file may still be there, and
    its words must not reach a provider again (one a newer file holds is in the snapshot: not built from a parse)."""
    forgotten = snapshot.forgotten_ids()
    return {session_id: session for session_id, session in parsed.items() if session_id not in forgotten}


def _session_as_stored(parsed: ParsedSession, messages: Sequence[Message]) -> dict[str, Any]:
    """The columns of its `sessions` row that compute reads, as ingest will write them (the start and end are
    `Warehouse.refresh_session_aggregates`' min and max message time)."""
    times = [m.timestamp for m in messages if m.timestamp is not None]
    return {
        "session_id": parsed.session_id,
        "project": parsed.project,
        "started_at": min(times) if times else None,
        "ended_at": max(times) if times else None,
    }


def _write_outcome(
    settings: Settings,
    providers: Providers,
    keys: Mapping[str, str],
    done: Mapping[str, _SessionWork],
    vectors: list[dict[str, Any]],
) -> ComputeOutcome:
    """The results as one file per stage, the chunks' vectors (`_Embedding`'s) beside them."""
    outcome = ComputeOutcome(sessions=sum(1 for w in done.values() if w.results or w.texts))
    summaries = [w.results[SUMMARIZE.name][1] for w in done.values() if SUMMARIZE.name in w.results]
    embed_results(summaries, providers.embedder)
    for stage in (COLLAPSE, CHUNK, SUMMARIZE):
        rows = [
            {
                "session_id": s,
                "input_fp": fp,
                "stage_key": keys[stage.name],
                **(result.to_row() if isinstance(result, SessionResult) else result),
            }
            for s, w in done.items()
            if (found := w.results.get(stage.name)) is not None
            for fp, result in [found]
        ]
        if rows:
            outcome.computed[stage.name] = len(rows)
            outcome.paths.append(write_atomically(staging_folder(settings, stage), pa.Table.from_pylist(rows)))
    if vectors:
        outcome.computed[EMBED.name] = sum(1 for row in vectors if row["vector"] is not None)
        outcome.failed = len(vectors) - outcome.computed[EMBED.name]
        outcome.paths.append(
            write_atomically(staging_folder(settings, EMBED), pa.Table.from_pylist(vectors, schema=_VECTOR_SCHEMA))
        )
    return outcome


class ComputeAbandoned(Exception):
    """Ends the stream of texts to embed when computing the sessions failed (that failure is the one raised)."""


class _Embedding:
    """The chunk texts no cache of the snapshot holds, embedded while later sessions are still computed: each
    session's new texts go to the embedder's thread as soon as the session is done, and a remote embedder sends
    a batch once it is full (the same batches, in the same order, as one call after every session; no thread,
    no texts without an embedder: the provider's Batch API embeds them in the writer's step)."""

    def __init__(self, snapshot: Snapshot, embedder: Embedder | None) -> None:
        self.snapshot = snapshot
        self.embedder = embedder
        self.seen: set[str] = set()  # every text added so far
        self.texts: list[str] = []  # the texts sent, in order
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="embed-stream")
        self._outcome: Future[EmbeddingOutcome] | None = None
        self._abandoned = False

    def __enter__(self) -> _Embedding:
        if self.embedder is not None:
            self._outcome = self._thread.submit(self.embedder.embed_as_they_come, self._texts_as_they_come())
        return self

    def __exit__(self, failed: type[BaseException] | None, *_: object) -> None:
        self._abandoned = failed is not None  # computing failed: send no more (the requests in flight end)
        self._queue.put(None)
        self._thread.shutdown()

    def _texts_as_they_come(self) -> Iterator[str]:
        """The queued texts; when computing failed, an error instead, so the embedder sends nothing more."""
        while (text := self._queue.get()) is not None and not self._abandoned:
            yield text
        if self._abandoned:
            raise ComputeAbandoned("computing the sessions failed; their texts are not embedded")

    def add(self, texts: Mapping[str, str]) -> None:
        """A session's texts (text -> context hash): those neither seen before nor cached go to the embedder."""
        if self.embedder is None:
            return
        new = {text: digest for text, digest in texts.items() if text not in self.seen}
        if not new:
            return
        self.seen.update(new)
        cached = self.snapshot.cached_embeddings(self.embedder.model_id, list(new.values()))
        for text, digest in new.items():
            if digest not in cached:
                self.texts.append(text)
                self._queue.put(text)

    def vector_rows(self, done: Mapping[str, _SessionWork]) -> list[dict[str, Any]]:
        """The staging rows of the sent texts, each under the last session that has it (after `__exit__`)."""
        if self._outcome is None or not self.texts:
            return []
        assert self.embedder is not None
        result = self._outcome.result()
        owner = {text: session for session, w in done.items() for text in w.texts}
        return [
            {
                "session_id": owner[text],
                "model": self.embedder.model_id,
                "text_key": text_key(text),
                "vector": None if (vector := result.vector(index)) is None else vector.tolist(),
                "error": result.failures.get(index),
            }
            for index, text in enumerate(self.texts)
        ]


def write_atomically(folder: Path, table: pa.Table) -> Path:
    """A reader of the folder sees whole files only: write under a hidden name, then rename."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{uuid.uuid4().hex}.parquet"
    temp = folder / f".{target.name}.{os.getpid()}.tmp"
    pq.write_table(table, temp)
    os.replace(temp, target)
    return target


# ---- commit ----------------------------------------------------------------------------------------------------


@dataclass
class StagedFiles:
    """The staging files of one stage a commit read, and which sessions each covers."""

    sessions_of_file: dict[Path, set[str]] = field(default_factory=dict)
    results: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (session, input fp) -> result
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # embed: text key -> vector
    errors: dict[str, str] = field(default_factory=dict)  # embed: text key -> why it failed

    def result(self, session_id: str, input_fp: str) -> dict[str, Any] | None:
        return self.results.get((session_id, input_fp))

    def remove_consumed(self, scope: Sequence[str] | None) -> None:
        """Remove the files whose every session is within the commit's scope (None: every file)."""
        within = set(scope) if scope is not None else None
        for path, sessions in self.sessions_of_file.items():
            if within is None or sessions <= within:
                path.unlink(missing_ok=True)


def staged_files(settings: Settings, stage: Stage) -> list[Path]:
    """The complete staging files of a stage (one being written has a hidden name until it is whole)."""
    folder = staging_folder(settings, stage)
    return sorted(folder.glob("*.parquet")) if folder.is_dir() else []


def read_results(settings: Settings, stage: Stage, stage_key: str, unit: str = "session_id") -> StagedFiles:
    """Every complete staging file of a stage's results per `unit` (a session; ingest's: a file's partition key),
    those built under `stage_key` (the same version, configuration and models as the commit's)."""
    staged = StagedFiles()
    for path in staged_files(settings, stage):
        rows = pq.read_table(path).to_pylist()
        staged.sessions_of_file[path] = {row[unit] for row in rows}
        for row in rows:
            if row.pop("stage_key") == stage_key:
                staged.results[(row.pop(unit), row.pop("input_fp"))] = row
    return staged


def read_vectors(settings: Settings, model_id: str) -> StagedFiles:
    """Every complete staging file of vectors of `model_id` (files of another model are left alone)."""
    staged = StagedFiles()
    for path in staged_files(settings, EMBED):
        table = pq.read_table(path, schema=_VECTOR_SCHEMA).to_pylist()
        if any(row["model"] != model_id for row in table):
            continue
        staged.sessions_of_file[path] = {row["session_id"] for row in table}
        for row in table:
            if row["vector"] is not None:
                staged.vectors[row["text_key"]] = np.asarray(row["vector"], dtype=np.float32)
            else:
                staged.errors[row["text_key"]] = row["error"] or "no vector"
    return staged


class StagedEmbedder(Embedder):
    """The real embedder's identity (model, width, window), answering from staging files; texts the files do not
    hold are embedded by the real embedder (`computed_here` counts them)."""

    def __init__(self, real: Embedder, staged: StagedFiles) -> None:
        self.real = real
        self.staged = staged
        self.model_id = real.model_id
        self.dimensions = real.dimensions
        self.max_input_tokens = real.max_input_tokens
        self.batch_size = real.batch_size
        self.computed_here = 0

    def count_model_tokens(self, text: str) -> int:
        return self.real.count_model_tokens(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return vectors_or_raise(self.embed_with_failures(texts), texts)

    def embed_with_failures(self, texts: Sequence[str]) -> EmbeddingOutcome:
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        failures: dict[int, str] = {}
        missing: list[int] = []
        for index, text in enumerate(texts):
            key = text_key(text)
            if key in self.staged.vectors:
                vectors[index] = self.staged.vectors[key]
            elif key in self.staged.errors:
                failures[index] = self.staged.errors[key]
            else:
                missing.append(index)
        if missing:
            self.computed_here += len(missing)
            fresh = self.real.embed_with_failures([texts[index] for index in missing])
            for position, index in enumerate(missing):
                if (vector := fresh.vector(position)) is None:
                    failures[index] = fresh.failures[position]
                else:
                    vectors[index] = vector
        return EmbeddingOutcome(vectors, failures)
