"""Hostile lines never sink their file: a line nested thousands of levels deep is skipped with its line number,
and implausible timestamps are kept, flagged and clamped so they never reorder sessions."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from sessionmem_pipeline.core.formats import inspect_file, parse_file
from sessionmem_pipeline.core.formats.source import MAX_NESTING

ROOT = "/data"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
DEEP = "[" * 10_000 + "]" * 10_000  # json.loads raises RecursionError on it


def claude_line(number: int, text: str, timestamp: object = None) -> str:
    role = "user" if number % 2 else "assistant"
    blocks = [{"type": "text", "text": text}]
    body = {"role": role, "content": text} if role == "user" else {"id": f"r{number}", "role": role, "content": blocks}
    moment = timestamp if timestamp is not None else f"2026-03-02T10:{number:02d}:00Z"
    return json.dumps({"type": role, "uuid": f"u{number}", "sessionId": "s-1", "timestamp": moment, "message": body})


def codex_line(number: int, text: str, timestamp: object = None) -> str:
    if number == 0:
        return json.dumps({"timestamp": "2026-03-02T10:00:00Z", "type": "session_meta", "payload": {"id": "s-1"}})
    role = "user" if number % 2 else "assistant"
    kind = "input_text" if role == "user" else "output_text"
    payload = {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}
    moment = timestamp if timestamp is not None else f"2026-03-02T10:{number:02d}:00Z"
    return json.dumps({"timestamp": moment, "type": "response_item", "payload": payload})


def generic_line(number: int, text: str, timestamp: object = None) -> str:
    role = "user" if number % 2 else "assistant"
    moment = timestamp if timestamp is not None else f"2026-03-02T10:{number:02d}:00Z"
    return json.dumps({"role": role, "content": text, "timestamp": moment})


FORMATS: dict[str, Callable[..., str]] = {"claude_code": claude_line, "codex": codex_line, "generic": generic_line}


def transcript(format_name: str, texts: list[str], times: dict[int, object] | None = None) -> bytes:
    """A file of `texts` as alternating user/assistant lines of the format (Codex gets its session_meta first)."""
    make = FORMATS[format_name]
    rows = [make(0, "")] if format_name == "codex" else []
    rows += [make(n, text, (times or {}).get(n)) for n, text in enumerate(texts, start=1)]
    return "".join(row + "\n" for row in rows).encode()


def deep_line(format_name: str) -> str:
    """A line of the format whose message content is an array nested 10,000 levels deep."""
    return FORMATS[format_name](9, "x").replace('"x"', DEEP)


@pytest.mark.parametrize("format_name", FORMATS)
def test_a_line_nested_ten_thousand_levels_deep_is_skipped_with_its_line_number(format_name: str) -> None:
    good = transcript(format_name, [f"message number {n}" for n in range(1, 7)]).decode().splitlines()
    middle = len(good) // 2
    data = "\n".join([*good[:middle], deep_line(format_name), *good[middle:]]) + "\n"
    path = f"/data/p/{format_name}.jsonl"

    report, result = inspect_file(path, ROOT, data.encode(), final=True, now=NOW)

    assert report.valid and report.format == format_name and report.bad_lines == 1
    assert f"{path}:{middle + 1}: invalid JSON: nested more than {MAX_NESTING} levels deep" in report.warnings
    assert result is not None
    texts = [m.text for s in result.sessions for m in s.messages]
    assert texts == [f"message number {n}" for n in range(1, 7)]


def test_a_deep_first_line_does_not_turn_the_file_into_a_broken_document() -> None:
    rest = transcript("generic", ["one", "two"]).decode()

    result = parse_file("/data/chat.jsonl", ROOT, (deep_line("generic") + "\n" + rest).encode(), final=True, now=NOW)

    assert [m.text for m in result.sessions[0].messages] == ["one", "two"]
    assert [w.line for w in result.warnings] == [1]


@pytest.mark.parametrize("depth, kept", [(MAX_NESTING - 1, True), (MAX_NESTING + 1, False)])
def test_nesting_below_the_limit_is_read_and_above_it_is_a_bad_line(depth: int, kept: bool) -> None:
    nested = "[" * (depth - 1) + "]" * (depth - 1)  # the line's own object is the first level
    line = json.dumps({"role": "user", "content": "deep tool input", "timestamp": "2026-03-02T10:00:00Z"})
    line = line[:-1] + f', "extra": {nested}}}'

    data = transcript("generic", ["plain"]) + (line + "\n").encode()

    result = parse_file("/data/chat.jsonl", ROOT, data, final=True, now=NOW)

    assert [m.text for m in result.sessions[0].messages] == ["plain", "deep tool input"][: 2 if kept else 1]


@pytest.mark.parametrize("format_name", FORMATS)
@pytest.mark.parametrize(
    "broken, original, why",
    [
        ("9999-12-31T23:59:59Z", "9999-12-31T23:59:59+00:00", "more than a day in the future"),
        ("2026-03-04T12:00:01Z", "2026-03-04T12:00:01+00:00", "more than a day in the future"),
        (0, "1970-01-01T00:00:00+00:00", "before 2000"),
        (-1, "1969-12-31T23:59:59+00:00", "before 2000"),
    ],
)
def test_implausible_timestamps_are_kept_flagged_and_ordered_by_the_time_before_them(
    format_name: str, broken: object, original: str, why: str
) -> None:
    data = transcript(format_name, ["first", "second", "broken clock", "fourth"], times={3: broken})
    path = f"/data/p/{format_name}.jsonl"
    line = 4 if format_name == "codex" else 3

    result = parse_file(path, ROOT, data, final=True, now=NOW)

    messages = result.sessions[0].messages
    assert [m.text for m in messages] == ["first", "second", "broken clock", "fourth"]
    flagged = messages[2]
    assert flagged.timestamp == messages[1].timestamp
    assert flagged.metadata["original_timestamp"] == original
    ordered = messages[1].timestamp.isoformat()
    assert f"{path}:{line}: implausible timestamp {original} ({why}); ordered at {ordered}" in map(str, result.warnings)
    assert max(m.timestamp for m in messages) < NOW


def test_a_session_whose_every_time_is_implausible_keeps_its_messages_without_a_time() -> None:
    data = transcript("generic", ["hello", "hi"], times={1: "9999-01-01T00:00:00Z", 2: 253402300799})

    result = parse_file("/data/chat.jsonl", ROOT, data, final=True, now=NOW)

    assert [(m.text, m.timestamp) for m in result.sessions[0].messages] == [("hello", None), ("hi", None)]
    assert [w.reason.endswith("kept without a time") for w in result.warnings] == [True, True]


def test_a_time_within_a_day_of_now_is_plausible() -> None:
    data = transcript("generic", ["hello"], times={1: "2026-03-03T11:59:00Z"})

    result = parse_file("/data/chat.jsonl", ROOT, data, final=True, now=NOW)

    assert result.warnings == []
    assert result.sessions[0].messages[0].timestamp == datetime(2026, 3, 3, 11, 59, tzinfo=UTC)


def test_a_broken_clock_does_not_split_a_generic_file_into_sessions() -> None:
    data = transcript("generic", ["one", "two", "three"], times={2: 0})

    result = parse_file("/data/chat.jsonl", ROOT, data, final=True, now=NOW)

    assert [s.session_id for s in result.sessions] == ["chat"]
