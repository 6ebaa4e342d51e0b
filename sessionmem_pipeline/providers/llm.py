"""A chat model that answers in JSON, from OpenAI or any OpenAI-compatible server (Ollama, vLLM, LM Studio).

Used for topic tags and summaries only when the user configured `llm.provider = "openai"`: the offline
defaults (keyword topics, extractive summaries) need no model. Callers see one method,
`complete_json(system, user) -> dict`, and one failure, `LLMError`, on which they fall back or flag.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from sessionmem_pipeline.core.llm_protocol import ChatModel, LLMError
from sessionmem_pipeline.providers.batches import BatchAPI
from sessionmem_pipeline.providers.openai_compat import (
    OPENAI_BASE_URL,
    MalformedResponseError,
    PauseGate,
    ProviderConfigError,
    RetryPolicy,
    call_with_retries,
    describe_failure,
    is_transient,
    lazy_client,
    openai_package,
    provider_failures,
    reading_reply,
)

DEFAULT_CHAT_MODEL = "gpt-4o-mini"


def _rejections() -> tuple[type[Exception], ...]:
    """Replies refusing the request itself (HTTP 400, 422), e.g. from a server that does not know JSON mode."""
    openai = openai_package()
    return (openai.BadRequestError, openai.UnprocessableEntityError)
_JSON_INSTRUCTION = "Reply with a single JSON object and nothing else."
_FENCED = re.compile(r"^```[a-zA-Z]*\s*\n?(?P<body>.*?)\n?```$", re.DOTALL)
_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean", type(None): "null"}
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)


def parse_json_object(reply: str) -> dict[str, Any]:
    """The JSON object in a model's reply, tolerating what models wrap around it.

    Accepts a bare object, a ```json fenced block, a reasoning model's <think>...</think> preamble,
    or a sentence before the object; raises ValueError saying what was wrong otherwise.
    """
    text = _THINKING.sub("", reply).strip()
    fenced = _FENCED.match(text)
    if fenced:
        text = fenced.group("body").strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return _first_embedded_object(text, error)
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {_JSON_KINDS.get(type(value), 'something else')}")
    return value


def _first_embedded_object(text: str, error: json.JSONDecodeError) -> dict[str, Any]:
    """The first `{...}` inside prose that decodes as a JSON object (braces in the prose are skipped)."""
    decoder = json.JSONDecoder()
    starts = [match.start() for match in re.finditer(r"\{", text)]
    for start in starts:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError as attempt:
            error = attempt
            continue
        if isinstance(value, dict):
            return value
    raise ValueError(f"invalid JSON: {error}" if starts else f"no JSON object in the reply ({error})")


class OpenAIChatModel:
    """`ChatModel` over the OpenAI chat completions API.

    Asks for JSON mode (`response_format={"type": "json_object"}`); a server that rejects it (400/422)
    is asked again without it, and remembered. Rate limits, server errors, dropped connections and
    garbled replies are retried with exponential backoff (3 tries, as for embeddings); a reply that is
    not a JSON object is answered once with a request to fix it. Anything still failing raises
    `LLMError` naming the model, the server and the cause; after a few such failures in a row the
    model stops sending for a while (see `_complete`). Callers may ask from many threads: at most
    `max_in_flight` requests are open at once, and a backoff (a 429's Retry-After) pauses all of them.
    """

    def __init__(
        self,
        model: str = DEFAULT_CHAT_MODEL,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_attempts: int = 3,
        backoff_seconds: float = 0.5,
        temperature: float = 0.0,
        timeout: float = 120.0,
        max_output_tokens: int | None = None,
        give_up_after_failures: int = 3,
        cooldown_seconds: float = 60.0,
        max_in_flight: int = 1,
    ) -> None:
        if max_in_flight < 1:
            raise ProviderConfigError(f"llm.max_in_flight must be at least 1, got {max_in_flight}")
        self.model = model
        self.max_in_flight = max_in_flight
        self.give_up_after_failures = give_up_after_failures
        self.cooldown_seconds = cooldown_seconds
        self.temperature = temperature
        self.max_output_tokens = max_output_tokens
        self._where = base_url or OPENAI_BASE_URL
        self._client_when_used = lazy_client(base_url=base_url, api_key=api_key, timeout=timeout, section="llm")
        self._retry = RetryPolicy(max_attempts=max_attempts, backoff_seconds=backoff_seconds)
        self._json_mode = True
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._gate = PauseGate()
        self._failed_in_a_row = 0
        self._last_failure = ""
        self._last_failure_at = 0.0

    def complete_json(self, system: str, user: str) -> dict[str, Any]:
        """The model's answer to `user` under `system`, as a JSON object."""
        messages = _messages(system, user)
        reply, finish_reason = self._complete(messages)
        try:
            return parse_json_object(reply)
        except ValueError as problem:
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": f"That was not a valid JSON object ({problem}). {_JSON_INSTRUCTION}"},
            ]
        reply, finish_reason = self._complete(messages)
        try:
            return parse_json_object(reply)
        except ValueError as problem:
            cut_off = " The reply was cut off at the output token limit." if finish_reason == "length" else ""
            raise LLMError(
                f"model {self.model!r} at {self._where} twice replied with something that is not a JSON object "
                f"({problem}).{cut_off} Reply began: {reply[:200]!r}"
            ) from None

    def _complete(self, messages: list[dict[str, str]]) -> tuple[str, str | None]:
        """One completion (text, finish reason), unless the server has just failed repeatedly.

        After `give_up_after_failures` failed requests in a row, requests are refused at once for
        `cooldown_seconds`: an outage then costs the run seconds instead of 3 slow tries per chunk.
        """
        cooling = time.monotonic() - self._last_failure_at < self.cooldown_seconds
        if self._failed_in_a_row >= self.give_up_after_failures and cooling:
            raise LLMError(f"not sent after {self._failed_in_a_row} failed requests in a row; the last: {self._last_failure}")
        try:
            reply = self._complete_adapting_json_mode(messages)
        except LLMError as failure:
            self._failed_in_a_row += 1
            self._last_failure, self._last_failure_at = str(failure), time.monotonic()
            raise
        self._failed_in_a_row = 0
        return reply

    def _complete_adapting_json_mode(self, messages: list[dict[str, str]]) -> tuple[str, str | None]:
        """One completion with retries, dropping JSON mode for good if the server rejects it."""
        if self._json_mode:
            try:
                return self._complete_with_retries(messages, json_mode=True)
            except _rejections():
                pass  # many OpenAI-compatible servers do not know `response_format`: ask once more without it
        try:
            reply = self._complete_with_retries(messages, json_mode=False)
        except _rejections() as rejected:
            raise self._failure(rejected) from rejected
        self._json_mode = False
        return reply

    def request_body(self, system: str, user: str) -> dict[str, Any]:
        """The first request `complete_json` sends (also a Batch API request line's body)."""
        return self._request(_messages(system, user), json_mode=self._json_mode)

    def batch_api(self) -> BatchAPI:
        """The server's Batch API, with this model's client, retries and shared pause."""
        return BatchAPI(self._client_when_used(), self._retry, self._gate)

    def _request(self, messages: list[dict[str, str]], *, json_mode: bool) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if self.max_output_tokens is not None:
            request["max_tokens"] = self.max_output_tokens
        if json_mode:
            request["response_format"] = {"type": "json_object"}
        return request

    def _complete_with_retries(self, messages: list[dict[str, str]], *, json_mode: bool) -> tuple[str, str | None]:
        request = self._request(messages, json_mode=json_mode)

        def call() -> tuple[str, str | None]:
            with self._slots, reading_reply():
                response = self._client_when_used().chat.completions.create(**request)
            if not getattr(response, "choices", None) or response.choices[0].message is None:
                raise MalformedResponseError("the reply has no choices")
            choice = response.choices[0]
            return choice.message.content or choice.message.refusal or "", choice.finish_reason

        try:
            return call_with_retries(call, self._retry, gate=self._gate)
        except _rejections():
            raise
        except provider_failures() as error:
            raise self._failure(error) from error

    def _failure(self, error: BaseException) -> LLMError:
        detail = describe_failure(error, section="llm", model=self.model, base_url=self._where)
        tries = f" (gave up after {self._retry.max_attempts} tries)" if is_transient(error) else ""
        return LLMError(f"{detail}{tries}")


def _messages(system: str, user: str) -> list[dict[str, str]]:
    if "json" not in f"{system}\n{user}".lower():
        # OpenAI's JSON mode refuses prompts that never mention JSON; saying it helps other servers too.
        system = f"{system}\n\n{_JSON_INSTRUCTION}".strip()
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def reply_text(body: Any) -> str | None:
    """The message text of a chat completion body (a Batch API result line's), None when it has none."""
    try:
        message = body["choices"][0]["message"]
        return message.get("content") or message.get("refusal")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def build_chat_model(
    provider: str,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    *,
    max_in_flight: int = 1,
) -> ChatModel | None:
    """The chat model the configuration asks for, or None for "none"; an API key alone never switches one on."""
    provider = provider.strip().lower()
    if provider == "none":
        return None
    if provider == "openai":
        model = model or DEFAULT_CHAT_MODEL
        return OpenAIChatModel(model, base_url=base_url, api_key=api_key, max_in_flight=max_in_flight)
    raise ProviderConfigError(f"llm.provider must be 'none' or 'openai', got {provider!r}")
