"""Embedders: the packaged MiniLM model offline, and the OpenAI path against a real local HTTP server."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from openai_server import EMBEDDINGS, OpenAICompatibleServer, Reply, fake_embedding

from sessionmem_pipeline.providers.embedders import (
    MINILM_MAX_TOKENS,
    EmbeddingError,
    LocalMiniLMEmbedder,
    OpenAIEmbedder,
    _counting_tokenizer,
    build_embedder,
    length_sorted_batches,
)
from sessionmem_pipeline.providers.openai_compat import ProviderConfigError

FAST = {"backoff_seconds": 0.001}


# --- local MiniLM --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLMEmbedder:
    return LocalMiniLMEmbedder()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_minilm_returns_unit_float32_rows_of_384(minilm: LocalMiniLMEmbedder) -> None:
    vectors = minilm.embed(["Fix the flaky test in test_sync.py", "We decided to use DuckDB.", "ok"])

    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (minilm.model_id, minilm.dimensions, minilm.max_input_tokens) == ("local:all-MiniLM-L6-v2-int8", 384, 256)


def test_minilm_is_deterministic(minilm: LocalMiniLMEmbedder) -> None:
    texts = ["Refactor the parser into one function per format.", "Run pytest again."]

    np.testing.assert_array_equal(minilm.embed(texts), minilm.embed(texts))


@pytest.mark.parametrize(
    ("anchor", "related", "unrelated"),
    [
        ("How do I reset my password?", "Steps to recover account access", "The weather in Paris is sunny"),
        (
            "pytest fails with ModuleNotFoundError: No module named 'sessionmem'",
            "The test run cannot import the package; install it in editable mode.",
            "Let's grab lunch at the Thai place around noon.",
        ),
        (
            "We decided to store embeddings in DuckDB with an HNSW index.",
            "Vector search uses the vss extension's HNSW index in the warehouse.",
            "My sister's birthday party is on Saturday.",
        ),
    ],
)
def test_minilm_ranks_related_text_clearly_above_unrelated(
    minilm: LocalMiniLMEmbedder, anchor: str, related: str, unrelated: str
) -> None:
    a, r, u = minilm.embed([anchor, related, unrelated])

    assert cosine(a, r) > cosine(a, u) + 0.25


def test_minilm_embeds_the_empty_string_and_the_empty_list(minilm: LocalMiniLMEmbedder) -> None:
    (vector,) = minilm.embed([""])

    assert np.isfinite(vector).all() and np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_cuts_a_long_text_at_its_window_instead_of_failing(minilm: LocalMiniLMEmbedder) -> None:
    words = [f"token{index % 50}" for index in range(4000)]
    long_text = " ".join(words)
    prefix = " ".join(words[:400])
    while minilm.count_model_tokens(prefix) > MINILM_MAX_TOKENS:
        prefix = prefix.rsplit(" ", 1)[0]

    long_vector, prefix_vector = minilm.embed([long_text, prefix])

    assert minilm.count_model_tokens(long_text) > 10 * MINILM_MAX_TOKENS
    assert cosine(long_vector, prefix_vector) > 0.99


def test_minilm_keeps_input_order_and_batching_does_not_change_vectors(minilm: LocalMiniLMEmbedder) -> None:
    texts = [
        "A long exchange about configuring the warehouse, the HNSW index and the FTS index. " * 6,
        "short",
        "",
        "How should the summary sensor decide that a session is idle?",
        "Edited src/app.py: replaced x = 1 with x = 2.",
    ]
    one_by_one = np.stack([minilm.embed([text])[0] for text in texts])

    for embedder in (minilm, LocalMiniLMEmbedder(batch_size=2, max_batch_tokens=None)):
        np.testing.assert_allclose(embedder.embed(texts), one_by_one, atol=1e-5)
    outcome = minilm.embed_with_failures(texts)
    assert outcome.failures == {}
    np.testing.assert_allclose(outcome.vectors, one_by_one, atol=1e-5)


def test_minilm_counts_word_pieces_with_cls_and_sep(minilm: LocalMiniLMEmbedder) -> None:
    assert minilm.count_model_tokens("Hello world") == 4
    assert minilm.count_model_tokens("") == 2


def test_minilm_counts_a_text_as_encoding_it_whole_does(minilm: LocalMiniLMEmbedder) -> None:
    """The count is summed over cached words; control characters, other whitespace, accents, CJK and runs
    longer than a word piece's limit must not make the sum differ from encoding the text at once."""
    alphabet = "ab cdé\u0301\t\n\r\x0b\x0c\x85\xa0\u2028\u3000検索😀İ.,!?\x00\ufffd\x1f-_/\\'\"ÀÉß\u200b\ufeffxxxx"
    generator = np.random.default_rng(7)
    texts = ["".join(generator.choice(list(alphabet), size=int(generator.integers(0, 60)))) for _ in range(3000)]
    texts += ["a" * 150 + " " + "b" * 99 + " " + "c" * 101, ("abc" * 30 + ".") * 3, "Step w12 (retry=3)\n\n  done."]

    whole = [len(encoding.ids) for encoding in _counting_tokenizer().encode_batch(texts)]

    assert [minilm.count_model_tokens(text) for text in texts] == whole


