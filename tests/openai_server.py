"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests: scriptable replies, recorded requests.

Tests talk to it with the real `openai` client over real HTTP, so retries, status codes and malformed
bodies are exercised the way a remote server (OpenAI, Ollama, vLLM, LM Studio) would produce them.
Serves POST /v1/embeddings and POST /v1/chat/completions. Each endpoint has a queue of scripted
replies; when the queue is empty, embeddings are deterministic fake vectors (hashed tokens) and chat
completions answer with `default_chat_content`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import numpy as np

EMBEDDINGS = "/v1/embeddings"
CHAT = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP reply."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def error(cls, status: int, message: str = "scripted failure", retry_after: float | None = None) -> Reply:
        """An error reply shaped like OpenAI's: `{"error": {"message": ..., "type": ...}}`."""
        payload = {"error": {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error"}}
        headers = (("retry-after", str(retry_after)),) if retry_after is not None else ()
        return cls(status=status, body=json.dumps(payload).encode(), headers=headers)

    @classmethod
    def malformed_body(cls) -> Reply:
        """A 200 whose body is not JSON at all (a proxy's HTML page, a truncated stream)."""
        return cls(status=200, body=b"<html>upstream hiccup</html>", headers=(("content-type", "application/json"),))

    @classmethod
    def json(cls, payload: Any, status: int = 200) -> Reply:
        """Any JSON payload, for replies that are valid JSON but not what the API promises."""
        return cls(status=status, body=json.dumps(payload).encode())

    @classmethod
    def chat(cls, content: str | None, finish_reason: str = "stop", model: str = "fake-chat") -> Reply:
        """A well-formed chat completion whose message content is exactly `content` (valid JSON or not)."""
        return cls.json(chat_completion(content, finish_reason=finish_reason, model=model))


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received: tests assert on it (what was sent, and what never was)."""

    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes


def fake_embedding(text: str, dimensions: int) -> np.ndarray:
    """A deterministic unit vector: each lowercase word hashed into a signed bucket, so shared words mean similar vectors."""
    vector = np.zeros(dimensions, dtype=np.float64)
    for token in re.findall(r"\w+", text.lower()) or [""]:
        digest = hashlib.sha256(token.encode()).digest()
        bucket = int.from_bytes(digest[:8], "little") % dimensions
        vector[bucket] += 1.0 if digest[8] % 2 == 0 else -1.0
    if not vector.any():
        vector[0] = 1.0
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def chat_completion(content: str | None, *, finish_reason: str = "stop", model: str = "fake-chat") -> dict[str, Any]:
    """A chat.completion object as OpenAI returns it."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@dataclass
class OpenAICompatibleServer:
    """Starts on a free port of 127.0.0.1 in a daemon thread; use as a context manager."""

    native_dimensions: int = 1536
    default_chat_content: str = '{"ok": true}'
    reverse_embedding_order: bool = False
    latency_seconds: float = 0.0
    """Added to every reply: a remote API's round trip (benchmarks/scale_out.py), or overlap for tests."""
    peak_in_flight: int = 0
    """The most requests the server was answering at the same moment."""
    failing: dict[str, Reply] = field(default_factory=dict)
    """Endpoint -> the reply it gives to every request while set (a server that is down), after the queue."""
    requests: list[RecordedRequest] = field(default_factory=list)
    _queues: dict[str, deque[Reply]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: int = 0
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (ending in /v1) to give the client."""
        if self._httpd is None:
            raise RuntimeError("OpenAICompatibleServer is not running: use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def enqueue(self, path: str, *replies: Reply) -> None:
        """Script the next replies of one endpoint (EMBEDDINGS or CHAT), served in order before normal answers."""
        with self._lock:
            self._queues.setdefault(path, deque()).extend(replies)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """Every request received on one endpoint, in arrival order."""
        with self._lock:
            return [request for request in self.requests if request.path == path]

    def __enter__(self) -> OpenAICompatibleServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="openai-test-server", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _answer(self, request: RecordedRequest) -> Reply:
        """The scripted or normal reply, after the configured latency, counting the requests in flight."""
        with self._lock:
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            time.sleep(self.latency_seconds)
            return self._record_and_pop(request) or self._normal_reply(request.path, request.body)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _record_and_pop(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            queue = self._queues.get(request.path)
            return queue.popleft() if queue else self.failing.get(request.path)

    def _normal_reply(self, path: str, body: Any) -> Reply:
        if path == EMBEDDINGS:
            return Reply.json(self._embeddings_response(body))
        if path == CHAT:
            return Reply.chat(self.default_chat_content, model=body.get("model", "fake-chat"))
        return Reply.error(404, f"no route for {path}")

    def _embeddings_response(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dimensions = body.get("dimensions", self.native_dimensions)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = fake_embedding(text, dimensions)
            encoded: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode() if as_base64 else vector.tolist()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        if self.reverse_embedding_order:
            data.reverse()
        tokens = sum(len(text.split()) for text in texts)
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _handler_for(server: OpenAICompatibleServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            raw = self.rfile.read(int(self.headers.get("content-length", 0)))
            try:
                body = json.loads(raw)
            except json.JSONDecodeError:
                body = None
            request = RecordedRequest(path=self.path, headers={k.lower(): v for k, v in self.headers.items()}, body=body, raw=raw)
            self._send(server._answer(request))

        def _send(self, reply: Reply) -> None:
            payload = reply.body
            self.send_response(reply.status)
            headers = dict(reply.headers)
            headers.setdefault("content-type", "application/json")
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (signature of the base class)
            """Quiet: pytest output stays readable."""

    return Handler
