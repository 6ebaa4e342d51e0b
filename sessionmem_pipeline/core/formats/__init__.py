"""Transcript formats: which one a file is, its canonical messages, and whether it can be indexed at all (spec 001).

Entry points:
- `detect_format(data, path)`: "generic" | "claude_code" | "codex" | "openai_chat", or UnknownFormatError.
- `parse_file(path, source_root, data, final=...)`: the file's sessions, warnings and skip counts.
- `validate_file(...)`: the spec's `{valid, errors, warnings}` report, with the quarantine reason when the file
  cannot yield a session. `inspect_file(...)` returns the report and the parse together, for callers that index
  what is valid without reading the file twice.

Detection reads the first 50 JSON lines and lets each vote: Claude Code lines carry `type` plus `uuid`/`sessionId`
(or are its summary/snapshot lines); Codex lines are `{timestamp, type, payload}` envelopes (or the pre-envelope
layout); a line with a top-level `role` is generic when it has a `timestamp` and OpenAI chat when it has none, and a
file whose role lines use `tool_calls` or `tool_call_id` is OpenAI chat whatever its timestamps. A file that is one
JSON document (an array, or an object with `messages`) is an OpenAI chat array, or a Gemini CLI session when it
has `sessionId` and typed messages.

Agents that keep their history in their own folders (Gemini CLI, Aider, Cline/Roo Code, ChatGPT/Claude.ai
exports, ...) are told by path first: `registry.REGISTRY` lists each one's file patterns, and a file matching one
is read by that format's parser (or reported as not supported), never by content detection.
"""

from __future__ import annotations

import codecs
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sessionmem_pipeline.core.formats import (
    aider,
    chat_export,
    claude_code,
    cline,
    codex,
    copilot,
    cursor,
    gemini,
    generic,
    openai_chat,
    opencode,
)
from sessionmem_pipeline.core.formats.registry import ON_DISK, REGISTRY, FormatError, Related, SourceFormat
from sessionmem_pipeline.core.formats.source import FileContext, JsonLine, clamp_implausible_times, split_jsonl
from sessionmem_pipeline.core.models import ParseResult, ParseWarning

CONTENT_FORMATS = ("generic", "claude_code", "codex", "openai_chat")  # told apart by content
UNKNOWN_FORMAT = "unknown"  # ParseResult.format of a file with no complete line yet
DETECTION_LINES = 50
MAX_REPORTED_WARNINGS = 100
BINARY_SAMPLE_BYTES = 8192
BINARY_ODD_SHARE = 0.1
CLAUDE_ID_FIELDS = ("uuid", "sessionId", "parentUuid", "leafUuid", "messageId")
TIE_BREAK = ("claude_code", "codex", "generic", "openai_chat")  # when two formats get as many votes
NOT_WHITESPACE = re.compile(rb"\S")

_LINE_PARSERS: dict[str, Callable[[FileContext, Sequence[JsonLine]], ParseResult]] = {
    "generic": generic.parse,
    "claude_code": claude_code.parse,
    "codex": codex.parse,
    "openai_chat": openai_chat.parse_lines,
}
_LINE_PROBLEMS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "generic": generic.line_problem,
    "claude_code": claude_code.line_problem,
    "codex": codex.line_problem,
    "openai_chat": openai_chat.line_problem,
}


VSCODE_STORAGE = ("Code/User", "Code - Insiders/User", "VSCodium/User", "Cursor/User", "Windsurf/User")
LINUX_CONFIG, MACOS_SUPPORT = ".config", "Library/Application Support"
STORAGES = ("globalStorage", "workspaceStorage")
OPENCODE_STORAGE = ".local/share/opencode/storage"  # XDG data folder, on macOS too


def _editor_folders(*tail: str) -> tuple[str, ...]:
    """A folder inside each VS Code-like editor's user storage, on Linux and macOS."""
    return tuple(f"{base}/{editor}/{rest}" for base in (LINUX_CONFIG, MACOS_SUPPORT) for editor in VSCODE_STORAGE for rest in tail)