def test_embed_rejects_a_bare_string(minilm: LocalMiniLMEmbedder) -> None:
    with pytest.raises(TypeError, match="wrap it in a list"):
        minilm.embed("a single string")


@pytest.mark.parametrize(
    ("lengths", "max_texts", "max_tokens", "expected"),
    [
        ([], 4, 100, []),
        ([5, 3, 9, 1], 4, None, [[3, 1, 0, 2]]),
        ([5, 3, 9, 1], 2, None, [[3, 1], [0, 2]]),
        ([50, 50, 50, 10, 10], 8, 100, [[3, 4], [0, 1], [2]]),
        ([300, 20], 8, 100, [[1], [0]]),
    ],
)
def test_length_sorted_batches_groups_similar_lengths_within_the_budget(
    lengths: list[int], max_texts: int, max_tokens: int | None, expected: list[list[int]]
) -> None:
    assert length_sorted_batches(lengths, max_texts, max_tokens) == expected


# --- OpenAI-compatible server ----------------------------------------------------------------------------


def test_openai_embeds_with_requested_dimensions_and_normalizes(openai_server: OpenAICompatibleServer) -> None:
    texts = ["refactor the parser", "DuckDB HNSW index"]
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, api_key="sk-test", dimensions=256, **FAST)

    vectors = embedder.embed(texts)

    (request,) = openai_server.requests_to(EMBEDDINGS)
    assert request.body["model"] == "text-embedding-3-small"
    assert request.body["dimensions"] == 256
    assert request.body["input"] == texts
    assert request.headers["authorization"] == "Bearer sk-test"
    np.testing.assert_allclose(vectors, np.stack([fake_embedding(text, 256) for text in texts]), atol=1e-6)
    assert embedder.model_id == "openai:text-embedding-3-small@256"


def test_openai_sends_batches_of_batch_size_and_keeps_order(openai_server: OpenAICompatibleServer) -> None:
    openai_server.reverse_embedding_order = True
    texts = [f"message number {index}" for index in range(5)]
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=64, batch_size=2, **FAST)

    vectors = embedder.embed(texts)

    assert [request.body["input"] for request in openai_server.requests_to(EMBEDDINGS)] == [
        texts[0:2],
        texts[2:4],
        texts[4:5],
    ]
    np.testing.assert_allclose(vectors, np.stack([fake_embedding(text, 64) for text in texts]), atol=1e-6)


def test_openai_keeps_up_to_max_in_flight_requests_open_and_returns_the_serial_result(
    openai_server: OpenAICompatibleServer,
) -> None:
    openai_server.latency_seconds = 0.2  # long enough that requests sent together overlap at the server
    texts = [f"message number {index}" for index in range(24)]
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=32, batch_size=2, max_in_flight=4, **FAST)

    vectors = embedder.embed(texts)

    assert 2 <= openai_server.peak_in_flight <= 4
    assert sorted(tuple(r.body["input"]) for r in openai_server.requests_to(EMBEDDINGS)) == sorted(
        tuple(texts[start : start + 2]) for start in range(0, 24, 2)
    )
    np.testing.assert_allclose(vectors, np.stack([fake_embedding(text, 32) for text in texts]), atol=1e-6)


