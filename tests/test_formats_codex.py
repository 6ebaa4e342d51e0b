"""Codex CLI rollouts: 0.40 JSON-string outputs, 0.104+ plain outputs and commentary, compaction, pre-envelope files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.models import (
    KIND_COMPACTION,
    KIND_EVENT,
    KIND_INJECTED,
    KIND_MESSAGE,
    ParsedSession,
    ParseResult,
    ToolCall,
)

ROOT = Path(__file__).parent / "fixtures" / "transcripts" / "codex"
OLD_ID = "01997ea4-2b1c-7d3e-9f40-5a6b7c8d9e0f"
OLD = f"2025/09/25/rollout-2025-09-24T20-12-23-{OLD_ID}.jsonl"
NEW_ID = "019c8f2e-5a71-7b02-8c3d-4e5f60718293"
NEW = f"2026/02/24/rollout-2026-02-24T10-02-11-{NEW_ID}.jsonl"
PRE = "2025/08/12/rollout-2025-08-12T16-30-00-4f2e8d1c-9a7b-4c3d-8e5f-6a7b8c9d0e1f.jsonl"


def parse_fixture(relative: str) -> ParseResult:
    path = ROOT / relative
    return parse_file(str(path), str(ROOT), path.read_bytes(), final=True)


def only_session(relative: str) -> ParsedSession:
    result = parse_fixture(relative)
    assert result.format == "codex" and len(result.sessions) == 1 and not result.warnings
    return result.sessions[0]


def test_session_identity_from_session_meta_and_model_from_turn_context() -> None:
    session = only_session(OLD)

    assert session.session_id == OLD_ID
    assert (session.project, session.cwd, session.git_branch) == ("ledger", "/Users/maya/dev/ledger", "feat/csv-export")
    assert session.model == "gpt-5-codex"
    assert session.metadata["cli_version"] == "0.40.0" and session.metadata["originator"] == "codex_vscode"


def test_each_prompt_appears_once_although_codex_writes_it_twice() -> None:
    result = parse_fixture(OLD)
    prompts = [m for m in result.sessions[0].messages if m.role == "user" and m.kind == KIND_MESSAGE]

    assert [m.text for m in prompts] == [
        "Add a --format csv option to `ledger report` so I can paste monthly totals into a spreadsheet.",
        "Is there a standard way to stream large CSV exports in Python without holding everything in memory?",
        "Great. Also add --format xlsx.",
    ]
    assert [m.message_id for m in prompts] == ["L4", "L26", "L31"]  # the first copy's line
    assert result.skipped["duplicate user prompt"] == 3


def test_prompt_copies_in_the_other_order_are_deduplicated_too() -> None:
    session = only_session(NEW)
    second_prompt = [m for m in session.messages if m.role == "user" and m.kind == KIND_MESSAGE][1]

    assert second_prompt.message_id == "L31"  # the event_msg copy came first this time
    assert second_prompt.text == "Now add a regression test for the empty notebook case."


def test_a_turn_reads_in_its_real_order_with_the_answer_after_every_call() -> None:
    """0.40: reasoning, calls, more reasoning and calls, then the answer: each step is a message with its thinking
    and calls, and the answer comes last, after every call (not before them, as if the session ended on a call)."""
    replies = only_session(OLD).messages[2:6]

    assert [(m.role, m.message_id) for m in replies] == [("assistant", f"L{n}") for n in (7, 13, 18, 24)]
    assert replies[0].thinking.startswith("**Locating the report command**")
    assert [[c.name for c in m.tool_calls] for m in replies] == [
        ["shell", "shell"], ["apply_patch", "shell"], ["apply_patch", "shell"], []
    ]
    assert not any(m.text for m in replies[:3])
    assert replies[3].text.startswith("Added `--format csv` to `ledger report`")
    assert replies[3].metadata == {"model": "gpt-5-codex"}


def test_json_string_outputs_of_0_40_are_unwrapped_and_exit_codes_kept() -> None:
    calls = [call for m in only_session(OLD).messages[2:5] for call in m.tool_calls]

    assert calls[0].input == {
        "command": ["bash", "-lc", 'rg -n "def report|--format" ledger'],
        "workdir": "/Users/maya/dev/ledger",
        "timeout_ms": 120000,
    }
    assert calls[0].output.startswith("ledger/cli.py:41:def report") and not calls[0].is_error
    assert calls[3].is_error
    assert calls[3].output.startswith("Exit code 1\nF.....\nFAILED tests/test_cli.py::test_report_csv")
    assert calls[2].input["input"].startswith("*** Begin Patch\n*** Update File: ledger/cli.py")
    assert calls[2].output == "Success. Updated the following files:\nM ledger/cli.py\n"


def test_web_search_and_an_interrupted_turn() -> None:
    messages = only_session(OLD).messages

    assert messages[7].tool_calls == (
        ToolCall("web_search", {"query": "python csv writer stream large export generator"}, "", False, None),
    )
    aborted_call = messages[10].tool_calls[0]
    assert aborted_call.output is None  # the turn was interrupted before the command finished
    assert (messages[11].role, messages[11].kind) == ("system", KIND_EVENT)
    assert messages[11].text == "Turn aborted (interrupted)" and messages[11].metadata["turn_aborted"] is True


def test_injected_context_is_kept_apart_from_the_persons_words() -> None:
    injected = [(m.role, m.text.split("\n")[0]) for m in only_session(NEW).messages if m.kind == KIND_INJECTED]

    assert injected == [
        ("system", "<permissions instructions>"),
        ("user", "# AGENTS.md instructions for /home/dev/notes"),
        ("user", "<environment_context>"),
    ]


def test_plain_outputs_of_0_104_keep_only_the_commands_output() -> None:
    reproduce, read = only_session(NEW).messages[4].tool_calls

    assert reproduce.is_error
    assert reproduce.output.startswith("Exit code 1\nTraceback (most recent call last):")
    assert "Chunk ID" not in reproduce.output and "Wall time" not in reproduce.output
    assert read.output.startswith("def plan_sync(notebook: Notebook) -> SyncPlan:") and not read.is_error


def test_commentary_splits_a_turn_into_steps_with_their_calls() -> None:
    replies = [m for m in only_session(NEW).messages if m.role == "assistant"]

    assert [(m.message_id, len(m.tool_calls)) for m in replies] == [("L10", 2), ("L18", 2), ("L25", 0), ("L33", 1)]
    assert replies[1].thinking == "**Guarding the empty case**"
    assert replies[1].text.startswith("`plan_sync` reads `pages[0]` unconditionally")
    assert replies[0].metadata == {"turn_id": "turn_01", "model": "gpt-5.2-codex"}
    assert replies[3].metadata == {"turn_id": "turn_02", "model": "gpt-5.3-codex"}


def test_compaction_and_a_session_ending_mid_tool_call() -> None:
    session = only_session(NEW)
    compaction = next(m for m in session.messages if m.kind == KIND_COMPACTION)

    assert compaction.role == "system"
    assert compaction.text == (
        "Context compacted; the earlier conversation was replaced by 5 items"
        " (2 user, 1 assistant, 1 developer, 1 compaction)"
    )
    assert session.messages[-1].tool_calls[0].output is None
    assert session.model == "gpt-5.3-codex"


def test_the_pre_envelope_layout() -> None:
    result = parse_fixture(PRE)
    session = result.sessions[0]

    assert session.session_id == "4f2e8d1c-9a7b-4c3d-8e5f-6a7b8c9d0e1f"
    assert session.project == "weather-cli"  # from <environment_context>, since there is no session_meta.cwd
    assert [(m.role, m.kind) for m in session.messages] == [
        ("user", KIND_INJECTED),
        ("user", KIND_MESSAGE),
        ("assistant", KIND_MESSAGE),  # the call
        ("assistant", KIND_MESSAGE),  # the answer after it
    ]
    assert session.messages[2].tool_calls[0].output.startswith("def retry(times: int = 3")
    assert session.messages[3].text and not session.messages[3].tool_calls
    assert result.skipped == {"record_type:state": 3}


def rollout(*items: tuple[str, dict]) -> bytes:
    rows = [{"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "s-1", "cwd": "/w/app"}}]
    rows += [{"timestamp": "2026-01-01T00:00:01Z", "type": kind, "payload": payload} for kind, payload in items]
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def call_and_output(output: object) -> bytes:
    return rollout(
        ("response_item", {"type": "function_call", "name": "shell", "arguments": "not json", "call_id": "c1"}),
        ("response_item", {"type": "function_call_output", "call_id": "c1", "output": output}),
    )


@pytest.mark.parametrize(
    ("output", "expected_text", "expected_error"),
    [
        (json.dumps({"output": "ok\n", "metadata": {"exit_code": 0}}), "ok\n", False),
        (json.dumps({"output": "boom", "metadata": {"exit_code": 2}}), "Exit code 2\nboom", True),
        ("Chunk ID: a\nWall time: 1 seconds\nProcess exited with code 0\nOutput:\nfine\n", "fine\n", False),
        ("Process exited with code 127\nOutput:\nbash: nope: not found", "Exit code 127\nbash: nope: not found", True),
        ("Process running with session ID 7\nOutput:\nwait", "Process running with session ID 7\nOutput:\nwait", False),
        ("aborted by user", "aborted by user", False),
        ('{"temperature": 3}', '{"temperature": 3}', False),
        ([{"type": "input_text", "text": "listed"}], "listed", False),
        ({"content": "denied", "success": False}, "denied", True),
    ],
    ids=["json-0", "json-2", "plain-0", "plain-127", "still-running", "bare-text", "tool-json", "content-list", "success-false"],
)
def test_tool_outputs_of_every_version(output: object, expected_text: str, expected_error: bool) -> None:
    call = parse_file("/r/x.jsonl", "/r", call_and_output(output), final=True).sessions[0].messages[0].tool_calls[0]

    assert (call.output, call.is_error) == (expected_text, expected_error)
    assert call.input == {"arguments": "not json"}  # unparseable arguments are kept raw


def test_ide_context_is_moved_to_metadata_and_compacted_message_text_is_kept() -> None:
    ide_prompt = (
        "# Context from my IDE setup:\n\n## Active file: src/app.ts\n\n## My request for Codex:\nrename foo to bar\n"
    )
    data = rollout(
        ("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ide_prompt}]}),
        ("event_msg", {"type": "user_message", "message": ide_prompt, "images": ["data:image/png;base64,AAAA"]}),
        ("compacted", {"message": "Summary: renamed foo to bar in src/app.ts.", "replacement_history": []}),
    )

    result = parse_file("/r/x.jsonl", "/r", data, final=True)
    prompt, compaction = result.sessions[0].messages

    assert prompt.text == "rename foo to bar"
    assert prompt.metadata["ide_context"] == "# Context from my IDE setup:\n\n## Active file: src/app.ts"
    assert result.skipped["duplicate user prompt"] == 1
    assert compaction.text == "Summary: renamed foo to bar in src/app.ts."


def test_broken_and_unknown_lines_are_warnings() -> None:
    data = rollout(
        ("response_item", {"type": "hologram"}),
        ("mystery", {}),
        ("event_msg", {"type": "error", "message": "stream disconnected"}),
        ("response_item", {"type": "function_call_output", "call_id": "ghost", "output": "x"}),
    ) + b'{"timestamp": "2026-01-01T00:00:02Z", "type": "response_item", "payload": "flat"}\n'

    result = parse_file("/r/x.jsonl", "/r", data, final=True)

    assert [w.line for w in result.warnings] == [2, 3, 5, 6]
    assert result.warnings[-1].reason == "response_item line without a payload object; line skipped"
    assert [m.text for m in result.sessions[0].messages] == ["Error: stream disconnected"]