for _format in (
    SourceFormat(
        "gemini", "Gemini CLI", ("chats/session-*.json", "chats/session-*.jsonl"), gemini.parse,
        territory=(".gemini",), locations=(".gemini/tmp",),
    ),
    SourceFormat("aider", "Aider", (aider.FILE_NAME,), aider.parse),
    SourceFormat("chat_export", "ChatGPT / Claude.ai export", ("conversations.json",), chat_export.parse),
    SourceFormat(
        "cline", "Cline / Roo Code", ("tasks/*/api_conversation_history.json",), cline.parse,
        territory=("saoudrizwan.claude-dev", cline.ROO_STORAGE),
        locations=_editor_folders("globalStorage/saoudrizwan.claude-dev", f"globalStorage/{cline.ROO_STORAGE}")
        + (".cline/data",),
    ),
    SourceFormat(
        "cursor", "Cursor", ("Cursor/User/globalStorage/state.vscdb", "Cursor/User/workspaceStorage/*/state.vscdb"),
        cursor.parse, territory=STORAGES, binary=True,
        locations=tuple(f"{base}/Cursor/User/{rest}" for base in (LINUX_CONFIG, MACOS_SUPPORT) for rest in STORAGES),
    ),
    SourceFormat(
        "copilot_chat", "GitHub Copilot Chat",
        ("chatSessions/*.json", "chatSessions/*.jsonl", "emptyWindowChatSessions/*.json", "emptyWindowChatSessions/*.jsonl"),
        copilot.parse, territory=STORAGES,
        locations=_editor_folders("workspaceStorage", "globalStorage/emptyWindowChatSessions"),
    ),
    SourceFormat(
        "opencode", "OpenCode", (opencode.SESSION_PATTERN,), opencode.parse,
        territory=("opencode",), locations=(OPENCODE_STORAGE,),
    ),
    SourceFormat(
        "opencode_db", "OpenCode 1.2+ (SQLite)", ("opencode/opencode.db",), None, territory=("opencode",), binary=True,
    ),
):
    REGISTRY.add(_format)
FORMATS = CONTENT_FORMATS + tuple(f.name for f in REGISTRY.formats)  # what detect_format can return


class UnknownFormatError(ValueError):
    """The file is not a transcript format sessionmem reads; the message names the file and what was expected."""


@dataclass(frozen=True)
class ValidationReport:
    """Spec 001's validation result for one file; `quarantine_reason` is set exactly when it is not valid."""

    valid: bool
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    format: str | None
    quarantine_reason: str | None
    lines: int  # complete, non-blank lines (or messages of a JSON document)
    bad_lines: int  # lines that yield nothing because they are broken: invalid JSON, not UTF-8, required fields


@dataclass(frozen=True)
class _Content:
    """A file's bytes as JSON: one document, or lines (the half-written tail left out unless final)."""

    is_document: bool
    document: Any
    document_error: str | None
    lines: list[JsonLine]
    warnings: list[ParseWarning]
    consumed: int


def detect_format(data: bytes, path: str) -> str:
    """The transcript format of a file's bytes; UnknownFormatError when nothing matches."""
    source_format = REGISTRY.format_for_path(path)
    if source_format is not None:
        return source_format.name
    head = data if _looks_like_document(data, path) else data[: _nth_newline(data, 4 * DETECTION_LINES)]
    return _detect(_readable(_read(head, path, final=True), path), path)


def parse_file(
    path: str, source_root: str, data: bytes, *, final: bool = False, now: datetime | None = None
) -> ParseResult:
    """Detect the format and parse. With `final=False` the file may still be written: an unfinished last line
    (no trailing newline, not complete JSON) is left and `consumed_bytes` stops before it.

    Malformed lines become warnings, never exceptions; so do implausible timestamps (before 2000 or more than a
    day after `now`, the wall clock by default), which are clamped (`source.clamp_implausible_times`).
    Raises UnknownFormatError when the content matches no format (a file with no complete line yet is not
    that: it yields an empty result with format "unknown").
    A file of a path-identified format is read by its parser; FormatError when it cannot be read at all.
    """
    ctx = FileContext(path, source_root, now)
    source_format = REGISTRY.format_for_path(path)
    if source_format is not None:
        if source_format.parser is None:
            return ParseResult(path, source_format.name)
        return _parse_registered(source_format, ctx, data, ON_DISK)
    return _parse(ctx, _read(data, path, final))


