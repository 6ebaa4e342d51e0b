"""Talking to OpenAI-compatible servers (OpenAI, Ollama, vLLM, LM Studio): client, error taxonomy, retries.

Shared by the remote embedder and the chat model so both treat failures the same way: spec 001 asks
for 3 tries with exponential backoff on transient failures (rate limits, server errors, dropped
connections, garbled replies), while a wrong key, model or URL fails at once with a message that
names the setting to fix.
"""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import openai

OPENAI_BASE_URL = "https://api.openai.com/v1"
PLACEHOLDER_API_KEY = "not-needed"

_TRANSIENT_STATUS = frozenset({408, 409, 429})
_T = TypeVar("_T")


class ProviderConfigError(ValueError):
    """A provider setting is wrong or missing; retrying cannot help, the user has to change the configuration."""


class MalformedResponseError(RuntimeError):
    """A 2xx reply whose body is not what the API promises (not JSON, missing fields): treated as transient."""


def openai_package() -> ModuleType:
    """The `openai` package, imported on first use: importing it takes about half a second, which a search or
    hook using the local embedder must not pay."""
    import openai

    return openai


def provider_failures() -> tuple[type[Exception], ...]:
    """What the server or the network can cause; anything else is a bug here and must not be retried or flagged."""
    return (openai_package().OpenAIError, MalformedResponseError)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry transient failures (spec 001: 3 tries with backoff)."""

    max_attempts: int = 3
    backoff_seconds: float = 0.5
    max_delay_seconds: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ProviderConfigError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.backoff_seconds < 0 or self.max_delay_seconds < 0:
            raise ProviderConfigError("backoff_seconds and max_delay_seconds must not be negative")

    def delay_after(self, failed_attempt: int, error: BaseException) -> float:
        """Exponential backoff, stretched to the server's Retry-After when it asks for longer, capped."""
        exponential = self.backoff_seconds * 2 ** (failed_attempt - 1)
        return min(max(exponential, _retry_after_seconds(error) or 0.0), self.max_delay_seconds)


def make_client(*, base_url: str | None, api_key: str | None, timeout: float, section: str) -> openai.OpenAI:
    """An `openai.OpenAI` client that never reads the environment and never retries on its own.

    `base_url` and `api_key` are always passed explicitly: left as None, the `openai` package would pick
    up OPENAI_BASE_URL / OPENAI_API_KEY from the environment, which could silently send transcripts to
    a server the user did not configure. Retries are ours (`RetryPolicy`), so the client's are off.
    `section` ("embedding" or "llm") names the configuration keys in error messages.
    """
    _check_client_settings(base_url, api_key, section)
    return openai_package().OpenAI(
        base_url=base_url or OPENAI_BASE_URL,
        api_key=api_key or PLACEHOLDER_API_KEY,
        max_retries=0,
        timeout=timeout,
    )


def lazy_client(
    *, base_url: str | None, api_key: str | None, timeout: float, section: str
) -> Callable[[], openai.OpenAI]:
    """`make_client`'s checks now, the client on first call (once, whichever thread asks first): importing
    `openai` costs about 0.6 s of CPU, which a process that only needs the model's identity must not pay (each
    Dagster writer step computes every stage key; most of them never send a request)."""
    _check_client_settings(base_url, api_key, section)
    lock = threading.Lock()
    built: list[openai.OpenAI] = []

    def client() -> openai.OpenAI:
        with lock:
            if not built:
                built.append(make_client(base_url=base_url, api_key=api_key, timeout=timeout, section=section))
        return built[0]

    return client


def _check_client_settings(base_url: str | None, api_key: str | None, section: str) -> None:
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise ProviderConfigError(
            f"{section}.base_url must be an http(s) URL such as http://localhost:11434/v1, got {base_url!r}"
        )
    if base_url is None and not api_key:
        raise ProviderConfigError(
            f"{section}.provider = 'openai' without {section}.base_url sends requests to api.openai.com, "
            "which needs an API key, and none was configured. Provide the key through the configuration, "
            f"or set {section}.base_url to an OpenAI-compatible server (Ollama, vLLM, LM Studio) that needs none."
        )


