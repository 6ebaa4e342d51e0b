"""Reading a source file into JSON lines, and the identity rules every format shares (INTERFACES.md).

A half-written last line (no trailing newline) is not an error: a live agent is still writing it, so it is left
for the next run and `consumed_bytes` stops before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import PurePath
from typing import Any

from sessionmem_pipeline.core.models import ParseResult, ParseWarning

EARLIEST_PLAUSIBLE = datetime(2000, 1, 1, tzinfo=timezone.utc)
FUTURE_TOLERANCE = timedelta(days=1)

MAX_NESTING = 200
"""Deepest nesting of objects and arrays a line may have. Real lines nest about ten levels; a line nested
deeper is skipped as a bad line, since later stages (redaction, JSON columns) walk it recursively."""


@dataclass(frozen=True)
class JsonLine:
    """One line of a JSONL file: its 1-based number and the decoded object (None when it was not a JSON object)."""

    number: int
    data: dict[str, Any] | None
    error: str | None = None  # why `data` is None


@dataclass(frozen=True)
class FileContext:
    """Where a file sits: identity rules need its path relative to its source root."""

    path: str  # as given (absolute or relative to the working directory)
    source_root: str  # the configured root the file was found under
    now: datetime | None = None  # what "the future" is measured from; None means the wall clock

    @property
    def latest_plausible(self) -> datetime:
        """Timestamps after this are implausible: more than FUTURE_TOLERANCE past now."""
        return (self.now or datetime.now(timezone.utc)) + FUTURE_TOLERANCE

    def is_plausible(self, moment: datetime | None) -> bool:
        return moment is not None and EARLIEST_PLAUSIBLE <= moment <= self.latest_plausible

    @property
    def relative(self) -> PurePath:
        try:
            return PurePath(self.path).relative_to(self.source_root)
        except ValueError:
            return PurePath(PurePath(self.path).name)

    @property
    def file_session_id(self) -> str:
        """Session id derived from the path relative to the root, without its suffix."""
        rel = self.relative
        return str(rel.with_suffix("")) if rel.suffix in (".jsonl", ".json") else str(rel)

    def project(self, cwd: str | None = None) -> str:
        """cwd's last component; else the first folder under the root; else the root's own name."""
        if cwd:
            name = PurePath(cwd.rstrip("/\\")).name
            if name:
                return name
        parts = self.relative.parts
        if len(parts) > 1:
            return parts[0]
        return PurePath(self.source_root).name or "default"


def split_jsonl(data: bytes, path: str, final: bool = False) -> tuple[list[JsonLine], int, list[ParseWarning]]:
    """Split bytes into JSON lines; return them, the bytes consumed, and a warning per malformed line.

    With `final=False` a last line without a trailing newline is left unread (it may still be being written),
    unless it already parses as a complete JSON object.
    """
    lines: list[JsonLine] = []
    warnings: list[ParseWarning] = []
    consumed = 0
    number = 0
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        complete = end != -1
        stop = end if complete else len(data)
        raw = data[start:stop]
        number += 1
        if not complete and not final and not _is_json_object(raw):
            break  # half-written tail: leave it for the next run
        consumed = stop + 1 if complete else stop
        start = stop + 1
        text = raw.strip()
        if not text:
            continue
        line = _decode(text, number)
        if line.error:
            warnings.append(ParseWarning(path, number, line.error))
        lines.append(line)
    return lines, consumed, warnings


def _is_json_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False


def _decode(text: bytes, number: int) -> JsonLine:
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        return JsonLine(number, None, f"not UTF-8 (byte {exc.start})")
    try:
        value = json.loads(decoded)
    except json.JSONDecodeError as exc:
        return JsonLine(number, None, f"invalid JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:  # json.loads gives up about 1,000 levels deep
        return JsonLine(number, None, f"invalid JSON: nested more than {MAX_NESTING} levels deep")
    if not isinstance(value, dict):
        return JsonLine(number, None, f"expected a JSON object, found {type(value).__name__}")
    if _nested_deeper_than(value, MAX_NESTING):
        return JsonLine(number, None, f"invalid JSON: nested more than {MAX_NESTING} levels deep")
    return JsonLine(number, value)


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest more than `limit` levels (walked without recursion)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def parse_timestamp(value: Any) -> datetime | None:
    """ISO-8601 string or epoch seconds/milliseconds to an aware UTC datetime; None when it cannot be read."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = value / 1000 if value > 1e11 else value
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)


IMPLAUSIBLY_LATE = "more than a day in the future"
"""The warning of a timestamp clamped for being late: the only parse result that depends on when it ran."""


def clamp_implausible_times(ctx: FileContext, result: ParseResult) -> None:
    """Give messages whose timestamp is implausible (before 2000, or more than a day after now) a clamped one.

    The message is kept: its words matter more than its clock. Its original time goes to
    metadata["original_timestamp"] and a warning names its line. The clamped time is the nearest plausible
    time before it in the session, else after it, else none, so a broken clock (year 9999, epoch 0) never makes
    a session the latest one, nor reorders the messages around it.
    """
    for session in result.sessions:
        plausible = [m.timestamp if ctx.is_plausible(m.timestamp) else None for m in session.messages]
        before, after = _carried(plausible), _carried(plausible[::-1])[::-1]
        for index, message in enumerate(session.messages):
            if message.timestamp is None or plausible[index] is not None:
                continue
            clamped = before[index] or after[index]
            original = message.timestamp.isoformat()
            why = "before 2000" if message.timestamp < EARLIEST_PLAUSIBLE else IMPLAUSIBLY_LATE
            where = f"ordered at {clamped.isoformat()}" if clamped else "kept without a time"
            result.warnings.append(
                ParseWarning(ctx.path, message.source_line, f"implausible timestamp {original} ({why}); {where}")
            )
            metadata = {**message.metadata, "original_timestamp": original}
            session.messages[index] = replace(message, timestamp=clamped, metadata=metadata)
    result.warnings.sort(key=lambda warning: warning.line)


def _carried(times: list[datetime | None]) -> list[datetime | None]:
    """For each position, the last time at or before it (one pass, whatever the number of gaps)."""
    last = None
    return [last := moment or last for moment in times]