def validate_file(
    path: str,
    source_root: str,
    data: bytes,
    *,
    max_bad_share: float = 0.5,
    final: bool = False,
    now: datetime | None = None,
) -> ValidationReport:
    """Spec 001's checks (readable text, UTF-8, valid JSON lines, required fields, timestamps) as a report."""
    return inspect_file(path, source_root, data, max_bad_share=max_bad_share, final=final, now=now)[0]


def inspect_file(
    path: str,
    source_root: str,
    data: bytes,
    *,
    max_bad_share: float = 0.5,
    final: bool = False,
    now: datetime | None = None,
    related: Related = ON_DISK,
) -> tuple[ValidationReport, ParseResult | None]:
    """The validation report and, when the file is valid, its parse (None when it must be quarantined).

    Never raises: every way a file can be wrong is a quarantine reason or a warning.
    """
    source_format = REGISTRY.format_for_path(path)
    if source_format is not None:
        return _inspect_registered(source_format, FileContext(path, source_root, now), data, related)
    if NOT_WHITESPACE.search(data) is None:
        return _invalid("empty", f"{path}: empty file; nothing to index"), None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return _invalid("not UTF-8", f"{path}: UTF-16 text; save the file as UTF-8"), None
    binary = _binary_reason(data)
    if binary:
        return _invalid("binary", f"{path}: binary file ({binary}); not a transcript"), None
    content = _read(data, path, final)
    if content.document_error:
        reason = "not UTF-8" if content.document_error.startswith("not UTF-8") else "invalid JSON"
        return _invalid(reason, f"{path}: {content.document_error}; expected JSONL lines or a JSON chat array"), None
    try:
        format_name = _detect(content, path) if _has_objects(content) else None
    except UnknownFormatError as exc:
        return _invalid("unknown format", str(exc), lines=len(content.lines)), None
    ctx = FileContext(path, source_root, now)
    lines, bad, encoding_bad = _count_bad(content, format_name)
    if lines == 0 and content.is_document:
        return _invalid("empty", f"{path}: the messages array is empty; nothing to index", fmt=format_name), None
    if lines and (bad == lines or bad / lines > max_bad_share):
        found = _parse(ctx, content).warnings if format_name else content.warnings
        warnings = [str(warning) for warning in found]
        if encoding_bad == bad:
            reason = "not UTF-8"
        elif bad == lines:
            reason = "no valid lines"
        else:
            reason = f"too many bad lines ({bad} of {lines} > {max_bad_share:.0%})"
        error = f"{path}: {reason}; first: {warnings[0] if warnings else 'see warnings'}"
        return _report(reason, (error,), warnings, format_name, lines, bad), None
    result = _parse(ctx, content)  # the format is known, or there is no complete line yet
    warnings = [str(warning) for warning in result.warnings]
    if lines == 0:
        warnings.append(f"{path}: no complete line yet; the unfinished last line is left for the next run")
    elif not result.sessions:
        warnings.append(f"{path}: no messages yet (only {_describe_skipped(result)})")
    return _report(None, (), warnings, format_name, lines, bad), result


def _inspect_registered(
    source_format: SourceFormat, ctx: FileContext, data: bytes, related: Related
) -> tuple[ValidationReport, ParseResult | None]:
    """A file of a path-identified format: skipped when not supported, else its parser's sessions."""
    path = ctx.path
    if source_format.parser is None:
        skipped = f"skipped: {source_format.label} not supported"
        return _report(None, (), (f"{path}: {skipped}",), source_format.name, 0, 0), ParseResult(path, source_format.name)
    if NOT_WHITESPACE.search(data) is None:
        return _invalid("empty", f"{path}: empty file; nothing to index", fmt=source_format.name), None
    binary = None if source_format.binary else _binary_reason(data)
    if binary:
        return _invalid("binary", f"{path}: binary file ({binary}); not a transcript", fmt=source_format.name), None
    try:
        result = _parse_registered(source_format, ctx, data, related)
    except FormatError as exc:
        return _invalid(exc.reason, f"{path}: {exc}", fmt=source_format.name), None
    result.consumed_bytes = len(data)
    messages = sum(len(session.messages) for session in result.sessions)
    result.lines_read = result.lines_read or messages
    warnings = [str(warning) for warning in result.warnings]
    if not result.sessions:
        warnings.append(f"{path}: no messages yet (only {_describe_skipped(result)})")
    return _report(None, (), warnings, result.format, messages, 0), result


