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
    "chat_model_from_settings",
    "embedder_from_settings",
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


def embedder_from_settings(settings) -> Embedder:
    """The embedder the loaded configuration (`sessionmem_pipeline.config.Settings`) selects."""
    return build_embedder(
        settings["embedding.provider"],
        settings["embedding.model"],
        settings["embedding.base_url"],
        settings["embedding.dimensions"] or None,
        settings["embedding.api_key"],
        settings["embedding.batch_size"],
        settings["embedding.max_in_flight"],
    )


def chat_model_from_settings(settings):
    """The chat model the configuration selects, or None when `llm.provider` is "none"."""
    return build_chat_model(
        settings["llm.provider"],
        settings["llm.model"],
        settings["llm.base_url"],
        settings["llm.api_key"],
        max_in_flight=settings["llm.max_in_flight"],
    )
