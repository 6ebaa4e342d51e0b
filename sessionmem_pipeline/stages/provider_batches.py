"""The embed stage's backlog through the provider's Batch API (`embedding.batch_api`), recorded in the warehouse.

When the chunks a run must embed hold at least `embedding.batch_min_backlog` texts that no cache has, the stage
sends them as one batch (or several, 50,000 texts each) and returns: their chunks stay without a vector (search
finds them by keyword meanwhile) and their sessions stay stale. Every later run of the stage first polls the
open batches. A finished batch's vectors go into the embedding cache, for the texts some chunk still has (the
others' chunks changed meanwhile: their answers are dropped), where the plain embed step takes them like any cached
vector. Texts a batch did not answer (it failed, expired or was cancelled, or their line failed) are embedded by
plain requests in the same run.

A batch's life, each step committed before the next one starts, so a run killed anywhere neither loses nor
duplicates a batch:
1. recorded as `preparing`, with each request's custom_id and the text hash it stands for;
2. the request file uploaded and the batch created at the provider, carrying the record's id in its metadata;
3. the provider's batch id and status recorded.
A later run that finds a record still `preparing` (killed between 1 and 3) asks the provider for the batch carrying
its id: it adopts the batch when there is one, and records the batch `abandoned` (never created; its texts are
free again) when there is none.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.providers.batches import MAX_REQUESTS, OPEN_STATUSES, BatchAPI, BatchState, request_line
from sessionmem_pipeline.providers.embedders import OpenAIEmbedder
from sessionmem_pipeline.providers.openai_compat import provider_failures
from sessionmem_pipeline.stages.registry import EMBED, fault_point
from sessionmem_pipeline.warehouse import Warehouse

EMBEDDINGS_ENDPOINT = "/v1/embeddings"
PREPARING = "preparing"
ABANDONED = "abandoned"
APPLIED = "applied"
"""A completed batch whose answers are in the cache (a failed, expired or cancelled one keeps the provider's status:
what answers it has are in the cache too)."""
WAITING = (PREPARING, *OPEN_STATUSES)
UPLOADED_FAULT = "embed_batch_upload"
"""Fault points (tests): `exit-after:embed_batch_upload` kills the run between the upload and the batch's creation,
`exit-after:embed_batch_create` once the provider created the batch, before its id is recorded."""
CREATED_FAULT = "embed_batch_create"


def batch_api_on(settings: Settings) -> bool:
    """The Batch API applies to remote embedders only (the local model has none)."""
    return settings["embedding.batch_api"] and settings.remote_embeddings


@dataclass
class BatchOutcome:
    """What the Batch API did in one run of the embed stage."""

    submitted: int = 0  # texts sent in new batches
    written: int = 0  # vectors taken from finished batches into the cache
    stale: int = 0  # answers dropped: no chunk has their text any more
    fell_back: int = 0  # texts of finished batches without an answer (plain requests embed them)
    waiting: set[str] = field(default_factory=set)  # text hashes in open batches: the plain step leaves them
    errors: list[str] = field(default_factory=list)


def batch_backlog(
    wh: Warehouse, pending: Sequence[Mapping[str, str]], embedder: OpenAIEmbedder, min_backlog: int | None,
    now: datetime,
) -> BatchOutcome:
    """Poll the open batches, then send `pending` chunks' uncached texts as a batch when there are at least
    `min_backlog`; the outcome's `waiting` hashes are those the plain step must leave to the batches. With
    `min_backlog` None (the Batch API was switched off) open batches are polled to their end, and nothing waits."""
    outcome = BatchOutcome()
    api = embedder.batch_api()
    released = _poll(wh, api, embedder, outcome, now)
    if min_backlog is None:
        return outcome
    outcome.waiting = wh.inputs_in_provider_batches(EMBED.name, embedder.model_id, WAITING)
    texts = {
        row["context_hash"]: row["context_content"]
        for row in pending
        if row["context_hash"] not in outcome.waiting and row["context_hash"] not in released
    }
    cached = wh.cached_embeddings(embedder.model_id, list(texts))
    backlog = {digest: text for digest, text in texts.items() if digest not in cached}
    if len(backlog) < max(min_backlog, 1):
        return outcome
    hashes = iter(backlog)
    while part := list(islice(hashes, MAX_REQUESTS)):
        if _submit(wh, api, embedder, {digest: backlog[digest] for digest in part}, outcome, now):
            outcome.submitted += len(part)
            outcome.waiting.update(part)
    return outcome


def _submit(
    wh: Warehouse, api: BatchAPI, embedder: OpenAIEmbedder, texts: Mapping[str, str], outcome: BatchOutcome,
    now: datetime,
) -> bool:
    """Record, upload, create, record the id (see the module's docstring); False when the provider refused (the
    texts go by plain requests)."""
    local_id = uuid.uuid4().hex
    wh.record_provider_batch(
        {"local_id": local_id, "stage": EMBED.name, "model": embedder.model_id, "endpoint": EMBEDDINGS_ENDPOINT,
         "status": PREPARING, "requests": len(texts), "results": 0, "created_at": now},
        {digest: digest for digest in texts},  # the custom_id is the text's hash: the input it stands for
    )
    try:
        file_id = api.upload(
            [request_line(digest, EMBEDDINGS_ENDPOINT, embedder.request_body([text])) for digest, text in texts.items()]
        )
        wh.update_provider_batch(local_id, input_file_id=file_id)
        fault_point(UPLOADED_FAULT, "after")
        state = api.create(file_id, EMBEDDINGS_ENDPOINT, local_id)
    except provider_failures() as error:
        wh.update_provider_batch(local_id, status=ABANDONED, error=f"not submitted: {error}", finished_at=now)
        outcome.errors.append(f"batch not submitted ({error}); its texts are embedded by plain requests")
        return False
    fault_point(CREATED_FAULT, "after")
    wh.update_provider_batch(local_id, batch_id=state.batch_id, status=state.status, submitted_at=now, checked_at=now)
    return True


def _poll(wh: Warehouse, api: BatchAPI, embedder: OpenAIEmbedder, outcome: BatchOutcome, now: datetime) -> set[str]:
    """Every waiting batch of the stage asked for its state; finished ones applied. The text hashes of finished
    batches that got no answer: the plain step embeds them now (sent again, they might fail again)."""
    released: set[str] = set()
    for batch in wh.provider_batches_in(EMBED.name, WAITING):
        try:
            state = _current_state(api, batch)
        except provider_failures() as error:  # the provider cannot be asked now: the next run asks again
            outcome.errors.append(f"batch {batch['batch_id'] or batch['local_id']}: status unknown ({error})")
            continue
        if state is None:  # its texts are free to go in a new batch
            wh.update_provider_batch(batch["local_id"], status=ABANDONED, error="never created", finished_at=now)
            continue
        if state.open:
            changed = (state.batch_id, state.status) != (batch["batch_id"], batch["status"])
            wh.update_provider_batch(
                batch["local_id"], visible=changed, batch_id=state.batch_id, status=state.status, checked_at=now
            )
            continue
        try:
            answered = _apply(wh, api, embedder, batch, state, outcome, now)
        except provider_failures() as error:
            outcome.errors.append(f"batch {state.batch_id}: results unreadable now ({error})")
            continue
        released |= set(wh.provider_batch_requests(batch["local_id"]).values()) - answered
    outcome.fell_back = len(released)
    return released


def _current_state(api: BatchAPI, batch: Mapping[str, str]) -> BatchState | None:
    """The provider's state of a recorded batch; for one still `preparing`, of the batch carrying its id, if any."""
    if batch["batch_id"]:
        return api.state(batch["batch_id"])
    return api.find(batch["local_id"])