def _parse_registered(source_format: SourceFormat, ctx: FileContext, data: bytes, related: Related) -> ParseResult:
    """Its parser's sessions, with implausible timestamps clamped as in every other format."""
    result = source_format.parser(ctx, data, related)
    clamp_implausible_times(ctx, result)
    return result


# ---- reading ------------------------------------------------------------------------------------------------


def _read(data: bytes, path: str, final: bool) -> _Content:
    offset = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    body = data[offset:]
    if _looks_like_document(data, path):
        document, error = _decode_document(body)
        if error is None or path.endswith(".json"):
            return _Content(True, document, error, [], [], len(data))
    lines, consumed, warnings = split_jsonl(body, path, final)
    return _Content(False, None, None, lines, warnings, consumed + offset if consumed else 0)


def _readable(content: _Content, path: str) -> _Content:
    """The content, unless it could not be read as JSON at all."""
    if content.document_error:
        raise UnknownFormatError(f"{path}: {content.document_error}; expected JSONL lines or a JSON chat array")
    return content


def _looks_like_document(data: bytes, path: str) -> bool:
    """A JSON array, a pretty-printed object, or a one-line object holding `messages` (never copies `data`)."""
    first = NOT_WHITESPACE.search(data, len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0)
    start = first.start() if first else len(data)
    opening = data[start : start + 1]
    if opening != b"{":
        return opening == b"["
    end = data.find(b"\n", start)
    if end == -1 or NOT_WHITESPACE.search(data, end) is None:  # a single line
        line = data[start:]
        return b'"messages"' in line and openai_chat.document_messages(_decode_document(line)[0]) is not None
    return not isinstance(_decode_document(data[start:end])[0], dict)


