"""The chat model as core code sees it: one JSON-returning call, and the one error it may raise.

Core functions (topic tags, summaries) take any object with this shape, so they are tested with small real
implementations and never import a provider; the OpenAI-compatible implementation lives in `providers/`.
"""

from __future__ import annotations

from typing import Any, Protocol


class LLMError(RuntimeError):
    """The model gave no usable answer: the provider's own retries are spent, or the reply is malformed.

    Callers fall back to an offline method (keyword topics, extractive summaries) rather than fail the run.
    """


class AnswerDeferred(Exception):
    """The model answers later (the request went to a provider's Batch API): the caller leaves this piece of work
    undone, for a later run. Not an LLMError: nothing failed, and no fallback may take its place."""


class ChatModel(Protocol):
    """A chat model that answers with one JSON object."""

    model: str
    """Identifies the model in caches and provenance ("gpt-4o-mini", "llama3.1:8b"): a new model means new answers."""

    max_in_flight: int
    """How many requests it answers at once (callers may ask from that many threads; the model caps it)."""

    def complete_json(self, system: str, user: str) -> dict[str, Any]:
        """The model's reply to `user` under the `system` instructions, parsed as a JSON object.

        Raises LLMError when no valid JSON object could be obtained.
        """
        ...


def requests_at_once(llm: ChatModel) -> int:
    """How many threads may ask `llm` at once (a model that does not say answers one request at a time)."""
    return max(1, getattr(llm, "max_in_flight", 1))
