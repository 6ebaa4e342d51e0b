"""A provider's Batch API, in OpenAI's shape: upload a JSONL file of requests, create a batch, poll it, read results.

A batch costs about half of what the same plain requests cost and meets no rate limit, at the price of latency
(the provider answers within its completion window, 24 hours). Every call has the retries and error taxonomy of
plain requests (openai_compat), and a batch carries its creator's id in its metadata, so a process killed between
creating a batch and recording its id can find it again (`find`) instead of creating a second one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sessionmem_pipeline.providers.openai_compat import (
    MalformedResponseError,
    PauseGate,
    RetryPolicy,
    call_with_retries,
    reading_reply,
)

if TYPE_CHECKING:
    import openai

OPEN_STATUSES = ("validating", "in_progress", "finalizing", "cancelling")
"""The provider is still working on the batch."""
COMPLETION_WINDOW = "24h"
MAX_REQUESTS = 50_000
"""Request lines OpenAI accepts in one batch."""
OWNER_KEY = "sessionmem_batch"
"""The metadata key holding the local id of the batch's record."""
_T = TypeVar("_T")


@dataclass(frozen=True)
class BatchState:
    """What the provider says about one batch."""

    batch_id: str
    status: str
    output_file_id: str | None = None
    error_file_id: str | None = None
    error: str | None = None  # why the whole batch failed, when it did

    @property
    def open(self) -> bool:
        return self.status in OPEN_STATUSES


def request_line(custom_id: str, endpoint: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """One line of a batch's input file."""
    return {"custom_id": custom_id, "method": "POST", "url": endpoint, "body": dict(body)}


class BatchAPI:
    """The Batch API of the server an `openai.OpenAI` client talks to."""

    def __init__(self, client: openai.OpenAI, retry: RetryPolicy, gate: PauseGate) -> None:
        self._client, self._retry, self._gate = client, retry, gate

    def _call(self, call: Callable[[], _T]) -> _T:
        def read() -> _T:
            with reading_reply():
                return call()

        return call_with_retries(read, self._retry, gate=self._gate)

    def upload(self, lines: Sequence[Mapping[str, Any]]) -> str:
        """The request file, uploaded with purpose "batch": its file id."""
        content = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
        uploaded = self._call(lambda: self._client.files.create(file=("batch.jsonl", content), purpose="batch"))
        return uploaded.id

    def create(self, input_file_id: str, endpoint: str, local_id: str) -> BatchState:
        batch = self._call(
            lambda: self._client.batches.create(
                input_file_id=input_file_id,
                endpoint=endpoint,  # type: ignore[arg-type]
                completion_window=COMPLETION_WINDOW,
                metadata={OWNER_KEY: local_id},
            )
        )
        return _state(batch)

    def find(self, local_id: str) -> BatchState | None:
        """The batch created for this local id, if the provider has one (newest first, as it lists them)."""
        for batch in self._call(lambda: self._client.batches.list(limit=100)):
            if (batch.metadata or {}).get(OWNER_KEY) == local_id:
                return _state(batch)
        return None

    def state(self, batch_id: str) -> BatchState:
        return _state(self._call(lambda: self._client.batches.retrieve(batch_id)))

    def results(self, file_id: str) -> dict[str, dict[str, Any]]:
        """An output file's successful replies: custom_id -> response body (lines with an error are left out)."""
        text = self._call(lambda: self._client.files.content(file_id).text)
        answers = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                response = item.get("response") or {}
                if response.get("status_code") == 200 and isinstance(response.get("body"), dict):
                    answers[str(item["custom_id"])] = response["body"]
            except (ValueError, KeyError, AttributeError) as error:
                raise MalformedResponseError(f"unreadable batch output line: {error}") from error
        return answers


def _state(batch: Any) -> BatchState:
    errors = getattr(getattr(batch, "errors", None), "data", None) or []
    reason = "; ".join(str(getattr(e, "message", e)) for e in errors) or None
    return BatchState(batch.id, batch.status, batch.output_file_id, batch.error_file_id, reason)
