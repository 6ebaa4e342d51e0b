"""Shared pytest fixtures. Each block belongs to one area; add new fixtures in their own block."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# --- providers: a real OpenAI-compatible HTTP server on 127.0.0.1 (tests/openai_server.py) ---------------
from openai_server import OpenAICompatibleServer


@pytest.fixture
def openai_server() -> Iterator[OpenAICompatibleServer]:
    """A fresh server per test: empty reply queues, no recorded requests."""
    with OpenAICompatibleServer() as server:
        yield server