class PauseGate:
    """Shared by the requests one provider has in flight: when the server says wait (429 + Retry-After, or any
    backoff), every request waits, not just the one that was told, so a rate limit is not hammered N times over."""

    def __init__(self, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self._sleep, self._clock = sleep, clock
        self._resume_at = 0.0
        self._lock = threading.Lock()

    def hold(self, seconds: float) -> None:
        """No request starts in the next `seconds` (a longer hold already in place stays)."""
        with self._lock:
            self._resume_at = max(self._resume_at, self._clock() + seconds)

    def wait(self) -> None:
        """Return once no hold is in place."""
        while (remaining := self._resume_at - self._clock()) > 0:
            self._sleep(remaining)


def call_with_retries(
    call: Callable[[], _T],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
    gate: PauseGate | None = None,
) -> _T:
    """Run `call`, retrying transient failures with backoff; the last error propagates unchanged. With a `gate`
    the backoff is shared with the other requests in flight (they pause too)."""
    for attempt in range(1, policy.max_attempts + 1):
        if gate is not None:
            gate.wait()
        try:
            return call()
        except Exception as error:
            if attempt == policy.max_attempts or not is_transient(error):
                raise
            delay = policy.delay_after(attempt, error)
            if gate is None:
                sleep(delay)
            else:
                gate.hold(delay)
    raise AssertionError("unreachable: the loop returns or raises")


@contextmanager
def reading_reply() -> Iterator[None]:
    """Around a client call: a 2xx body the `openai` client cannot parse becomes `MalformedResponseError`.

    The client raises a bare ValueError (`json.JSONDecodeError`, "No embedding data received") there.
    """
    try:
        yield
    except ValueError as error:
        raise MalformedResponseError(f"unreadable reply: {error}") from error


def is_transient(error: BaseException) -> bool:
    """True for failures a later try may not see: rate limits, 5xx, timeouts, dropped connections, garbled replies."""
    openai = openai_package()
    if isinstance(error, (openai.APIConnectionError, MalformedResponseError)):
        return True
    if isinstance(error, openai.APIStatusError):
        if getattr(error, "code", None) == "insufficient_quota":
            return False
        return error.status_code in _TRANSIENT_STATUS or error.status_code >= 500
    return False


def is_configuration_failure(error: BaseException) -> bool:
    """True when every request would fail the same way (bad key, no access, unknown model or URL)."""
    openai = openai_package()
    return isinstance(error, openai.APIStatusError) and (
        error.status_code in (401, 403, 404) or getattr(error, "code", None) == "insufficient_quota"
    )


def describe_failure(error: BaseException, *, section: str, model: str, base_url: str) -> str:
    """One readable sentence: what failed, where, and what to change when the user can fix it."""
    openai = openai_package()
    where = f"model {model!r} at {base_url}"
    if isinstance(error, openai.APIStatusError):
        detail = f"HTTP {error.status_code} from {where}: {_server_message(error)}"
        if getattr(error, "code", None) == "insufficient_quota":
            return f"{detail}. The account has no quota left; add credit or use another {section}.base_url."
        hints = {
            401: f"The server rejected the API key; check the key given for {section}.",
            403: f"The API key has no access to this model; check the key or {section}.model.",
            404: (
                f"The model or endpoint does not exist there; check {section}.model and {section}.base_url "
                "(OpenAI-compatible servers usually serve under /v1)."
            ),
        }
        return f"{detail}. {hints[error.status_code]}" if error.status_code in hints else detail
    if isinstance(error, openai.APITimeoutError):
        return f"no reply from {where} before the timeout"
    if isinstance(error, openai.APIConnectionError):
        return f"cannot reach {where} ({error.__cause__ or error}); is the server running and {section}.base_url right?"
    return f"{where}: {error}"


def _server_message(error: openai.APIStatusError) -> str:
    """The server's own words: OpenAI's `{"error": {"message": ...}}`, Ollama's `{"error": "..."}`, or raw text."""
    body = error.body
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    if isinstance(body, str) and body.strip():
        return body.strip()[:300]
    return error.message


def _retry_after_seconds(error: BaseException) -> float | None:
    """The server's Retry-After hint (seconds, milliseconds or an HTTP date), if it gave one."""
    response = getattr(error, "response", None)
    if response is None:
        return None
    headers = response.headers
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(float(value) / divisor, 0.0)
        except ValueError:
            pass
        try:
            return max(email.utils.parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
        except (TypeError, ValueError):
            continue
    return None
