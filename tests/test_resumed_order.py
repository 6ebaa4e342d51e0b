"""A resumed Claude Code session whose carried-over history carries LATER timestamps than the new lines, with a
compaction boundary in between: every step after the parser (collapse, chunking, session end, recap, summary,
the warehouse and the client) keeps the file's order and never re-sorts by timestamp."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionmem_pipeline.client import SessionMemory
from sessionmem_pipeline.config import load_settings
from sessionmem_pipeline.core.chunk import chunk_session
from sessionmem_pipeline.core.collapse import collapse_messages
from sessionmem_pipeline.core.ending import session_ending
from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.models import KIND_COMPACTION, Message
from sessionmem_pipeline.core.recap import SECTION_GOAL, SECTION_OUTCOME, recap_session
from sessionmem_pipeline.core.summarize import summarize_session
from sessionmem_pipeline.stages.run import index_sources

SESSION = "7a1c0e55-2b9d-4f3e-8c61-0d4e5f6a7b8c"
FINAL = "u12"
FIRST_REQUEST = "The payment client retries forever on a 402. Stop retrying on 4xx in payments/client.py."
LATEST_REQUEST = "Now add a regression test for the 402 case in tests/test_payment_client.py and run it."


def _line(number: int, kind: str, stamp: str, **fields: object) -> dict:
    base = {
        "parentUuid": f"u{number - 1}" if number > 1 else None, "isSidechain": False, "userType": "external",
        "cwd": "/home/dev/payments", "sessionId": SESSION, "version": "2.0.76", "gitBranch": "fix/no-retry-4xx",
        "type": kind, "uuid": f"u{number}", "timestamp": stamp,
    }
    return {**base, **fields}


def _user(number: int, stamp: str, content: object, **fields: object) -> dict:
    return _line(number, "user", stamp, message={"role": "user", "content": content}, **fields)


def _assistant(number: int, stamp: str, response: str, block: dict) -> dict:
    body = {"model": "claude-opus-4-5", "id": response, "type": "message", "role": "assistant", "content": [block]}
    return _line(number, "assistant", stamp, message=body)


def _result(number: int, stamp: str, call_id: str, output: str) -> dict:
    return _user(number, stamp, [{"type": "tool_result", "tool_use_id": call_id, "content": output, "is_error": False}])


def _tool(call_id: str, name: str, **tool_input: object) -> dict:
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def resumed_session_lines() -> list[dict]:
    """Carried-over history stamped 15:00 (the resumed run's clock), the new work stamped 09:00 to 09:06."""
    later, new = "2026-02-10T15:0{}:00.000Z", "2026-02-10T09:0{}:00.000Z"
    edit = _tool("toolu_edit", "Edit", file_path="payments/client.py", old_string="if status >= 400:",
                 new_string="if 400 <= status < 500:\n        raise PaymentDeclined(status)")
    pytest_call = _tool("toolu_pytest", "Bash", command="pytest tests/test_payment_client.py -q")
    return [
        {"type": "summary", "summary": "Payment client retries forever on 402", "leafUuid": "u4"},
        _user(1, later.format(1), FIRST_REQUEST),
        _assistant(2, later.format(2), "msg_A", edit),
        _result(3, later.format(3), "toolu_edit", "The file payments/client.py has been updated."),
        _assistant(4, later.format(4), "msg_B", {"type": "text", "text": "Fixed: 4xx answers now raise "
                                                 "PaymentDeclined instead of retrying."}),
        _line(5, "system", new.format(0), subtype="compact_boundary", content="Conversation compacted",
              parentUuid=None, logicalParentUuid="u4", compactMetadata={"trigger": "auto", "preTokens": 151234}),
        _user(6, new.format(0), "This session is being continued from a previous conversation that ran out of "
              "context. The payment client no longer retries on 4xx.", isCompactSummary=True,
              isVisibleInTranscriptOnly=True),
        _user(7, new.format(1), LATEST_REQUEST),
        _assistant(8, new.format(2), "msg_C", _tool("toolu_write", "Write", file_path="tests/test_payment_client.py",
                                                     content="def test_402_is_not_retried():\n    ...\n")),
        _result(9, new.format(3), "toolu_write", "File created successfully at: tests/test_payment_client.py"),
        _assistant(10, new.format(4), "msg_D", pytest_call),
        _result(11, new.format(5), "toolu_pytest", "4 passed in 0.21s"),
        _assistant(12, new.format(6), "msg_E", {"type": "text", "text": "Added tests/test_payment_client.py: the 402 "
                                                "case is covered and all 4 tests pass."}),
    ]


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    path = tmp_path / "sources" / "-home-dev-payments" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in resumed_session_lines()), encoding="utf-8")
    return path


def parsed(source: Path) -> list[Message]:
    (session,) = parse_file(str(source), str(source.parents[1]), source.read_bytes(), final=True).sessions
    return session.messages


def test_the_file_order_is_the_session_order_whatever_the_timestamps(source: Path) -> None:
    messages = parsed(source)

    assert [m.source_line for m in messages] == sorted(m.source_line for m in messages)
    assert messages[-1].message_id == FINAL and messages[0].text == FIRST_REQUEST
    assert messages[0].timestamp > messages[-1].timestamp  # the carried-over history really is stamped later
    assert [m.kind for m in messages if m.kind == KIND_COMPACTION] == [KIND_COMPACTION]


def test_collapse_and_chunks_keep_the_file_order(source: Path) -> None:
    messages = parsed(source)
    collapsed = collapse_messages(messages)
    chunks = chunk_session(collapsed, max_tokens=60).chunks
    seq_of = {m.message_id: m.seq for m in messages}

    assert [m.message_id for m in collapsed] == [m.message_id for m in messages]
    in_chunks = [seq_of[mid] for chunk in sorted(chunks, key=lambda c: c.chunk_index) for mid in chunk.message_ids]
    assert len(chunks) > 1 and in_chunks == sorted(in_chunks)
    assert all(c.ts_start <= c.ts_end for c in chunks if c.ts_start)


def test_the_session_ends_on_its_last_line_not_its_latest_timestamp(source: Path) -> None:
    ending = session_ending(parsed(source))

    assert not ending.abrupt  # the final reply (stamped earliest) is the last event


def test_recap_and_summary_read_the_end_of_the_file_as_the_end(source: Path) -> None:
    messages = parsed(source)
    recap = recap_session(messages)
    summary = summarize_session(collapse_messages(messages))

    goal = [line.text for line in recap.lines if line.section == SECTION_GOAL]
    assert goal and "regression test" in goal[0]  # the latest request leads
    outcome = " ".join(line.text for line in recap.lines if line.section == SECTION_OUTCOME)
    assert "4 tests pass" in outcome
    assert not recap.ended_abruptly and "continued from a previous conversation" not in recap.text
    assert summary.last_message_id == FINAL


def test_the_warehouse_and_the_client_keep_the_file_order(source: Path, tmp_path: Path) -> None:
    flags = {"warehouse": str(tmp_path / "w.duckdb"), "sources": [str(source.parents[1])], "summaries.enabled": True}
    settings = load_settings(flags=flags, env={}, cwd=tmp_path, home=tmp_path)
    index_sources(settings)
    memory = SessionMemory(settings=settings)

    history = memory.get_history(SESSION)
    assert history["messages"][0]["message_id"] == "u1" and history["messages"][-1]["message_id"] == FINAL
    ours = [summary for summary in history["summaries"] if summary["source"] == "sessionmem"]
    assert ours and ours[-1]["last_message_id"] == FINAL
    recap = memory.recap(session_id=SESSION)
    assert not recap.ended_abruptly and "regression test" in recap.text
