"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests: scriptable replies, recorded requests.

Tests talk to it with the real `openai` client over real HTTP, so retries, status codes and malformed
bodies are exercised the way a remote server (OpenAI, Ollama, vLLM, LM Studio) would produce them.
Serves POST /v1/embeddings and POST /v1/chat/completions. Each endpoint has a queue of scripted
replies; when the queue is empty, embeddings are deterministic fake vectors (hashed tokens) and chat
completions answer with `default_chat_content`. The Batch API too: POST /v1/files (multipart, purpose=batch),
POST /v1/batches, GET /v1/batches (list) and /v1/batches/{id}, GET /v1/files/{id}/content; a batch stays
"validating" until the test settles it (`settle_batches`), which answers each request line as the endpoint would.
"""

from __future__ import annotations

import base64
import email.parser
import hashlib
import itertools
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
FILES = "/v1/files"
BATCHES = "/v1/batches"
OPEN_BATCH_STATUSES = ("validating", "in_progress", "finalizing")


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
    files: dict[str, bytes] = field(default_factory=dict)
    """Uploaded and result files by id (the Batch API)."""
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Batch objects by id, as GET /v1/batches/{id} returns them."""
    _ids: Any = field(default_factory=itertools.count)
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

    def settle_batches(self, status: str = "completed", *, answered: int | None = None) -> None:
        """Every open batch ends with `status`. Its first `answered` requests (all when None) get a result line in
        the output file, as the endpoint would answer them; the rest an error line ("expired" keeps what finished,
        as OpenAI does; "failed" and "cancelled" answer nothing unless `answered` says so)."""
        with self._lock:
            for batch in self.batches.values():
                if batch["status"] not in OPEN_BATCH_STATUSES:
                    continue
                lines = [json.loads(line) for line in self.files[batch["input_file_id"]].splitlines() if line.strip()]
                done = len(lines) if answered is None and status == "completed" else answered or 0
                outputs, errors = [], []
                for position, line in enumerate(lines):
                    if position < done:
                        reply = self._normal_reply(line["url"], line["body"])
                        response = {"status_code": reply.status, "request_id": f"req_{position}", "body": json.loads(reply.body)}
                        outputs.append({"id": f"out_{position}", "custom_id": line["custom_id"], "response": response, "error": None})
                    else:
                        error = {"code": "batch_expired", "message": f"batch {status}"}
                        errors.append({"id": f"err_{position}", "custom_id": line["custom_id"], "response": None, "error": error})
                batch["status"] = status
                batch["request_counts"] = {"total": len(lines), "completed": len(outputs), "failed": len(errors)}
                if outputs:
                    batch["output_file_id"] = self._store_file(outputs)
                if errors:
                    batch["error_file_id"] = self._store_file(errors)

    def _store_file(self, lines: list[dict[str, Any]]) -> str:
        file_id = f"file-{next(self._ids)}"
        self.files[file_id] = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return file_id

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
        if path.startswith((FILES, BATCHES)):
            with self._lock:
                return self._batch_api_reply(path, body)
        if path == EMBEDDINGS:
            return Reply.json(self._embeddings_response(body))
        if path == CHAT:
            return Reply.chat(self.default_chat_content, model=body.get("model", "fake-chat"))
        return Reply.error(404, f"no route for {path}")

    def _batch_api_reply(self, path: str, body: Any) -> Reply:
        """The Batch API's routes (called under the lock): `body` is the parsed upload of POST /v1/files."""
        if path == FILES:
            file_id = f"file-{next(self._ids)}"
            self.files[file_id] = body["file"]
            return Reply.json({"id": file_id, "object": "file", "bytes": len(body["file"]), "created_at": 1_700_000_000,
                               "filename": "batch.jsonl", "purpose": body["purpose"], "status": "processed"})
        if path == BATCHES and isinstance(body, dict):
            if body.get("input_file_id") not in self.files:
                return Reply.error(400, "no such input file")
            batch_id = f"batch_{next(self._ids)}"
            self.batches[batch_id] = {
                "id": batch_id, "object": "batch", "endpoint": body["endpoint"], "input_file_id": body["input_file_id"],
                "completion_window": body["completion_window"], "status": "validating", "created_at": 1_700_000_000,
                "metadata": body.get("metadata"), "output_file_id": None, "error_file_id": None,
            }
            return Reply.json(self.batches[batch_id])
        if path.split("?")[0] == BATCHES:
            listed = list(reversed(self.batches.values()))  # newest first, as OpenAI lists them
            return Reply.json({"object": "list", "data": listed, "has_more": False})
        if (found := re.fullmatch(BATCHES + r"/([\w-]+)", path)) and found[1] in self.batches:
            return Reply.json(self.batches[found[1]])
        if (found := re.fullmatch(FILES + r"/([\w-]+)/content", path)) and found[1] in self.files:
            return Reply(status=200, body=self.files[found[1]], headers=(("content-type", "application/octet-stream"),))
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
            if self.headers.get("content-type", "").startswith("multipart/form-data"):
                body = _form_fields(self.headers["content-type"], raw)
            else:
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    body = None
            self._answer(raw, body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._answer(b"", None)

        def _answer(self, raw: bytes, body: Any) -> None:
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


def _form_fields(content_type: str, raw: bytes) -> dict[str, Any]:
    """A multipart/form-data upload's fields: text fields as str, the file as bytes."""
    message = email.parser.BytesParser().parsebytes(f"content-type: {content_type}\r\n\r\n".encode() + raw)
    fields: dict[str, Any] = {}
    for part in message.get_payload():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        fields[name] = payload if part.get_filename() else payload.decode()
    return fields