@pytest.mark.parametrize("max_in_flight", [1, 3])
def test_openai_sends_each_batch_once_its_texts_came_and_returns_the_whole_list_result(
    openai_server: OpenAICompatibleServer, max_in_flight: int
) -> None:
    texts = [f"message number {index}" for index in range(7)]
    embedder = OpenAIEmbedder(
        base_url=openai_server.base_url, dimensions=32, batch_size=2, max_in_flight=max_in_flight, **FAST
    )
    sent_before_the_rest: list[int] = []

    def producer():  # the rest of the texts come only once the first batch has reached the server
        yield from texts[:2]
        deadline = time.monotonic() + 10
        while not openai_server.requests_to(EMBEDDINGS) and time.monotonic() < deadline:
            time.sleep(0.01)
        sent_before_the_rest.append(len(openai_server.requests_to(EMBEDDINGS)))
        yield from texts[2:]

    outcome = embedder.embed_as_they_come(producer())

    assert sent_before_the_rest == [1]
    assert sorted(tuple(r.body["input"]) for r in openai_server.requests_to(EMBEDDINGS)) == sorted(
        tuple(texts[start : start + 2]) for start in range(0, 7, 2)
    )
    assert not outcome.failures
    np.testing.assert_allclose(outcome.vectors, embedder.embed(texts), atol=1e-6)


def test_openai_outage_in_a_stream_of_texts_stops_sending(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(EMBEDDINGS, *[Reply.error(503)] * 100)
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=16, batch_size=1, **FAST)

    outcome = embedder.embed_as_they_come(f"text {index}" for index in range(40))

    assert set(outcome.failures) == set(range(40))
    assert len(openai_server.requests_to(EMBEDDINGS)) < 40 * 3  # batches after the outage was seen were never sent


def test_openai_stream_whose_producer_fails_sends_no_batch_not_yet_sent(openai_server: OpenAICompatibleServer) -> None:
    openai_server.latency_seconds = 0.2  # the first batches are still in flight when the producer fails
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=16, batch_size=1, max_in_flight=2, **FAST)

    def producer():  # twenty batches queued at once, then the sessions' compute fails
        yield from (f"text {index}" for index in range(20))
        raise RuntimeError("chunking failed")

    with pytest.raises(RuntimeError, match="chunking failed"):
        embedder.embed_as_they_come(producer())

    assert len(openai_server.requests_to(EMBEDDINGS)) <= 2  # those in flight end; the queued ones are dropped


def test_openai_retry_after_pauses_every_request_in_flight(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(EMBEDDINGS, Reply.error(429, "slow down", retry_after=0.5))
    texts = [f"message number {index}" for index in range(8)]
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=16, batch_size=1, max_in_flight=4, **FAST)

    vectors = embedder.embed(texts)

    assert len(openai_server.requests_to(EMBEDDINGS)) == 9  # the one told to wait was sent again
    np.testing.assert_allclose(vectors, np.stack([fake_embedding(text, 16) for text in texts]), atol=1e-6)


def test_openai_concurrent_outage_stops_sending_and_flags_every_text(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(EMBEDDINGS, *[Reply.error(503)] * 100)
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=16, batch_size=1, max_in_flight=2, **FAST)

    outcome = embedder.embed_with_failures([f"text {index}" for index in range(40)])

    assert set(outcome.failures) == set(range(40))
    assert len(openai_server.requests_to(EMBEDDINGS)) < 40 * 3  # batches after the outage was seen were never sent


