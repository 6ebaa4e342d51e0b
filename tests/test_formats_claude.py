"""Claude Code transcripts: joined responses, paired tool results, injected text, compaction, subagents, versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionmem_pipeline.core.formats import parse_file, validate_file
from sessionmem_pipeline.core.models import (
    KIND_COMPACTION,
    KIND_EVENT,
    KIND_INJECTED,
    KIND_MESSAGE,
    Message,
    ParsedSession,
    ParseResult,
)

ROOT = Path(__file__).parent / "fixtures" / "transcripts" / "claude_code"
SHOP_ID = "5c1e7d2a-8b3f-4e61-9a0d-2f4b6c8e1a37"
SHOP = f"-home-dev-shop/{SHOP_ID}.jsonl"
LEGACY = "-home-dev-legacy-api/0b9e4c11-6d2a-4f3b-8e57-1c9a3d5f7b20.jsonl"
BLOG_ID = "9d4a2f61-3c8e-4b7d-a1f0-6e5b8c2d9a14"


def parse_fixture(relative: str) -> ParseResult:
    path = ROOT / relative
    return parse_file(str(path), str(ROOT), path.read_bytes(), final=True)


def only_session(relative: str) -> ParsedSession:
    result = parse_fixture(relative)
    assert result.format == "claude_code" and len(result.sessions) == 1
    return result.sessions[0]


def source_line(relative: str, number: int) -> dict:
    return json.loads((ROOT / relative).read_text().splitlines()[number - 1])


def by_line(session: ParsedSession, number: int) -> Message:
    return next(m for m in session.messages if m.source_line == number)


def test_session_identity_title_and_versions() -> None:
    session = only_session(SHOP)

    assert session.session_id == SHOP_ID
    assert session.project == "shop"
    assert (session.cwd, session.git_branch) == ("/home/dev/shop", "fix/cart-total")
    assert session.title == "Cart total off by one cent with discounts"
    assert session.model == "claude-opus-4-6"
    assert session.metadata["versions"] == ["2.1.37", "2.1.39"]  # two CLI versions wrote this file
    assert session.parent_session_id is None


def test_one_api_response_written_as_several_lines_is_one_message() -> None:
    session = only_session(SHOP)
    first_reply = by_line(session, 6)

    assert first_reply.message_id == source_line(SHOP, 6)["uuid"]  # the uuid of the response's first line
    assert first_reply.role == "assistant"
    assert first_reply.thinking.startswith("The user reports a rounding issue")
    assert first_reply.text == "I'll find where the cart computes its total."
    assert [call.name for call in first_reply.tool_calls] == ["Grep"]
    assert first_reply.metadata == {"version": "2.1.37", "model": "claude-opus-4-6"}
    assert not any(m.source_line in (7, 8) for m in session.messages)


def test_tool_results_fill_their_calls_and_make_no_user_message() -> None:
    session = only_session(SHOP)
    grep = by_line(session, 6).tool_calls[0]
    failing_tests = by_line(session, 15).tool_calls[0]

    assert grep.call_id == "toolu_01GrepCartTotal9x"
    assert grep.input["pattern"] == "def (total|apply_discount)"
    assert grep.output is not None and grep.output.startswith("src/shop/cart.py:38:")
    assert failing_tests.is_error and failing_tests.output.startswith("Exit code 1\n")
    user_lines = [m for m in session.messages if m.role == "user" and m.kind == KIND_MESSAGE]
    assert [m.source_line for m in user_lines] == [4, 27, 36]


def test_a_session_that_ends_mid_tool_call_keeps_the_call_without_output() -> None:
    last = only_session(SHOP).messages[-1]

    assert last.tool_calls[0].name == "Bash"
    assert last.tool_calls[0].output is None and not last.tool_calls[0].is_error


def test_injected_text_events_and_compaction_are_kept_apart_from_what_the_person_typed() -> None:
    session = only_session(SHOP)
    kinds = {m.source_line: (m.role, m.kind, m.text) for m in session.messages if m.kind != KIND_MESSAGE}

    assert kinds[5][:2] == ("user", KIND_INJECTED) and "<system-reminder>" in kinds[5][2]
    assert kinds[18] == ("system", KIND_EVENT, "API error 529: Overloaded (retry 1 of 10 in 0.6 s)")
    assert kinds[33] == ("system", KIND_EVENT, "Conversation compacted (auto, 170251 tokens)")
    assert kinds[34][:2] == ("system", KIND_COMPACTION)
    assert kinds[34][2].startswith("This session is being continued from a previous conversation")
    assert kinds[35] == ("system", KIND_EVENT, "Local command: /cost")


def test_bookkeeping_lines_are_skipped_and_counted() -> None:
    result = parse_fixture(SHOP)

    assert result.skipped == {
        "file-history-snapshot": 1,
        "progress": 3,
        "queue-operation": 2,
        "system:stop_hook_summary": 1,
        "system:turn_duration": 1,
    }
    assert result.warnings == [] and result.lines_read == 38


def test_file_order_is_the_order_even_when_timestamps_go_backwards() -> None:
    session = only_session(SHOP)

    assert [m.seq for m in session.messages] == list(range(len(session.messages)))
    assert [m.source_line for m in session.messages] == sorted(m.source_line for m in session.messages)
    times = [m.timestamp for m in session.messages]
    assert None not in times and times != sorted(times)  # the fixture's clock goes backwards at line 24


def test_images_and_documents_become_placeholders_not_base64() -> None:
    screenshot = by_line(only_session(SHOP), 27)
    spec = by_line(only_session(LEGACY), 6)

    assert screenshot.text.startswith("[image: image/png]\n\nThe checkout page also logs this warning")
    assert spec.text.startswith("[document: application/pdf]\n\nImplement per-client rate limiting")
    assert "iVBORw0KGgo" not in screenshot.text and "JVBERi0" not in spec.text


def test_legacy_versions_commands_interruptions_and_synthetic_replies() -> None:
    result = parse_fixture(LEGACY)
    session = result.sessions[0]
    rows = [(m.role, m.kind, m.text.split("\n")[0]) for m in session.messages]

    assert session.metadata["versions"] == ["1.0.117", "1.0.120"]
    assert session.title == "Token bucket rate limiter in Redis"  # the last summary line wins
    assert session.metadata["titles"][0] == "Rate limiting design for the public API"
    assert rows[0][:2] == ("user", KIND_INJECTED)  # the local-command caveat
    assert rows[1] == ("user", KIND_MESSAGE, "/cost")
    assert session.messages[1].metadata["command"] == "/cost"
    assert rows[2] == ("system", KIND_EVENT, "Local command output: Total cost:            $0.42")
    assert ("system", KIND_EVENT, "Request interrupted by user") in rows
    assert rows[-1] == ("system", KIND_EVENT, "No response requested.")  # written by the CLI, model <synthetic>
    assert session.model == "claude-sonnet-4-20250514"
    assert result.skipped == {"system:informational": 1}


def test_a_tool_error_given_as_a_plain_string() -> None:
    write = by_line(only_session(LEGACY), 11).tool_calls[0]

    assert write.name == "Write" and write.is_error
    assert write.output == (
        "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>"
    )


@pytest.mark.parametrize(
    ("relative", "expected_id", "parent"),
    [
        (f"-home-dev-shop/{SHOP_ID}/subagents/agent-a4f91c2.jsonl", f"{SHOP_ID}/a4f91c2", SHOP_ID),
        ("-home-dev-blog/agent-5e6f7a8b.jsonl", f"{BLOG_ID}/5e6f7a8b", BLOG_ID),
    ],
    ids=["subagents-folder", "beside-the-session"],
)
def test_subagent_files_are_their_own_sessions_linked_to_the_parent(
    relative: str, expected_id: str, parent: str
) -> None:
    session = only_session(relative)

    assert session.session_id == expected_id
    assert session.parent_session_id == parent
    assert all(m.session_id == expected_id for m in session.messages)
    assert session.messages[0].role == "user"  # the Task prompt
    assert session.messages[-1].text.startswith(("The warning comes from", "Header: src/components/Header.astro"))


WARMUP = "-home-dev-blog/agent-c81d4e2.jsonl"  # shaped like 2.0.x warmup files in public repositories


def test_a_warmup_sidechain_is_skipped_with_its_reason_not_quarantined() -> None:
    result = parse_fixture(WARMUP)
    path = ROOT / WARMUP

    assert result.sessions == [] and result.skipped_sessions() == {"warmup sidechain": 1}
    report = validate_file(str(path), str(ROOT), path.read_bytes(), final=True)
    assert report.valid and report.quarantine_reason is None
    assert report.warnings == (f"{path}: skipped: warmup sidechain",)


@pytest.mark.parametrize(
    ("path", "first_line"),
    [
        ("/p/-w-app/agent-1a2b3c4d.jsonl", {"isSidechain": True, "message": {"role": "user", "content": "Warmup now"}}),
        ("/p/-w-app/parent-1.jsonl", {"message": {"role": "user", "content": "Warmup"}}),  # a person typed it
    ],
    ids=["subagent-with-a-task", "main-session"],
)
def test_only_a_sidechain_whose_prompt_is_exactly_warmup_is_skipped(path: str, first_line: dict) -> None:
    reply = assistant(2, "msg_R", {"type": "text", "text": "Ready."})
    result = parse_file(path, "/p", as_bytes(envelope("user", 1, **first_line), reply), final=True)

    assert len(result.sessions) == 1 and result.skipped_sessions() == {}


def envelope(kind: str, number: int, **fields: object) -> dict:
    base = {"type": kind, "uuid": f"u{number}", "parentUuid": None, "sessionId": "parent-1", "cwd": "/w/app"}
    base["timestamp"] = f"2026-01-01T00:00:{number:02d}Z"
    return {**base, **fields}


def assistant(number: int, response: str, block: dict) -> dict:
    body = {"id": response, "role": "assistant", "model": "m", "content": [block]}
    return envelope("assistant", number, message=body)


def tool_result(number: int, call_id: str, content: object) -> dict:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    return envelope("user", number, message={"role": "user", "content": [block]})


def as_bytes(*rows: dict) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def test_subagent_without_agent_id_takes_it_from_the_file_name() -> None:
    data = as_bytes(envelope("user", 1, isSidechain=True, message={"role": "user", "content": "Find the config"}))

    result = parse_file("/p/-w-app/agent-1a2b3c4d.jsonl", "/p", data, final=True)

    assert result.sessions[0].session_id == "parent-1/1a2b3c4d"
    assert result.sessions[0].parent_session_id == "parent-1"


def test_parallel_tool_calls_join_even_when_results_sit_between_their_lines() -> None:
    data = as_bytes(
        assistant(1, "msg_A", {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a.py"}}),
        tool_result(2, "t1", "A"),
        assistant(3, "msg_A", {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "b.py"}}),
        tool_result(4, "t2", [{"type": "text", "text": "B"}, {"type": "image", "source": {"media_type": "image/gif"}}]),
    )

    messages = parse_file("/p/x/s.jsonl", "/p", data, final=True).sessions[0].messages

    assert len(messages) == 1 and messages[0].message_id == "u1"
    assert [(c.call_id, c.output) for c in messages[0].tool_calls] == [("t1", "A"), ("t2", "B\n[image: image/gif]")]


def test_unknown_types_blocks_and_results_are_counted_warnings() -> None:
    data = as_bytes(
        {"type": "custom-title", "customTitle": "x"},
        assistant(2, "msg_B", {"type": "hologram", "data": 1}),
        tool_result(3, "nope", "?"),
        envelope("system", 4, subtype="brand_new_subtype"),
        envelope("user", 5, message="not an object"),
        envelope("user", 6, message={"role": "user", "content": "still here"}),
    )

    result = parse_file("/p/x/s.jsonl", "/p", data, final=True)

    assert [w.line for w in result.warnings] == [1, 2, 3, 4, 5]
    assert "unknown line type 'custom-title'" in result.warnings[0].reason
    assert "tool_result for unknown or already answered tool_use id 'nope'" in result.warnings[2].reason
    assert [m.text for m in result.sessions[0].messages] == ["still here"]
