"""The embed stage split in two: compute outside the writer, in parallel; commit by the one writer.

Compute (any process on any machine that reaches the staging folder) opens only the published reader snapshot,
never the live DuckDB file another process may be writing: for the chunks of its sessions that have no vector and
none in the cache there, it asks the embedder and writes one Parquet file of vectors (and of the texts that
failed, with why). Commit runs the ordinary embed stage (`pipeline.embed`) with a `StagedEmbedder` that answers
from those files, so what it writes, records and retries is exactly what an in-process run writes. A text the
files do not hold (its chunk changed after the snapshot was published, or no compute step ran) is embedded by the
real embedder during the commit, so staging can only make a run faster, never change its result.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.providers.embedders import Embedder, EmbeddingOutcome, vectors_or_raise
from sessionmem_pipeline.stages import pipeline
from sessionmem_pipeline.stages.registry import Providers, StageContext
from sessionmem_pipeline.warehouse import NothingIndexedYet, Snapshot, open_reader

_SCHEMA = pa.schema(
    [
        ("session_id", pa.string()),
        ("model", pa.string()),
        ("text_key", pa.string()),
        ("vector", pa.list_(pa.float32())),
        ("error", pa.string()),
    ]
)


def staging_folder(settings: Settings) -> Path:
    """Where compute leaves embedding files for the commit: `staging.path`, else a folder beside the warehouse."""
    configured = settings["staging.path"]
    base = Path(configured) if configured else settings.warehouse.with_name(f"{settings.warehouse.stem}.staging")
    return base / "embed"


def text_key(text: str) -> str:
    """What a staged vector is found by: the text the embed stage will ask for, hashed."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class ComputeOutcome:
    sessions: int = 0
    embedded: int = 0
    failed: int = 0
    path: Path | None = None


def compute_embeddings(settings: Settings, partition_keys: Sequence[str] | None, embedder: Embedder) -> ComputeOutcome:
    """Vectors for these partitions' chunks that the published snapshot has neither embedded nor cached, written
    to one new staging file (nothing is written when there is nothing to embed)."""
    work = _pending_texts(settings, partition_keys, embedder)
    outcome = ComputeOutcome(sessions=len({session for session, _ in work.values()}))
    if not work:
        return outcome
    texts = list(work)
    result = embedder.embed_with_failures(texts)
    rows = []
    for index, text in enumerate(texts):
        vector = result.vector(index)
        rows.append(
            {
                "session_id": work[text][0],
                "model": embedder.model_id,
                "text_key": work[text][1],
                "vector": None if vector is None else vector.tolist(),
                "error": result.failures.get(index),
            }
        )
    outcome.failed = len(result.failures)
    outcome.embedded = len(texts) - outcome.failed
    outcome.path = _write_atomically(staging_folder(settings), pa.Table.from_pylist(rows, schema=_SCHEMA))
    return outcome


def _pending_texts(
    settings: Settings, partition_keys: Sequence[str] | None, embedder: Embedder
) -> dict[str, tuple[str, str]]:
    """Text -> (session, text key) for what the snapshot still lacks a vector of (read only, then closed)."""
    try:
        conn = open_reader(settings.warehouse)
    except NothingIndexedYet:
        return {}
    try:
        snapshot = Snapshot(conn)
        if partition_keys is None:
            sessions = [row["session_id"] for row in snapshot.query("SELECT session_id FROM sessions")]
        else:
            sessions = [s for key in partition_keys for s in snapshot.sessions_of_partition(key)]
        same_model = snapshot.scalar("SELECT value FROM meta WHERE key = 'embedding_model'") == embedder.model_id
        if same_model:
            rows = snapshot.chunks_without_embedding(sessions)
        else:  # no vectors yet, or of another model: every chunk needs one
            rows = snapshot.query(
                "SELECT session_id, context_content, context_hash FROM chunks WHERE session_id IN (SELECT unnest(?))",
                [sessions],
            )
        cached = snapshot.cached_embeddings(embedder.model_id, [row["context_hash"] for row in rows])
    finally:
        conn.close()
    return {
        row["context_content"]: (row["session_id"], text_key(row["context_content"]))
        for row in rows
        if row["context_hash"] not in cached
    }


def _write_atomically(folder: Path, table: pa.Table) -> Path:
    """A reader of the folder sees whole files only: write under a hidden name, then rename."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{uuid.uuid4().hex}.parquet"
    temp = folder / f".{target.name}.{os.getpid()}.tmp"
    pq.write_table(table, temp)
    os.replace(temp, target)
    return target


@dataclass
class StagedFiles:
    """The staging files a commit read: their vectors and failures by text key, and which sessions each covers."""

    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    sessions_of_file: dict[Path, set[str]] = field(default_factory=dict)

    def consumed(self, committed: set[str]) -> list[Path]:
        """The files whose every session is among those just committed: they can go."""
        return [path for path, sessions in self.sessions_of_file.items() if sessions <= committed]


def read_staged(settings: Settings, model_id: str) -> StagedFiles:
    """Every complete staging file, the vectors of `model_id` in them (files of another model are left alone)."""
    staged = StagedFiles()
    folder = staging_folder(settings)
    for path in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        table = pq.read_table(path, schema=_SCHEMA).to_pylist()
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


def commit_staged(ctx: StageContext, report: pipeline.StageReport) -> int:
    """The embed stage (one transaction per batch, stage state recorded as in-process) answered from the staging
    files; files whose sessions were all in this commit's scope are removed afterwards. Returns how many texts the
    commit had to embed itself because no staging file held them."""
    real = ctx.providers.embedder
    staged = read_staged(ctx.settings, real.model_id)
    embedder = StagedEmbedder(real, staged)
    pipeline.embed(replace(ctx, providers=Providers(ctx.settings, given_embedder=embedder)), report)
    scope = set(ctx.scope) if ctx.scope is not None else {s for sessions in staged.sessions_of_file.values() for s in sessions}
    for path in staged.consumed(scope):
        path.unlink(missing_ok=True)
    return embedder.computed_here
