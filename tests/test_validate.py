"""Spec 001 validation: every outcome a file can have, and format detection with its error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sessionmem_pipeline.core.formats import (
    UnknownFormatError,
    ValidationReport,
    detect_format,
    inspect_file,
    validate_file,
)

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "transcripts"
SAMPLES = HERE.parent / "samples"
PATH = "/data/chats/2026-03-02.jsonl"
ROOT = "/data"


def transcript_files() -> list[Path]:
    return sorted(p for base in (FIXTURES, SAMPLES) for p in base.rglob("*.json*") if p.is_file())


def good_line(n: int) -> bytes:
    return json.dumps({"role": "user", "content": f"message {n}", "timestamp": f"2026-03-02T10:{n:02d}:00Z"}).encode()


def lines(*rows: bytes) -> bytes:
    return b"".join(row + b"\n" for row in rows)


@pytest.mark.parametrize("path", transcript_files(), ids=lambda p: str(p.relative_to(HERE.parent)))
def test_every_fixture_and_sample_is_valid_and_detected_as_its_folder_says(path: Path) -> None:
    expected = next(part for part in path.parts if part in ("generic", "claude_code", "claude", "codex", "openai_chat"))
    root = str(path.parent)

    report, result = inspect_file(str(path), root, path.read_bytes(), final=True)

    assert report.valid and report.quarantine_reason is None and report.errors == ()
    assert report.format == {"claude": "claude_code"}.get(expected, expected)
    assert result is not None and (result.sessions or result.skipped_sessions())  # or skipped on purpose (warmup)
    assert detect_format(path.read_bytes(), str(path)) == report.format


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"  \n\n\t\n", "empty"),
        (b"SQLite format 3\x00\x10\x00\x01\x01", "binary"),
        (bytes(range(128, 256)) * 8, "binary"),
        ("\ufeff".encode("utf-16-le") + '{"role": "user"}\n'.encode("utf-16-le"), "not UTF-8"),
        (lines('{"role": "user", "content": "Grüße", "timestamp": 1}'.encode("latin-1")), "not UTF-8"),
        (lines(b"hello there", b"this is a plain text file"), "no valid lines"),
        (lines(b'{"role": "user", "timestamp": 1}', b'{"role": "x", "content": "", "timestamp": 1}'), "no valid lines"),
        (lines(b'{"event": "click", "x": 1}'), "unknown format"),
        (b'[{"role": "user", "content": "hi"},', "invalid JSON"),
        (b'{"messages": []}', "empty"),
    ],
    ids=[
        "empty",
        "whitespace",
        "nul-bytes",
        "mostly-non-text",
        "utf-16",
        "latin-1",
        "plain-text",
        "missing-required-fields",
        "unknown-shape",
        "broken-json-document",
        "empty-messages-array",
    ],
)
def test_files_that_cannot_yield_a_session_are_quarantined(data: bytes, reason: str) -> None:
    path = PATH.replace(".jsonl", ".json") if data.lstrip().startswith((b"[", b"{\"messages")) else PATH

    report, result = inspect_file(path, ROOT, data, final=True)

    assert not report.valid and result is None
    assert report.quarantine_reason == reason
    assert len(report.errors) == 1 and report.errors[0].startswith(f"{path}: ")


def test_too_many_bad_lines_names_the_counts_and_the_share_is_configurable() -> None:
    data = lines(*[good_line(n) for n in range(3)], *[b"{oops" for _ in range(7)])

    strict = validate_file(PATH, ROOT, data, final=True)
    lenient = validate_file(PATH, ROOT, data, final=True, max_bad_share=0.8)

    assert strict.quarantine_reason == "too many bad lines (7 of 10 > 50%)"
    assert (strict.lines, strict.bad_lines, strict.valid) == (10, 7, False)
    assert lenient.valid and lenient.bad_lines == 7


def test_a_malformed_line_is_a_warning_naming_file_and_line() -> None:
    data = lines(good_line(1), b'{"role": "user", "content": "unterminated', good_line(3))

    report = validate_file(PATH, ROOT, data, final=True)

    assert report == ValidationReport(
        valid=True,
        errors=(),
        warnings=(f"{PATH}:2: invalid JSON: Unterminated string starting at at column 29",),
        format="generic",
        quarantine_reason=None,
        lines=3,
        bad_lines=1,
    )


def test_missing_fields_and_bad_timestamps_are_reported_per_line() -> None:
    data = lines(
        good_line(1),
        b'{"role": "user", "timestamp": "2026-03-02T10:05:00Z"}',
        b'{"role": "assistant", "content": "ok", "timestamp": "soon"}',
        good_line(4),
    )

    report = validate_file(PATH, ROOT, data, final=True)

    assert report.valid and report.bad_lines == 1
    assert report.warnings == (
        f"{PATH}:2: missing content (expected a string or a list of text blocks); line skipped",
        f"{PATH}:3: unreadable timestamp 'soon'; message kept without a time",
    )


def test_the_unfinished_last_line_of_a_live_file_is_not_malformed() -> None:
    data = lines(good_line(1), good_line(2)) + b'{"role": "assistant", "content": "typing'

    live = validate_file(PATH, ROOT, data)
    finished = validate_file(PATH, ROOT, data, final=True)

    assert live.valid and live.warnings == () and (live.lines, live.bad_lines) == (2, 0)
    assert finished.valid and (finished.lines, finished.bad_lines) == (3, 1)


def test_a_live_file_with_only_its_first_line_half_written_waits() -> None:
    report, result = inspect_file(PATH, ROOT, b'{"role": "user", "content": "hel')

    assert report.valid and report.lines == 0
    assert report.warnings == (f"{PATH}: no complete line yet; the unfinished last line is left for the next run",)
    assert result is not None and result.sessions == [] and result.consumed_bytes == 0


def test_a_transcript_with_only_bookkeeping_lines_is_valid_but_says_so() -> None:
    snapshot = {"type": "file-history-snapshot", "messageId": "m1", "snapshot": {"messageId": "m1"}}

    report = validate_file("/p/-w/s.jsonl", "/p", lines(json.dumps(snapshot).encode()), final=True)

    assert report.valid and report.format == "claude_code"
    assert report.warnings == ("/p/-w/s.jsonl: no messages yet (only 1 file-history-snapshot lines)",)


def test_warnings_are_capped_so_a_huge_broken_file_stays_readable() -> None:
    data = lines(*[good_line(n % 60) for n in range(300)], *[b"{" for _ in range(150)])

    report = validate_file(PATH, ROOT, data, final=True)

    assert report.valid and report.bad_lines == 150
    assert len(report.warnings) == 101 and report.warnings[-1] == "... and 50 more warnings"


def test_unknown_format_error_names_the_file_and_what_was_expected() -> None:
    with pytest.raises(UnknownFormatError) as caught:
        detect_format(lines(b'{"event": "click"}'), "/logs/clicks.jsonl")

    message = str(caught.value)
    assert isinstance(caught.value, ValueError) and "\n" not in message
    assert message.startswith("/logs/clicks.jsonl: unknown transcript format; expected JSONL lines from Claude Code")
    assert message.endswith("the first JSON line has keys ['event']")


def test_a_gemini_session_anywhere_is_read_as_gemini() -> None:
    gemini = json.dumps({"sessionId": "s", "messages": [{"id": "1", "type": "user", "content": "hi"}]}).encode()

    report = validate_file("/g/session-1.json", "/g", gemini, final=True)

    assert report.valid and report.format == "gemini" and report.lines == 1


def test_a_byte_order_mark_is_tolerated() -> None:
    report, result = inspect_file(PATH, ROOT, b"\xef\xbb\xbf" + lines(good_line(1)), final=True)

    assert report.valid and report.warnings == ()
    assert result is not None and result.sessions[0].messages[0].text == "message 1"