def _decode_document(body: bytes) -> tuple[Any, str | None]:
    try:
        return json.loads(body.decode("utf-8")), None
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 (byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except (ValueError, RecursionError) as exc:
        return None, f"invalid JSON: {exc}"


def _nth_newline(data: bytes, count: int) -> int:
    position = -1
    for _ in range(count):
        position = data.find(b"\n", position + 1)
        if position == -1:
            return len(data)
    return position + 1


# ---- detection ----------------------------------------------------------------------------------------------


def _detect(content: _Content, path: str) -> str:
    if content.is_document:
        return _detect_document(content.document, path)
    votes: Counter[str] = Counter()
    role_lines: list[dict[str, Any]] = []
    first_keys: list[str] | None = None
    for obj in [line.data for line in content.lines if line.data is not None][:DETECTION_LINES]:
        first_keys = first_keys if first_keys is not None else sorted(obj)[:8]
        vote = _vote(obj)
        if vote:
            votes[vote] += 1
        elif "role" in obj:
            role_lines.append(obj)
    if any("tool_calls" in obj or "tool_call_id" in obj for obj in role_lines):
        votes["openai_chat"] += len(role_lines)
    else:
        votes["generic"] += sum(1 for obj in role_lines if "timestamp" in obj)
        votes["openai_chat"] += sum(1 for obj in role_lines if "timestamp" not in obj)
    votes = +votes  # drop formats that got no vote
    if not votes:
        found = f"the first JSON line has keys {first_keys}" if first_keys is not None else "no line is a JSON object"
        raise UnknownFormatError(
            f"{path}: unknown transcript format; expected JSONL lines from Claude Code, Codex CLI, the generic format"
            f" ({{role, content, timestamp}}) or OpenAI chat ({{role, content}}), or a JSON chat array; {found}"
        )
    ranked = sorted(votes.items(), key=lambda item: (-item[1], TIE_BREAK.index(item[0])))
    return ranked[0][0]


def _vote(obj: dict[str, Any]) -> str | None:
    """Claude Code or Codex when a line's shape says so; role lines are counted by the caller."""
    kind = obj.get("type") if isinstance(obj.get("type"), str) else None
    if kind in codex.ENVELOPE_TYPES and "payload" in obj:
        return "codex"
    if "record_type" in obj or codex.is_pre_envelope_meta(obj):
        return "codex"
    if kind in codex.ITEM_TYPES and "timestamp" not in obj and ("role" in obj or "call_id" in obj or kind != "message"):
        return "codex"
    if kind in claude_code.LINE_TYPES and any(field in obj for field in CLAUDE_ID_FIELDS):
        return "claude_code"
    return None


def _detect_document(document: Any, path: str) -> str:
    if gemini.is_session_document(document):
        return "gemini"
    messages = openai_chat.document_messages(document)
    if messages is not None:
        objects = [item for item in messages if isinstance(item, dict)]
        if not objects or sum(1 for item in objects if "role" in item) * 2 >= len(objects):
            return "openai_chat"
    raise UnknownFormatError(
        f"{path}: unknown transcript format; a JSON document must be an OpenAI chat array of {{role, content}}"
        " messages or an object with such a `messages` array"
    )


# ---- parsing and validation ---------------------------------------------------------------------------------


def _has_objects(content: _Content) -> bool:
    return content.is_document or any(line.data is not None for line in content.lines)


def _parse(ctx: FileContext, content: _Content) -> ParseResult:
    _readable(content, ctx.path)
    if not content.is_document and not content.lines:
        return ParseResult(ctx.path, UNKNOWN_FORMAT, consumed_bytes=content.consumed)
    format_name = _detect(content, ctx.path)
    if format_name == "gemini":
        result = gemini.parse_session(ctx, content.document, content.document["messages"], [])
    elif content.is_document:
        result = openai_chat.parse_document(ctx, content.document)
        result.lines_read = len(openai_chat.document_messages(content.document) or [])
    else:
        result = _LINE_PARSERS[format_name](ctx, content.lines)
        result.lines_read = len(content.lines)
    result.warnings = [*content.warnings, *result.warnings]
    clamp_implausible_times(ctx, result)
    result.consumed_bytes = content.consumed
    return result


def _count_bad(content: _Content, format_name: str | None) -> tuple[int, int, int]:
    """(lines, bad lines, bad lines that are encoding failures)."""
    problem = _LINE_PROBLEMS.get(format_name or "", lambda obj: None)
    if content.is_document:
        items = openai_chat.document_messages(content.document) or []
        bad = sum(1 for item in items if not isinstance(item, dict) or problem(item))
        return len(items), bad, 0
    encoding_bad = sum(1 for line in content.lines if line.error and line.error.startswith("not UTF-8"))
    bad = sum(1 for line in content.lines if line.data is None or problem(line.data))
    return len(content.lines), bad, encoding_bad


def _binary_reason(data: bytes) -> str | None:
    if b"\x00" in data:
        return "contains NUL bytes"
    sample = data[:BINARY_SAMPLE_BYTES].decode("utf-8", errors="replace")
    odd = sum(1 for char in sample if char == "\ufffd" or (char < " " and char not in "\t\n\r\f\b\x1b"))
    return "mostly non-text bytes" if odd > len(sample) * BINARY_ODD_SHARE else None


def _describe_skipped(result: ParseResult) -> str:
    if not result.skipped:
        return "lines without messages"
    return ", ".join(f"{count} {kind}" for kind, count in result.skipped.items()) + " lines"


def _report(
    reason: str | None, errors: Sequence[str], warnings: Sequence[str], fmt: str | None, lines: int, bad: int
) -> ValidationReport:
    shown = list(warnings[:MAX_REPORTED_WARNINGS])
    if len(warnings) > MAX_REPORTED_WARNINGS:
        shown.append(f"... and {len(warnings) - MAX_REPORTED_WARNINGS} more warnings")
    return ValidationReport(reason is None, tuple(errors), tuple(shown), fmt, reason, lines, bad)


def _invalid(reason: str, error: str, *, lines: int = 0, fmt: str | None = None) -> ValidationReport:
    return _report(reason, (error,), (), fmt, lines, lines)
