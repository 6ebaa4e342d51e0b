"""Retry policy and failure classification shared by the OpenAI-compatible embedder and chat model."""

from __future__ import annotations

import socket

import openai
import pytest
from openai_server import EMBEDDINGS, OpenAICompatibleServer, Reply

from sessionmem_pipeline.providers.openai_compat import (
    MalformedResponseError,
    PauseGate,
    ProviderConfigError,
    RetryPolicy,
    call_with_retries,
    describe_failure,
    is_transient,
    make_client,
)


def error_from(server: OpenAICompatibleServer, reply: Reply) -> openai.APIStatusError:
    """The exception the real `openai` client raises when the server sends `reply`."""
    server.enqueue(EMBEDDINGS, reply)
    client = make_client(base_url=server.base_url, api_key=None, timeout=5, section="embedding")
    with pytest.raises(openai.APIStatusError) as raised:
        client.embeddings.create(model="m", input=["x"])
    return raised.value


def unreachable_error() -> openai.APIConnectionError:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client(base_url=f"http://127.0.0.1:{port}/v1", api_key=None, timeout=5, section="embedding")
    with pytest.raises(openai.APIConnectionError) as raised:
        client.embeddings.create(model="m", input=["x"])
    return raised.value


NO_QUOTA = Reply.json({"error": {"message": "You exceeded your quota", "code": "insufficient_quota"}}, status=429)


@pytest.mark.parametrize(
    ("reply", "transient"),
    [
        (Reply.error(429), True),
        (Reply.error(500), True),
        (Reply.error(503), True),
        (Reply.error(400), False),
        (Reply.error(401), False),
        (Reply.error(404), False),
        (NO_QUOTA, False),
    ],
    ids=["429", "500", "503", "400", "401", "404", "no-quota"],
)
def test_is_transient_for_http_errors(openai_server: OpenAICompatibleServer, reply: Reply, transient: bool) -> None:
    assert is_transient(error_from(openai_server, reply)) is transient


@pytest.mark.parametrize(
    ("error", "transient"),
    [(MalformedResponseError("not JSON"), True), (KeyError("a bug"), False)],
    ids=["malformed", "bug"],
)
def test_is_transient_for_other_errors(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


def test_an_unreachable_server_is_transient() -> None:
    assert is_transient(unreachable_error())


@pytest.mark.parametrize(
    ("failed_attempt", "headers", "expected"),
    [
        (1, (), 0.5),
        (2, (), 1.0),
        (3, (), 2.0),
        (1, (("retry-after", "7"),), 7.0),
        (1, (("retry-after-ms", "1500"),), 1.5),
        (1, (("retry-after", "3600"),), 30.0),
        (2, (("retry-after", "0.1"),), 1.0),
        (1, (("retry-after", "not a date"),), 0.5),
    ],
)
def test_delay_is_exponential_and_honours_retry_after_within_the_cap(
    openai_server: OpenAICompatibleServer, failed_attempt: int, headers: tuple[tuple[str, str], ...], expected: float
) -> None:
    error = error_from(openai_server, Reply(429, b'{"error": {"message": "slow down"}}', headers))
    policy = RetryPolicy(max_attempts=3, backoff_seconds=0.5, max_delay_seconds=30.0)

    assert policy.delay_after(failed_attempt, error) == pytest.approx(expected)


def test_call_with_retries_sleeps_between_tries_and_gives_up_after_max_attempts() -> None:
    calls: list[int] = []
    pauses: list[float] = []

    def always_garbled() -> None:
        calls.append(1)
        raise MalformedResponseError("garbled")

    with pytest.raises(MalformedResponseError):
        call_with_retries(always_garbled, RetryPolicy(max_attempts=3, backoff_seconds=0.25), sleep=pauses.append)

    assert len(calls) == 3
    assert pauses == [0.25, 0.5]


def test_call_with_retries_does_not_retry_a_permanent_failure() -> None:
    calls: list[int] = []

    def buggy() -> None:
        calls.append(1)
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        call_with_retries(buggy, RetryPolicy(), sleep=lambda seconds: None)

    assert len(calls) == 1


def test_call_with_retries_returns_the_first_success() -> None:
    replies = iter([MalformedResponseError("garbled"), "ok"])

    def flaky() -> str:
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return reply

    assert call_with_retries(flaky, RetryPolicy(), sleep=lambda seconds: None) == "ok"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply.error(500, "upstream overloaded"), "HTTP 500 from model 'm' at http://h/v1: upstream overloaded"),
        (Reply.json({"error": "model 'm' not found"}, status=404), "model 'm' not found. The model or endpoint"),
        (Reply.error(401), "check the key given for llm"),
        (NO_QUOTA, "no quota left"),
    ],
    ids=["500", "ollama-404", "401", "no-quota"],
)
def test_describe_failure_says_what_where_and_what_to_change(
    openai_server: OpenAICompatibleServer, reply: Reply, expected: str
) -> None:
    error = error_from(openai_server, reply)

    assert expected in describe_failure(error, section="llm", model="m", base_url="http://h/v1")


def test_describe_failure_of_an_unreachable_server() -> None:
    message = describe_failure(unreachable_error(), section="embedding", model="m", base_url="http://h/v1")

    assert message.startswith("cannot reach model 'm' at http://h/v1")
    assert "embedding.base_url" in message


def test_retry_policy_rejects_nonsense() -> None:
    with pytest.raises(ProviderConfigError):
        RetryPolicy(max_attempts=0)



class FakeClock:
    """Time that moves only when someone sleeps: the gate's waits become a list to assert on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def gate(self) -> PauseGate:
        return PauseGate(sleep=self.sleep, clock=lambda: self.now)


def test_a_pause_gate_holds_for_the_longest_pause_asked_and_then_lets_everyone_through() -> None:
    clock = FakeClock()
    gate = clock.gate()
    gate.hold(2.0)
    gate.hold(1.0)  # a shorter pause asked by another request does not shorten the first
    gate.wait()
    gate.wait()

    assert clock.slept == [2.0]


def test_call_with_retries_through_a_gate_waits_out_retry_after_before_the_next_try(
    openai_server: OpenAICompatibleServer,
) -> None:
    openai_server.enqueue(EMBEDDINGS, Reply.error(429, retry_after=7))
    clock = FakeClock()
    client = make_client(base_url=openai_server.base_url, api_key=None, timeout=5, section="embedding")

    call_with_retries(
        lambda: client.embeddings.create(model="m", input=["x"]), RetryPolicy(backoff_seconds=0.01), gate=clock.gate()
    )

    assert clock.slept == [7.0]
    assert len(openai_server.requests_to(EMBEDDINGS)) == 2
