"""How a session ended (core/ending.py), on canonical messages and on real transcripts of each format as the parsers
read them: the last event decides, in the real order of the session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionmem_pipeline.core.ending import TURN_ABORTED, session_ending
from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.models import KIND_EVENT, KIND_INJECTED, Message, ToolCall

RECAP_SET = Path(__file__).resolve().parents[1] / "benchmarks/recap_set"


def message(seq: int, role: str, text: str = "", *calls: ToolCall, **metadata: object) -> Message:
    return Message("s", seq, f"m{seq}", role, text, tool_calls=calls, metadata=dict(metadata))


def bash(command: str, output: str | None) -> ToolCall:
    return ToolCall("Bash", {"command": command}, output=output)


OPENING = [message(0, "user", "Fix the CSV export."), message(1, "assistant", "Looking.", bash("cat export.py", "..."))]


@pytest.mark.parametrize(
    ("last", "abrupt", "words"),
    [
        (message(9, "assistant", "", bash("make deploy", None)), True, "never returned"),
        (message(9, "assistant", "Running the tests.", bash("pytest -q", "3 passed")), True, "(Ran `pytest -q`"),
        (message(9, "tool", "3 passed"), True, "no reply after it"),
        (message(9, "user", "Now ship it."), True, "got a reply"),
        (Message("s", 9, "m9", "system", "Turn aborted", kind=KIND_EVENT, metadata={TURN_ABORTED: True}), True, "aborted"),
        (message(9, "assistant", "All done: the export quotes commas."), False, ""),
    ],
    ids=["killed-mid-call", "tool-result-last", "tool-message-last", "request-unanswered", "aborted", "finished"],
)
def test_the_last_event_decides(last: Message, abrupt: bool, words: str) -> None:
    ending = session_ending([*OPENING, last])
    assert (ending.abrupt, ending.message_id) == (abrupt, "m9" if abrupt else None)
    assert words in ending.description


def test_what_is_not_conversation_is_looked_through() -> None:
    """A finished reply followed by `/exit`, its output, an API error, injected context and a thinking-only message
    is a finished session; the same tail after a tool call still ends mid-work."""
    tail = [
        message(10, "user", "/exit", command="/exit"),
        Message("s", 11, "m11", "system", "Bye!", kind=KIND_EVENT),
        Message("s", 12, "m12", "user", "<system-reminder>...</system-reminder>", kind=KIND_INJECTED),
        message(13, "assistant", ""),  # thinking only
    ]
    finished = session_ending([*OPENING, message(9, "assistant", "Done."), *tail])
    cut = session_ending([*OPENING, message(9, "assistant", "", bash("pytest", "ok")), *tail])
    assert not finished.abrupt
    assert cut.abrupt and cut.message_id == "m9"


def test_a_conversation_between_people_that_ends_on_a_person_is_not_abrupt() -> None:
    meeting = [message(0, "user", "Two tutorials?"), message(1, "assistant", "Yes."), message(2, "user", "Bye!")]
    assert not session_ending(meeting).abrupt


# ---- real order from the parsers -------------------------------------------------------------------------------


def _rollout(tmp_path: Path, *lines: dict) -> list[Message]:
    path = tmp_path / "rollout-2026-03-01T10-00-00-019c0000-0000-7000-8000-000000000001.jsonl"
    meta = {"type": "session_meta", "payload": {"id": "019c0000", "cwd": "/w", "cli_version": "0.125.0"}}
    path.write_text("\n".join(json.dumps({"timestamp": "2026-03-01T10:00:00Z", **x}) for x in (meta, *lines)) + "\n")
    return parse_file(str(path), str(tmp_path), path.read_bytes(), final=True).sessions[0].messages


def _item(**payload: object) -> dict:
    return {"type": "response_item", "payload": payload}


def _event(**payload: object) -> dict:
    return {"type": "event_msg", "payload": payload}


def _turn(*final: dict) -> list[dict]:
    """A 0.104+ turn: prompt, commentary, a call and its output, reasoning, another call, then `final`."""
    return [
        _event(type="user_message", message="Push the fix branch"),
        _item(type="reasoning", summary=[{"type": "summary_text", "text": "Check status"}]),
        _item(type="message", role="assistant", content=[{"type": "output_text", "text": "Checking the tree."}]),
        _item(type="function_call", name="exec_command", arguments='{"cmd":"git status"}', call_id="c1"),
        _item(type="function_call_output", call_id="c1", output="clean"),
        _item(type="reasoning", summary=[{"type": "summary_text", "text": "Push"}]),
        _item(type="function_call", name="exec_command", arguments='{"cmd":"git push -u origin fix"}', call_id="c2"),
        _item(type="function_call_output", call_id="c2", output="branch 'fix' set up"),
        *final,
    ]


def test_codex_final_message_after_tool_calls_is_last_and_finishes_the_session(tmp_path: Path) -> None:
    answer = "Pushed branch `fix`."
    messages = _rollout(tmp_path, *_turn(
        _event(type="agent_message", message=answer),
        _item(type="message", role="assistant", content=[{"type": "output_text", "text": answer}]),
        _event(type="task_complete", last_agent_message=answer),
    ))
    replies = [m for m in messages if m.role == "assistant"]
    assert [(m.text, [c.input["cmd"] for c in m.tool_calls]) for m in replies] == [
        ("Checking the tree.", ["git status"]),
        ("", ["git push -u origin fix"]),
        (answer, []),
    ]
    assert not session_ending(messages).abrupt


def test_codex_aborted_turn_ends_mid_work(tmp_path: Path) -> None:
    messages = _rollout(tmp_path, *_turn(_event(type="turn_aborted", reason="interrupted")))
    ending = session_ending(messages)
    assert ending.abrupt and "aborted" in ending.description and ending.message_id == messages[-1].message_id


@pytest.mark.parametrize(
    ("file", "abrupt", "last_words"),
    [
        ("cx-edgerunner-backend.jsonl", False, "Updated [.gitignore]"),  # 0.144: a turn aborted earlier, then work
        ("cx-agno-multimodal-review.jsonl", False, "**Findings**"),  # 0.114: the review follows 40 tool calls
        ("cx-x402-grant.jsonl", True, ""),  # 0.120: the file was copied while a call ran
        ("cc-ralph-sisyphus.jsonl", False, "Both are installed"),  # ends with turn_duration
        ("cc-app-shortcut.jsonl", True, ""),  # a Read result, then only thinking
        ("cc-display-timeout.jsonl", True, "Request interrupted by user"),
    ],
)
def test_real_sessions_end_where_they_really_end(file: str, abrupt: bool, last_words: str) -> None:
    path = RECAP_SET / file
    messages = parse_file(str(path), str(RECAP_SET), path.read_bytes(), final=True).sessions[0].messages
    ending = session_ending(messages)
    assert ending.abrupt is abrupt
    if last_words:
        last = next(m for m in reversed(messages) if m.text.strip() and m.role in ("assistant", "system"))
        assert last.text.lstrip().startswith(last_words)
