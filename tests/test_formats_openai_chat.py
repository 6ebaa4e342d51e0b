"""OpenAI Chat Completions message arrays, as a JSON document or as JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionmem_pipeline.core.formats import detect_format, parse_file
from sessionmem_pipeline.core.models import KIND_INJECTED, KIND_MESSAGE, ParseResult

ROOT = Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat"


def parse_fixture(relative: str) -> ParseResult:
    path = ROOT / relative
    return parse_file(str(path), str(ROOT), path.read_bytes(), final=True)


def test_a_json_array_with_tool_calls() -> None:
    result = parse_fixture("support/refund-request.json")
    session = result.sessions[0]

    assert result.format == "openai_chat" and result.lines_read == 10
    assert (session.session_id, session.project) == ("support/refund-request", "support")
    assert [(m.message_id, m.role) for m in session.messages] == [
        ("M1", "system"),
        ("M2", "user"),
        ("M3", "assistant"),
        ("M5", "assistant"),
        ("M6", "user"),
        ("M7", "assistant"),
        ("M10", "assistant"),
    ]
    assert session.messages[0].kind == KIND_INJECTED and session.messages[1].kind == KIND_MESSAGE
    assert all(m.timestamp is None and m.source_line == 0 for m in session.messages)


def test_tool_messages_become_the_outputs_of_their_calls() -> None:
    messages = parse_fixture("support/refund-request.json").sessions[0].messages
    refund, email = messages[5].tool_calls

    assert messages[2].tool_calls[0].input == {"order_id": "NW-48213"}
    assert messages[2].tool_calls[0].output.startswith('{"order_id": "NW-48213", "status": "return_received"')
    assert (refund.name, refund.call_id, refund.output) == (
        "issue_refund",
        "call_3Lw9pZ6vT2",
        '{"refund_id": "RF-20931", "status": "initiated"}',
    )
    assert email.output == '{"error": "template not found"}'
    assert not any(m.role == "tool" for m in messages)


def test_an_object_holding_messages_with_session_fields() -> None:
    result = parse_fixture("wrapped.json")
    session = result.sessions[0]
    developer, question = session.messages[:2]

    assert (session.session_id, session.title, session.model) == (
        "chat-2026-03-04-trip",
        "Packing list for a winter hike",
        "gpt-4o-2024-08-06",
    )
    assert session.metadata == {"created": 1772611200}
    assert (developer.role, developer.kind) == ("system", KIND_INJECTED)
    assert question.speaker == "jonas"
    assert question.text == "Is this jacket warm enough for -10 C on a day hike?\n\n[image: image/jpeg]"
    assert session.messages[-1].text.startswith("Base layer (merino)")
    assert [(w.line, w.reason) for w in result.warnings] == [
        (0, "messages[5]: expected a message object, found int; skipped")
    ]


def test_jsonl_chat_lines_with_an_orphan_tool_message() -> None:
    result = parse_fixture("agent-run.jsonl")
    messages = result.sessions[0].messages

    assert result.format == "openai_chat"  # tool_calls decide, even though one line has a timestamp
    assert [m.message_id for m in messages] == ["L1", "L2", "L3", "L6", "L7", "L8", "L9"]
    assert [c.name for c in messages[2].tool_calls] == ["get_ci_status", "search_issues"]
    assert all(c.output is not None for c in messages[2].tool_calls)
    assert messages[4].timestamp is not None and messages[4].timestamp.isoformat() == "2026-03-10T15:04:00+00:00"
    assert (messages[5].role, messages[5].text) == ("tool", "late result from an earlier run")
    assert [(w.line, w.reason) for w in result.warnings] == [
        (8, "tool message answers no known call; kept as a tool message")
    ]


def test_legacy_function_call_and_function_message() -> None:
    data = json.dumps(
        [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "function_call": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
            {"role": "function", "name": "weather", "content": "-3 C, snow"},
            {"role": "assistant", "content": "It is -3 C and snowing in Oslo."},
        ]
    ).encode()

    messages = parse_file("/c/w.json", "/c", data, final=True).sessions[0].messages

    assert [m.message_id for m in messages] == ["M1", "M2", "M4"]
    assert messages[1].tool_calls[0].input == {"city": "Oslo"}
    assert messages[1].tool_calls[0].output == "-3 C, snow"


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "openai_chat"),
        ([{"role": "user", "content": "hi", "timestamp": "2026-01-01T00:00:00Z"}], "generic"),
        ([{"role": "assistant", "tool_calls": []}, {"role": "user", "content": "x", "timestamp": 1}], "openai_chat"),
        ([{"role": "tool", "tool_call_id": "a", "content": "x", "timestamp": "2026-01-01T00:00:00Z"}], "openai_chat"),
    ],
    ids=["no-timestamps", "timestamps", "tool-calls-win", "tool-call-id-wins"],
)
def test_chat_lines_are_told_apart_from_generic_lines(lines: list[dict], expected: str) -> None:
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)

    assert detect_format(data, "/c/chat.jsonl") == expected


def test_pretty_printed_and_single_line_documents() -> None:
    messages = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]
    pretty = json.dumps({"messages": messages}, indent=2).encode()
    single = json.dumps({"messages": messages}).encode()

    for data in (pretty, single):
        result = parse_file("/c/doc.jsonl", "/c", data)
        assert [m.message_id for m in result.sessions[0].messages] == ["M1", "M2"]
        assert result.consumed_bytes == len(data)
