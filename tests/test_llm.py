"""The JSON chat model against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from openai_server import CHAT, OpenAICompatibleServer, Reply

from sessionmem_pipeline.core.llm_protocol import LLMError
from sessionmem_pipeline.providers.llm import OpenAIChatModel, build_chat_model, parse_json_object
from sessionmem_pipeline.providers.openai_compat import ProviderConfigError
from sessionmem_pipeline.stages.transform import chunk_topics
from sessionmem_pipeline.warehouse import Warehouse

SYSTEM = "You tag conversation chunks with 1 to 3 topics. Answer in JSON: {\"topics\": [...]}."
USER = "User: the HNSW index returns too few rows with a WHERE filter.\nAssistant: over-fetch, then filter."


def chat_model(server: OpenAICompatibleServer, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("llama3.1", base_url=server.base_url, backoff_seconds=0.001, **options)


def test_complete_json_sends_the_prompts_in_json_mode_and_parses_the_reply(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, Reply.chat('{"topics": ["vector-search", "duckdb"]}'))

    result = chat_model(openai_server).complete_json(SYSTEM, USER)

    assert result == {"topics": ["vector-search", "duckdb"]}
    (request,) = openai_server.requests_to(CHAT)
    assert request.body["model"] == "llama3.1"
    assert request.body["temperature"] == 0
    assert request.body["response_format"] == {"type": "json_object"}
    assert request.body["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    assert request.headers["authorization"] == "Bearer not-needed"


def test_a_prompt_that_never_mentions_json_gets_the_json_instruction(openai_server: OpenAICompatibleServer) -> None:
    chat_model(openai_server).complete_json("Tag the chunk with topics.", "We chose DuckDB.")

    (request,) = openai_server.requests_to(CHAT)
    assert request.body["messages"][0]["content"].endswith("Reply with a single JSON object and nothing else.")


@pytest.mark.parametrize(
    "content",
    [
        '```json\n{"topics": ["testing"]}\n```',
        'Here are the topics:\n{"topics": ["testing"]}',
        '<think>The user talks about {tests}.</think>\n{"topics": ["testing"]}',
    ],
    ids=["fenced", "prose-before", "reasoning-preamble"],
)
def test_wrapped_json_is_accepted_without_asking_again(openai_server: OpenAICompatibleServer, content: str) -> None:
    openai_server.enqueue(CHAT, Reply.chat(content))

    assert chat_model(openai_server).complete_json(SYSTEM, USER) == {"topics": ["testing"]}
    assert len(openai_server.requests_to(CHAT)) == 1


def test_invalid_json_content_is_answered_once_with_a_correction(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, Reply.chat("topics: testing, ci"), Reply.chat('{"topics": ["testing", "ci"]}'))

    result = chat_model(openai_server).complete_json(SYSTEM, USER)

    assert result == {"topics": ["testing", "ci"]}
    first, second = openai_server.requests_to(CHAT)
    assert second.body["messages"][:2] == first.body["messages"]
    assert second.body["messages"][2] == {"role": "assistant", "content": "topics: testing, ci"}
    assert "not a valid JSON object" in second.body["messages"][3]["content"]


@pytest.mark.parametrize(
    "replies",
    [
        [Reply.chat("not json"), Reply.chat("still not json")],
        [Reply.chat('["a", "list"]'), Reply.chat('["a", "list"]')],
        [Reply.chat(None), Reply.chat(None)],
    ],
    ids=["prose", "array", "empty"],
)
def test_invalid_json_twice_raises_llm_error(openai_server: OpenAICompatibleServer, replies: list[Reply]) -> None:
    openai_server.enqueue(CHAT, *replies)

    with pytest.raises(LLMError, match="twice replied with something that is not a JSON object"):
        chat_model(openai_server).complete_json(SYSTEM, USER)

    assert len(openai_server.requests_to(CHAT)) == 2


def test_a_reply_cut_off_at_the_token_limit_says_so(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, *[Reply.chat('{"topics": ["tes', finish_reason="length")] * 2)

    with pytest.raises(LLMError, match="cut off at the output token limit"):
        chat_model(openai_server, max_output_tokens=8).complete_json(SYSTEM, USER)

    assert openai_server.requests_to(CHAT)[0].body["max_tokens"] == 8


@pytest.mark.parametrize(
    "failures",
    [
        [Reply.error(429, "Rate limit reached")],
        [Reply.error(500), Reply.error(503)],
        [Reply.malformed_body()],
        [Reply.json({"id": "x", "object": "chat.completion", "choices": []})],
    ],
    ids=["429", "500-503", "non-json-body", "no-choices"],
)
def test_transient_failures_are_retried(openai_server: OpenAICompatibleServer, failures: list[Reply]) -> None:
    openai_server.enqueue(CHAT, *failures)

    assert chat_model(openai_server).complete_json(SYSTEM, USER) == {"ok": True}
    assert len(openai_server.requests_to(CHAT)) == len(failures) + 1


def test_persistent_server_errors_raise_llm_error_after_three_tries(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, *[Reply.error(500, "model crashed")] * 3)

    with pytest.raises(LLMError, match=r"HTTP 500 .*model crashed \(gave up after 3 tries\)"):
        chat_model(openai_server).complete_json(SYSTEM, USER)

    assert len(openai_server.requests_to(CHAT)) == 3


def test_a_rejected_key_fails_at_once(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, Reply.error(401, "Incorrect API key provided"))

    with pytest.raises(LLMError, match="rejected the API key"):
        chat_model(openai_server).complete_json(SYSTEM, USER)

    assert len(openai_server.requests_to(CHAT)) == 1


def test_a_server_without_json_mode_is_asked_without_it_from_then_on(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, Reply.error(400, "Unrecognized request argument supplied: response_format"))
    model = chat_model(openai_server)

    assert model.complete_json(SYSTEM, USER) == {"ok": True}
    assert model.complete_json(SYSTEM, "another chunk") == {"ok": True}

    formats = [request.body.get("response_format") for request in openai_server.requests_to(CHAT)]
    assert formats == [{"type": "json_object"}, None, None]


def test_a_request_rejected_with_and_without_json_mode_raises(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, *[Reply.error(400, "maximum context length is 8192 tokens")] * 2)

    with pytest.raises(LLMError, match="HTTP 400 .*maximum context length"):
        chat_model(openai_server).complete_json(SYSTEM, USER)

    assert len(openai_server.requests_to(CHAT)) == 2


def test_an_unreachable_server_raises_llm_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIChatModel("llama3.1", base_url=f"http://127.0.0.1:{port}/v1", backoff_seconds=0.001)

    with pytest.raises(LLMError, match="cannot reach model 'llama3.1'"):
        model.complete_json(SYSTEM, USER)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  ```json\n{"a": [1, 2]}\n```  ', {"a": [1, 2]}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('Sure! {"a": {"b": "}"}} Hope that helps.', {"a": {"b": "}"}}),
        ('<think>maybe {x}</think>{"a": 1}', {"a": 1}),
        ('Use {braces} wisely: {"a": 1}', {"a": 1}),
        ('Here it is:\n```json\n{"a": 1}\n```', {"a": 1}),
    ],
)
def test_parse_json_object_accepts(reply: str, expected: dict[str, Any]) -> None:
    assert parse_json_object(reply) == expected


@pytest.mark.parametrize(
    ("reply", "problem"),
    [("", "no JSON object"), ("[1, 2]", "got an array"), ('{"a": ', "invalid JSON"), ("null", "got null")],
)
def test_parse_json_object_rejects(reply: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_json_object(reply)


def test_build_chat_model_is_none_unless_configured() -> None:
    assert build_chat_model("none", api_key="sk-present-but-not-a-switch") is None


def test_build_chat_model_openai(openai_server: OpenAICompatibleServer) -> None:
    model = build_chat_model("openai", model="qwen2.5:7b", base_url=openai_server.base_url)

    assert isinstance(model, OpenAIChatModel)
    assert model.model == "qwen2.5:7b"
    assert build_chat_model("openai", api_key="sk-test").model == "gpt-4o-mini"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({"provider": "openai"}, "needs an API key"), ({"provider": "anthropic"}, "must be 'none' or 'openai'")],
)
def test_build_chat_model_explains_configuration_errors(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ProviderConfigError, match=message):
        build_chat_model(**arguments)


def test_after_repeated_failures_requests_are_refused_until_the_cooldown_passes(
    openai_server: OpenAICompatibleServer,
) -> None:
    openai_server.enqueue(CHAT, *[Reply.error(503)] * 6)
    model = chat_model(openai_server, give_up_after_failures=2, cooldown_seconds=3600)

    for _ in range(2):
        with pytest.raises(LLMError, match="HTTP 503"):
            model.complete_json(SYSTEM, USER)
    with pytest.raises(LLMError, match="not sent after 2 failed requests in a row; the last: HTTP 503"):
        model.complete_json(SYSTEM, USER)

    assert len(openai_server.requests_to(CHAT)) == 6
    model.cooldown_seconds = 0
    assert model.complete_json(SYSTEM, USER) == {"ok": True}


def test_invalid_json_does_not_count_as_a_server_failure(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, *[Reply.chat("nope")] * 4)
    model = chat_model(openai_server, give_up_after_failures=1, cooldown_seconds=3600)

    for _ in range(2):
        with pytest.raises(LLMError, match="not a JSON object"):
            model.complete_json(SYSTEM, USER)

    assert model.complete_json(SYSTEM, USER) == {"ok": True}


def test_many_threads_asking_keep_at_most_max_in_flight_requests_open(openai_server: OpenAICompatibleServer) -> None:
    openai_server.latency_seconds = 0.2  # long enough that requests sent together overlap at the server
    model = chat_model(openai_server, max_in_flight=3)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda n: model.complete_json(SYSTEM, f"{USER} ({n})"), range(12)))

    assert len(answers) == 12
    assert 2 <= openai_server.peak_in_flight <= 3
    assert len(openai_server.requests_to(CHAT)) == 12


def test_retry_after_pauses_every_chat_request_in_flight(openai_server: OpenAICompatibleServer) -> None:
    openai_server.enqueue(CHAT, Reply.error(429, "slow down", retry_after=0.3))
    model = chat_model(openai_server, max_in_flight=4)

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda n: model.complete_json(SYSTEM, f"{USER} ({n})"), range(6)))

    assert len(answers) == 6
    assert len(openai_server.requests_to(CHAT)) == 7  # the one told to wait was sent again


def test_chunk_topics_ask_the_model_several_chunks_at_once_with_the_one_at_a_time_tags(
    tmp_path: Path, openai_server: OpenAICompatibleServer
) -> None:
    texts = [f"User: migrate table {name} to the new schema.\nAssistant: done." for name in "abcdefgh"]
    openai_server.latency_seconds = 0.1
    openai_server.default_chat_content = '{"topics": ["schema-migration"]}'
    with Warehouse(tmp_path / "w.duckdb") as wh:
        serial, fresh_serial = chunk_topics(wh, texts, set(), chat_model(openai_server, max_in_flight=1))
        assert openai_server.peak_in_flight == 1
        concurrent, fresh = chunk_topics(wh, texts, set(), chat_model(openai_server, max_in_flight=4))

    assert openai_server.peak_in_flight >= 2
    assert concurrent == serial and fresh == fresh_serial and len(fresh) == len(texts)
