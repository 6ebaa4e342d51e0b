"""Providers: the embedding model and the chat model behind small interfaces.

Offline defaults need no network (the packaged MiniLM embedder; no chat model at all), and the
OpenAI-compatible implementations reach OpenAI, Ollama, vLLM or LM Studio through the `openai` package.
Build them from the configuration with `build_embedder` and `build_chat_model`.
"""

from sessionmem_pipeline.providers.embedders import (
    Embedder,
    EmbeddingError,
    EmbeddingOutcome,
    LocalMiniLMEmbedder,
    OpenAIEmbedder,
    build_embedder,
)
from sessionmem_pipeline.providers.llm import OpenAIChatModel, build_chat_model, parse_json_object
from sessionmem_pipeline.providers.openai_compat import ProviderConfigError

__all__ = [
    "Embedder",
    "EmbeddingError",
    "EmbeddingOutcome",
    "LocalMiniLMEmbedder",
    "OpenAIChatModel",
    "OpenAIEmbedder",
    "ProviderConfigError",
    "build_chat_model",
    "build_embedder",
    "parse_json_object",
]
