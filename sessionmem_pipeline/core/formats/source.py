"""Reading a source file into JSON lines, and the identity rules every format shares (INTERFACES.md).

A half-written last line (no trailing newline) is not an error: a live agent is still writing it, so it is left
for the next run and `consumed_bytes` stops before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import PurePath
from typing import Any

from sessionmem_pipeline.core.models import ParseWarning


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
    except ValueError:
        return False


def _decode(text: bytes, number: int) -> JsonLine:
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        return JsonLine(number, None, f"not UTF-8 (byte {exc.start})")
    try:
        value = json.loads(decoded)
    except ValueError as exc:
        return JsonLine(number, None, f"invalid JSON: {exc.msg} at column {exc.colno}")
    if not isinstance(value, dict):
        return JsonLine(number, None, f"expected a JSON object, found {type(value).__name__}")
    return JsonLine(number, value)


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