def _apply(
    wh: Warehouse, api: BatchAPI, embedder: OpenAIEmbedder, batch: Mapping[str, str], state: BatchState,
    outcome: BatchOutcome, now: datetime,
) -> set[str]:
    """A finished batch's vectors into the embedding cache (texts some chunk still has); the hashes answered."""
    requests = wh.provider_batch_requests(batch["local_id"])
    replies = api.results(state.output_file_id) if state.output_file_id else {}
    vectors = {}
    for custom_id, body in replies.items():
        if custom_id in requests:
            try:
                vectors[requests[custom_id]] = embedder.vectors_from_reply(body, 1)[0]
            except provider_failures():  # a garbled line: its text goes by a plain request
                continue
    wanted = wh.chunk_context_hashes(list(vectors))
    outcome.stale += len(vectors) - len(wanted)
    wanted -= set(wh.cached_embeddings(batch["model"], list(wanted)))  # applied before a kill stopped the update
    rows = [
        {"model": batch["model"], "text_hash": digest, "embedding": [float(x) for x in vectors[digest]], "created_at": now}
        for digest in wanted
    ]
    with wh.transaction():
        wh.insert("embedding_cache", rows)
    completed = state.status == "completed"
    wh.update_provider_batch(
        batch["local_id"], batch_id=state.batch_id, status=APPLIED if completed else state.status,
        results=len(vectors), error=None if completed else state.error, checked_at=now, finished_at=now,
    )
    outcome.written += len(rows)
    return set(vectors)
