"""The specs' generic JSONL: ids, the 30-minute split, the project rule, unknown fields, bad lines."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sessionmem_pipeline.core.formats import parse_file
from sessionmem_pipeline.core.models import ParseResult

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts" / "generic"
START = datetime(2026, 1, 15, 9, 0, tzinfo=timezone.utc)


def parse_fixture(relative: str) -> ParseResult:
    path = FIXTURES / relative
    return parse_file(str(path), str(FIXTURES), path.read_bytes(), final=True)


def jsonl(*rows: dict) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def line(role: str, minutes: float, content: str = "hello", **extra: object) -> dict:
    return {"role": role, "content": content, "timestamp": (START + timedelta(minutes=minutes)).isoformat(), **extra}


def test_a_file_without_session_ids_splits_at_the_lunch_break() -> None:
    result = parse_fixture("team-sync/2026-01-15.jsonl")

    assert result.format == "generic"
    assert [s.session_id for s in result.sessions] == ["team-sync/2026-01-15#1", "team-sync/2026-01-15#2"]
    morning, afternoon = result.sessions
    assert [m.message_id for m in morning.messages] == ["m-001", "m-002", "m-003", "L5", "L7"]
    assert [m.message_id for m in afternoon.messages] == ["m-101", "m-102", "m-103"]
    assert [m.seq for m in afternoon.messages] == [0, 1, 2]
    assert all(m.session_id == "team-sync/2026-01-15#2" for m in afternoon.messages)


def test_speakers_unknown_fields_and_text_blocks_are_kept() -> None:
    morning = parse_fixture("team-sync/2026-01-15.jsonl").sessions[0]
    first, second, third = morning.messages[:3]

    assert (first.role, first.speaker) == ("user", "Priya")
    assert second.speaker == "Alfred" and second.metadata == {"channel": "#eng-data", "model": "gpt-4o"}
    assert third.text == "Can we move the export to 03:00, after the vacuum finishes?"
    assert third.metadata["reactions"] == ["+1"]
    assert first.timestamp == datetime(2026, 1, 15, 9, 0, 12, tzinfo=timezone.utc)
    assert first.source_line == 1 and first.source_path.endswith("2026-01-15.jsonl")


def test_bad_lines_are_skipped_with_warnings_naming_the_line() -> None:
    result = parse_fixture("team-sync/2026-01-15.jsonl")

    reasons = {warning.line: warning.reason for warning in result.warnings}
    assert reasons[4].startswith("invalid JSON")
    assert reasons[6] == "unknown role 'moderator' (expected user, assistant, system or tool); line skipped"
    assert reasons[7] == "missing timestamp; message kept without a time"
    kept_without_time = result.sessions[0].messages[-1]
    assert kept_without_time.message_id == "L7" and kept_without_time.timestamp is None


def test_project_is_the_folder_under_the_root_or_the_cwd() -> None:
    assert {s.project for s in parse_fixture("team-sync/2026-01-15.jsonl").sessions} == {"team-sync"}
    by_id = {s.session_id: s for s in parse_fixture("agents/mixed-ids.jsonl").sessions}
    assert by_id["sess-db-choice"].project == "booking"
    assert by_id["sess-onboarding"].project == "handbook"
    assert by_id["sess-db-choice"].messages[0].cwd == "/srv/booking"


def test_lines_with_their_own_session_ids_group_by_id_in_first_appearance_order() -> None:
    result = parse_fixture("agents/mixed-ids.jsonl")

    assert [s.session_id for s in result.sessions] == ["sess-db-choice", "sess-onboarding"]
    db_choice = result.sessions[0]
    assert [m.message_id for m in db_choice.messages] == ["L1", "L2", "7"]  # integer ids become strings
    assert db_choice.messages[2].text == "Agreed, let's go with PostgreSQL."


@pytest.mark.parametrize(
    ("gap_minutes", "expected_ids"),
    [(29, ["chat"]), (30, ["chat"]), (31, ["chat#1", "chat#2"]), (-90, ["chat"])],
    ids=["under", "exactly-30-is-no-gap", "over", "clock-going-backwards"],
)
def test_split_only_on_gaps_over_30_minutes(gap_minutes: int, expected_ids: list[str]) -> None:
    data = jsonl(line("user", 0), line("assistant", 1), line("user", 1 + gap_minutes))

    result = parse_file("/data/chat.jsonl", "/data", data, final=True)

    assert [s.session_id for s in result.sessions] == expected_ids
    assert sum(len(s.messages) for s in result.sessions) == 3


def test_a_file_directly_under_the_root_takes_the_roots_name_as_project() -> None:
    result = parse_file("/home/me/chats/notes.jsonl", "/home/me/chats", jsonl(line("user", 0)), final=True)

    assert result.sessions[0].project == "chats"
    assert result.sessions[0].session_id == "notes"


def test_a_half_written_last_line_is_left_for_the_next_run() -> None:
    complete = jsonl(line("user", 0), line("assistant", 1))
    data = complete + b'{"role": "user", "content": "still typ'

    live = parse_file("/d/a.jsonl", "/d", data)
    finished = parse_file("/d/a.jsonl", "/d", data, final=True)

    assert live.consumed_bytes == len(complete) and not live.warnings
    assert len(live.sessions[0].messages) == 2
    assert finished.consumed_bytes == len(data)
    assert [w.line for w in finished.warnings] == [3]


def test_duplicate_ids_are_made_unique_and_reported() -> None:
    data = jsonl(line("user", 0, id="a"), line("assistant", 1, id="a"))

    result = parse_file("/d/a.jsonl", "/d", data, final=True)

    assert [m.message_id for m in result.sessions[0].messages] == ["a", "a@L2"]
    assert "duplicate message id 'a' (first on line 1)" in result.warnings[0].reason


def test_unreadable_timestamps_and_unknown_blocks_are_warnings_not_failures() -> None:
    data = jsonl(
        line("user", 0, content=[{"type": "text", "text": "see"}, {"type": "audio", "data": "..."}]),
        {"role": "assistant", "content": "ok", "timestamp": "yesterday"},
    )

    result = parse_file("/d/a.jsonl", "/d", data, final=True)

    assert [m.text for m in result.sessions[0].messages] == ["see", "ok"]
    assert [w.reason for w in result.warnings] == [
        "content block of type 'audio' ignored",
        "unreadable timestamp 'yesterday'; message kept without a time",
    ]