def test_openai_compatible_server_needs_no_key_and_gets_no_dimensions_parameter(
    openai_server: OpenAICompatibleServer,
) -> None:
    openai_server.native_dimensions = 768
    embedder = build_embedder("openai", model="nomic-embed-text", base_url=openai_server.base_url, dimensions=768)

    vectors = embedder.embed(["hello"])

    (request,) = openai_server.requests_to(EMBEDDINGS)
    assert vectors.shape == (1, 768)
    assert "dimensions" not in request.body
    assert request.headers["authorization"] == "Bearer not-needed"
    assert embedder.model_id == "openai:nomic-embed-text@768"


def test_openai_ignores_openai_environment_variables(
    openai_server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")

    OpenAIEmbedder(base_url=openai_server.base_url, dimensions=8, **FAST).embed(["x"])

    (request,) = openai_server.requests_to(EMBEDDINGS)
    assert request.headers["authorization"] == "Bearer not-needed"


@pytest.mark.parametrize(
    "first_reply",
    [Reply.error(429, "Rate limit reached"), Reply.error(503), Reply.malformed_body(), Reply.json({"data": []})],
    ids=["429", "503", "non-json-body", "no-data"],
)
def test_openai_retries_a_transient_failure(openai_server: OpenAICompatibleServer, first_reply: Reply) -> None:
    openai_server.enqueue(EMBEDDINGS, first_reply)
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=16, **FAST)

    vectors = embedder.embed(["retry me"])

    assert len(openai_server.requests_to(EMBEDDINGS)) == 2
    np.testing.assert_allclose(vectors[0], fake_embedding("retry me", 16), atol=1e-6)


def test_openai_batch_failing_three_times_raises_embedding_error_with_its_texts(
    openai_server: OpenAICompatibleServer,
) -> None:
    openai_server.enqueue(EMBEDDINGS, *[Reply.error(500, "boom")] * 3)
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=16, **FAST)

    with pytest.raises(EmbeddingError, match="HTTP 500") as raised:
        embedder.embed(["first", "second"])

    assert raised.value.failed_texts == ("first", "second")
    assert len(openai_server.requests_to(EMBEDDINGS)) == 3


def test_openai_failed_batch_is_isolated_and_the_others_are_embedded(openai_server: OpenAICompatibleServer) -> None:
    texts = ["a one", "b two", "c three", "d four", "e five"]
    openai_server.enqueue(EMBEDDINGS, Reply.json(_embeddings_for(texts[0:2], 16)), *[Reply.error(502)] * 3)
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=16, batch_size=2, **FAST)

    outcome = embedder.embed_with_failures(texts)

    assert sorted(outcome.failures) == [2, 3]
    assert "HTTP 502" in outcome.failures[2]
    assert outcome.succeeded == [0, 1, 4]
    assert outcome.vector(2) is None
    np.testing.assert_allclose(outcome.vectors[4], fake_embedding("e five", 16), atol=1e-6)
    assert len(openai_server.requests_to(EMBEDDINGS)) == 1 + 3 + 1


def test_openai_stops_sending_after_consecutive_failed_batches(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(EMBEDDINGS, *[Reply.error(500)] * 6)
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=16, batch_size=2, **FAST)

    outcome = embedder.embed_with_failures([f"text {index}" for index in range(8)])

    assert sorted(outcome.failures) == list(range(8))
    assert outcome.failures[7].startswith("not sent after 2 failed batches")
    assert len(openai_server.requests_to(EMBEDDINGS)) == 6


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply.error(401, "Incorrect API key provided"), "rejected the API key"),
        (Reply.error(404, "model not found"), "check embedding.model and embedding.base_url"),
    ],
    ids=["401", "404"],
)
def test_openai_rejected_key_or_model_raises_at_once(
    openai_server: OpenAICompatibleServer, reply: Reply, message: str
) -> None:
    openai_server.enqueue(EMBEDDINGS, reply)
    embedder = OpenAIEmbedder(base_url=openai_server.base_url, dimensions=16, **FAST)

    with pytest.raises(ProviderConfigError, match=message):
        embedder.embed_with_failures(["a", "b"])

    assert len(openai_server.requests_to(EMBEDDINGS)) == 1


