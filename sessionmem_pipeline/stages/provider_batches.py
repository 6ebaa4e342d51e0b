"""Work sent to the provider's Batch API (`embedding.batch_api`, `llm.batch_api`), recorded in the warehouse.

Embeddings: when the chunks a run must embed hold at least `embedding.batch_min_backlog` texts that no cache has,
the embed stage sends them as one batch (or several, 50,000 texts each) and returns: their chunks stay without a
vector (search finds them by keyword meanwhile) and their sessions stay stale. A finished batch's vectors go into
the embedding cache, for the texts some chunk still has (the others' chunks changed meanwhile: their answers are
dropped), where the plain embed step takes them like any cached vector.

Summaries: the summarize stage asks the model through `BatchedChat`, which answers from finished batches and
defers every other request (the session waits, stale, for a later run); when at least `llm.batch_min_backlog`
requests were deferred they are sent as a batch, else the sessions are summarized by plain requests. A request is
known by the fingerprint of its body, so a session whose messages changed asks anew, and the old answer is unused.
A long session summarized in parts (map, then reduce) takes one batch per round.

Every later run of a stage first polls that stage's open batches. Requests a batch did not answer (it failed,
expired or was cancelled, or their line failed) go by plain requests in that run.

A batch's life, each step committed before the next one starts, so a run killed anywhere neither loses nor
duplicates a batch:
1. recorded as `preparing`, with each request's custom_id and the input fingerprint it stands for;
2. the request file uploaded and the batch created at the provider, carrying the record's id in its metadata;
3. the provider's batch id and status recorded.
A later run that finds a record still `preparing` (killed between 1 and 3) asks the provider for the batch carrying
its id: it adopts the batch when there is one, and records the batch `abandoned` (never created; its inputs are
free again) when there is none.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from typing import Any

from sessionmem_pipeline.config import Settings
from sessionmem_pipeline.core.llm_protocol import AnswerDeferred
from sessionmem_pipeline.providers.batches import MAX_REQUESTS, OPEN_STATUSES, BatchAPI, BatchState, request_line
from sessionmem_pipeline.providers.embedders import OpenAIEmbedder
from sessionmem_pipeline.providers.llm import OpenAIChatModel, parse_json_object, reply_text
from sessionmem_pipeline.providers.openai_compat import provider_failures
from sessionmem_pipeline.stages.registry import EMBED, SUMMARIZE, fault_point
from sessionmem_pipeline.warehouse import Warehouse

EMBEDDINGS_ENDPOINT = "/v1/embeddings"
CHAT_ENDPOINT = "/v1/chat/completions"
PREPARING = "preparing"
ABANDONED = "abandoned"
APPLIED = "applied"
"""A completed batch whose answers are kept (a failed, expired or cancelled one keeps the provider's status: what
answers it has are kept too)."""
WAITING = (PREPARING, *OPEN_STATUSES)
UPLOADED_FAULT = "provider_batch_upload"
"""Fault points (tests): `exit-after:provider_batch_upload` kills the run between the upload and the batch's
creation, `exit-after:provider_batch_create` once the provider created the batch, before its id is recorded."""
CREATED_FAULT = "provider_batch_create"


def batch_api_on(settings: Settings) -> bool:
    """Embeddings through the Batch API: remote embedders only (the local model has none)."""
    return settings["embedding.batch_api"] and settings.remote_embeddings


def chat_batch_api_on(settings: Settings) -> bool:
    """Summaries through the Batch API: only with a chat model."""
    return settings["llm.batch_api"] and settings.llm_enabled


@dataclass
class BatchOutcome:
    """What the Batch API did in one run of a stage."""

    submitted: int = 0  # requests sent in new batches
    written: int = 0  # answers kept from finished batches (those whose input is gone are dropped)
    waiting: set[str] = field(default_factory=set)  # input fingerprints in open batches: the plain step leaves them
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BatchedStage:
    """What one stage sends to the Batch API, and how it keeps the answers."""

    stage: str
    endpoint: str
    model: str
    api: BatchAPI
    keep: Callable[[str, Mapping[str, dict]], tuple[set[str], int]]
    """(batch's local id, reply bodies by input fingerprint) -> the inputs answered usably, how many answers were
    kept (the others' input is gone)."""


def poll(wh: Warehouse, work: BatchedStage, outcome: BatchOutcome, now: datetime) -> set[str]:
    """Every waiting batch of the stage asked for its state; finished ones kept. The input fingerprints of finished
    batches that got no answer: the plain step takes them now (sent again, they might fail again)."""
    released: set[str] = set()
    for batch in wh.provider_batches_in(work.stage, WAITING):
        try:
            state = _current_state(work.api, batch)
        except provider_failures() as error:  # the provider cannot be asked now: the next run asks again
            outcome.errors.append(f"batch {batch['batch_id'] or batch['local_id']}: status unknown ({error})")
            continue
        if state is None:  # its inputs are free to go in a new batch
            wh.update_provider_batch(batch["local_id"], status=ABANDONED, error="never created", finished_at=now)
            continue
        if state.open:
            changed = (state.batch_id, state.status) != (batch["batch_id"], batch["status"])
            wh.update_provider_batch(
                batch["local_id"], visible=changed, batch_id=state.batch_id, status=state.status, checked_at=now
            )
            continue
        requests = wh.provider_batch_requests(batch["local_id"])
        try:
            replies = work.api.results(state.output_file_id) if state.output_file_id else {}
        except provider_failures() as error:
            outcome.errors.append(f"batch {state.batch_id}: results unreadable now ({error})")
            continue
        answered, kept = work.keep(
            batch["local_id"], {requests[c]: body for c, body in replies.items() if c in requests}
        )
        outcome.written += kept
        completed = state.status == "completed"
        wh.update_provider_batch(
            batch["local_id"], batch_id=state.batch_id, status=APPLIED if completed else state.status,
            results=len(answered), error=None if completed else state.error, checked_at=now, finished_at=now,
        )
        released |= set(requests.values()) - answered
    return released


def submit(wh: Warehouse, work: BatchedStage, bodies: Mapping[str, dict], outcome: BatchOutcome, now: datetime) -> None:
    """Request bodies by input fingerprint, in batches of at most MAX_REQUESTS; those sent join `waiting`."""
    fingerprints = iter(bodies)
    while part := list(islice(fingerprints, MAX_REQUESTS)):
        if _submit(wh, work, {fp: bodies[fp] for fp in part}, outcome, now):
            outcome.submitted += len(part)
            outcome.waiting.update(part)


def _submit(wh: Warehouse, work: BatchedStage, bodies: Mapping[str, dict], outcome: BatchOutcome, now: datetime) -> bool:
    """Record, upload, create, record the id (see the module's docstring); False when the provider refused (the
    requests go plainly)."""
    local_id = uuid.uuid4().hex
    wh.record_provider_batch(
        {"local_id": local_id, "stage": work.stage, "model": work.model, "endpoint": work.endpoint,
         "status": PREPARING, "requests": len(bodies), "results": 0, "created_at": now},
        {fp: fp for fp in bodies},  # the custom_id is the input's fingerprint: what the request stands for
    )
    try:
        file_id = work.api.upload([request_line(fp, work.endpoint, body) for fp, body in bodies.items()])
        wh.update_provider_batch(local_id, input_file_id=file_id)
        fault_point(UPLOADED_FAULT, "after")
        state = work.api.create(file_id, work.endpoint, local_id)
    except provider_failures() as error:
        wh.update_provider_batch(local_id, status=ABANDONED, error=f"not submitted: {error}", finished_at=now)
        outcome.errors.append(f"{work.stage} batch not submitted ({error}); its requests are sent plainly")
        return False
    fault_point(CREATED_FAULT, "after")
    wh.update_provider_batch(local_id, batch_id=state.batch_id, status=state.status, submitted_at=now, checked_at=now)
    return True


def _current_state(api: BatchAPI, batch: Mapping[str, str]) -> BatchState | None:
    """The provider's state of a recorded batch; for one still `preparing`, of the batch carrying its id, if any."""
    if batch["batch_id"]:
        return api.state(batch["batch_id"])
    return api.find(batch["local_id"])


# ---- embeddings ------------------------------------------------------------------------------------------------


def batch_backlog(
    wh: Warehouse, pending: Sequence[Mapping[str, str]], embedder: OpenAIEmbedder, min_backlog: int | None,
    now: datetime,
) -> BatchOutcome:
    """Poll the embed stage's open batches, then send `pending` chunks' uncached texts as a batch when there are at
    least `min_backlog`; the outcome's `waiting` hashes are those the plain step must leave to the batches. With
    `min_backlog` None (the Batch API was switched off) open batches are polled to their end, and nothing waits."""
    outcome = BatchOutcome()

    def keep(local_id: str, replies: Mapping[str, dict]) -> tuple[set[str], int]:
        return _keep_vectors(wh, embedder, replies, now)

    work = BatchedStage(EMBED.name, EMBEDDINGS_ENDPOINT, embedder.model_id, embedder.batch_api(), keep)
    released = poll(wh, work, outcome, now)
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
    if len(backlog) >= max(min_backlog, 1):
        submit(wh, work, {digest: embedder.request_body([text]) for digest, text in backlog.items()}, outcome, now)
    return outcome


def _keep_vectors(
    wh: Warehouse, embedder: OpenAIEmbedder, replies: Mapping[str, dict], now: datetime
) -> tuple[set[str], int]:
    """Vectors of the replies into the embedding cache, for texts some chunk still has."""
    vectors = {}
    for digest, body in replies.items():
        try:
            vectors[digest] = embedder.vectors_from_reply(body, 1)[0]
        except provider_failures():  # a garbled line: its text goes by a plain request
            continue
    wanted = wh.chunk_context_hashes(list(vectors))
    kept = len(wanted)
    wanted -= set(wh.cached_embeddings(embedder.model_id, list(wanted)))  # kept before a kill stopped the update
    rows = [
        {"model": embedder.model_id, "text_hash": digest, "embedding": [float(x) for x in vectors[digest]],
         "created_at": now}
        for digest in wanted
    ]
    with wh.transaction():
        wh.insert("embedding_cache", rows)
    return set(vectors), kept


# ---- chat (summaries) ------------------------------------------------------------------------------------------


def request_fingerprint(body: Mapping[str, Any]) -> str:
    """What a chat request is known by: its whole body (model, messages, options)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class BatchedChat:
    """A `ChatModel` over finished batches: a request a batch answered gets that answer; one whose batch ended
    without an answer goes plainly; any other raises AnswerDeferred and, while `collecting`, is kept to be sent
    (`asked`; unless a batch already waits for it), else goes plainly too."""

    def __init__(
        self, wh: Warehouse, real: OpenAIChatModel, waiting: set[str], released: set[str],
        send: Callable[[Mapping[str, dict[str, Any]]], None],
    ) -> None:
        self.model = real.model
        self.max_in_flight = 1
        self.collecting = True
        self.asked: dict[str, dict[str, Any]] = {}
        self.used: set[str] = set()  # answered requests: their answers are cleared once the summaries are recorded
        self._wh, self._real, self._waiting, self._released, self._send = wh, real, waiting, released, send

    def complete_json(self, system: str, user: str) -> dict[str, Any]:
        body = self._real.request_body(system, user)
        fingerprint = request_fingerprint(body)
        answer = self._wh.batch_answer(SUMMARIZE.name, self.model, fingerprint)
        if answer is not None:
            self.used.add(fingerprint)
            try:
                return parse_json_object(answer)
            except ValueError:  # the plain path asks the model to fix its reply
                return self._real.complete_json(system, user)
        if fingerprint in self._released or not (self.collecting or fingerprint in self._waiting):
            return self._real.complete_json(system, user)
        if fingerprint not in self._waiting:
            self.asked[fingerprint] = body
        raise AnswerDeferred(fingerprint)

    def send(self) -> None:
        """The requests asked while collecting, as a batch."""
        self._send(self.asked)

    def unsent(self) -> bool:
        """Whether requests were asked that no batch waits for (not sent, or the provider refused the batch)."""
        return any(fingerprint not in self._waiting for fingerprint in self.asked)


def batched_chat(
    wh: Warehouse, llm: OpenAIChatModel, outcome: BatchOutcome, now: datetime, *, wait: bool = True
) -> BatchedChat:
    """The summarize stage's open batches polled (their answers kept), and a chat model answering from them; not
    `wait`ing (the Batch API was switched off), it sends every request it has no answer for plainly."""

    def keep(local_id: str, replies: Mapping[str, dict]) -> tuple[set[str], int]:
        answers = {fp: text for fp, body in replies.items() if (text := reply_text(body)) is not None}
        wh.store_batch_answers(local_id, answers)  # the custom_id is the input fingerprint
        return set(answers), len(answers)

    work = BatchedStage(SUMMARIZE.name, CHAT_ENDPOINT, llm.model, llm.batch_api(), keep)
    released = poll(wh, work, outcome, now)
    outcome.waiting = wh.inputs_in_provider_batches(SUMMARIZE.name, llm.model, WAITING) if wait else set()
    chat = BatchedChat(wh, llm, outcome.waiting, released, lambda asked: submit(wh, work, asked, outcome, now))
    chat.collecting = wait
    return chat