def test_openai_vectors_of_another_size_than_configured_raise_at_once(openai_server: OpenAICompatibleServer) -> None:
    openai_server.native_dimensions = 32
    embedder = OpenAIEmbedder("bge-small", base_url=openai_server.base_url, dimensions=16, **FAST)

    with pytest.raises(ProviderConfigError, match="set embedding.dimensions = 32"):
        embedder.embed_with_failures(["a", "b"])


def test_openai_sends_a_space_for_an_empty_text(openai_server: OpenAICompatibleServer) -> None:
    OpenAIEmbedder(base_url=openai_server.base_url, dimensions=8, **FAST).embed(["", "x"])

    (request,) = openai_server.requests_to(EMBEDDINGS)
    assert request.body["input"] == [" ", "x"]


# --- configuration -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"provider": "openai"}, "needs an API key"),
        ({"provider": "openai", "model": "nomic-embed-text", "base_url": "http://localhost:11434/v1"}, "dimensions is required"),
        ({"provider": "openai", "model": "text-embedding-ada-002", "api_key": "sk", "dimensions": 512}, "always returns 1536"),
        ({"provider": "openai", "api_key": "sk", "dimensions": 4096}, "at most 1536"),
        ({"provider": "openai", "base_url": "localhost:11434/v1", "dimensions": 8, "model": "m"}, "http"),
        ({"provider": "local", "model": "bge-small-en"}, "not available offline"),
        ({"provider": "local", "dimensions": 768}, "returns 384"),
        ({"provider": "sentence-transformers"}, "must be 'local' or 'openai'"),
    ],
)
def test_build_embedder_explains_configuration_errors(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ProviderConfigError, match=message):
        build_embedder(**arguments)  # type: ignore[arg-type]


def test_build_embedder_local_ignores_an_api_key() -> None:
    embedder = build_embedder("local", model="all-MiniLM-L6-v2", api_key="sk-should-not-matter", batch_size=16)

    assert isinstance(embedder, LocalMiniLMEmbedder)
    assert embedder.batch_size == 16


def test_build_embedder_openai_defaults() -> None:
    embedder = build_embedder("openai", api_key="sk-test")

    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.model_id, embedder.dimensions, embedder.max_input_tokens, embedder.batch_size) == (
        "openai:text-embedding-3-small",
        1536,
        8191,
        128,
    )
    assert embedder.count_model_tokens("hello world") == 2


def _embeddings_for(texts: list[str], dimensions: int) -> dict[str, object]:
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": index, "embedding": fake_embedding(text, dimensions).tolist()}
            for index, text in enumerate(texts)
        ],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }


def test_the_model_file_is_hashed_again_only_when_its_size_or_mtime_changes(tmp_path: Path, monkeypatch) -> None:
    from sessionmem_pipeline.providers import embedders

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = tmp_path / "model.onnx"
    model.write_bytes(b"weights")
    good = hashlib.sha256(b"weights").hexdigest()
    assert embedders._verified_digest(model, good) == good
    assert (tmp_path / "cache" / "sessionmem" / "model-digest.json").is_file()
    model.write_bytes(b"damaged weights")
    assert embedders._verified_digest(model, good) == hashlib.sha256(b"damaged weights").hexdigest()


def test_a_remote_embedder_imports_openai_only_for_its_first_request(tmp_path: Path) -> None:
    """Every writer step computes the stage keys, which need the embedder's identity only: that must not cost the
    `openai` import (~0.6 s of CPU per process). A wrong setting still fails when the embedder is built."""
    script = (
        "import sys\n"
        "from sessionmem_pipeline.providers.embedders import OpenAIEmbedder\n"
        "from sessionmem_pipeline.providers.openai_compat import ProviderConfigError\n"
        "embedder = OpenAIEmbedder(base_url='http://127.0.0.1:9/v1', dimensions=16)\n"
        "print(embedder.model_id, 'openai' in sys.modules)\n"
        "try:\n"
        "    OpenAIEmbedder(base_url='ftp://nowhere', dimensions=16)\n"
        "except ProviderConfigError:\n"
        "    print('refused at once')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.stdout.split("\n")[:2] == ["openai:text-embedding-3-small@16 False", "refused at once"]
