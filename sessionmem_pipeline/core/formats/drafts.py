"""Mutable drafts that parsers fill line by line, frozen into canonical Messages at the end.

Every format has the same three chores: a tool's result arrives after its call (a later line or array element), so
the call must stay open until then; message ids must be unique within a session; `seq` is file order. They live
here once so the parsers only say what each line means.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sessionmem_pipeline.core.models import KIND_MESSAGE, Message, ParsedSession, ParseResult, ParseWarning, ToolCall


def as_dict(value: Any) -> dict[str, Any]:
    """The value when it is a JSON object, else an empty one: real files hold every shape, parsers must not care."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str | None:
    """A non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def as_int(value: Any) -> int | None:
    """An integer that is not a bool (JSON true would otherwise pass as 1)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_id(value: Any) -> str | None:
    """An id written as a string or an integer (never a bool)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return as_str(value)


def placeholder(kind: str, media_type: str | None = None) -> str:
    """What stands in for an image or document: the text index gains nothing from base64."""
    return f"[{kind}: {media_type}]" if media_type else f"[{kind}]"


def image_placeholder(url: Any) -> str:
    """An image given by URL; a data URL names its media type."""
    match = re.match(r"data:([\w.+-]+/[\w.+-]+)[;,]", url) if isinstance(url, str) else None
    return placeholder("image", match.group(1) if match else None)


def json_arguments(arguments: Any) -> dict[str, Any]:
    """Function-call arguments, sent as a JSON string, as the dict they encode (else kept raw under "arguments")."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str):
        return {}
    try:
        decoded = json.loads(arguments)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply to read
        decoded = None
    return decoded if isinstance(decoded, dict) else {"arguments": arguments}


@dataclass
class DraftCall:
    """A tool call whose result may still arrive."""

    name: str
    input: dict[str, Any]
    call_id: str | None = None
    output: str | None = None
    is_error: bool = False

    def freeze(self) -> ToolCall:
        return ToolCall(self.name, self.input, self.output, self.is_error, self.call_id)


@dataclass
class DraftMessage:
    """A message being assembled; `line` is the 1-based line of its first source line."""

    message_id: str
    role: str
    line: int
    timestamp: datetime | None = None
    kind: str = KIND_MESSAGE
    speaker: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    texts: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: list[DraftCall] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def has_text(self) -> bool:
        return any(text.strip() for text in self.texts)

    @property
    def is_empty(self) -> bool:
        return not self.has_text and not any(t.strip() for t in self.thinking) and not self.calls


@dataclass
class SessionDraft:
    """One session's messages in file order, plus what the format says about the session as a whole."""

    session_id: str
    project: str
    messages: list[DraftMessage] = field(default_factory=list)
    title: str | None = None
    parent_session_id: str | None = None
    cwd: str | None = None
    git_branch: str | None = None
    model: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class CallBook:
    """Open tool calls by id, so a later result can find its call."""

    def __init__(self) -> None:
        self._open: dict[str, DraftCall] = {}

    def add(self, call: DraftCall) -> None:
        if call.call_id:
            self._open[call.call_id] = call

    def resolve(self, call_id: str | None, output: str, is_error: bool) -> bool:
        """Fill the call's result; False when no open call has that id (the caller warns)."""
        call = self._open.pop(call_id, None) if call_id else None
        if call is None:
            return False
        call.output = output
        call.is_error = is_error
        return True


def freeze_session(
    draft: SessionDraft, source_path: str, format_name: str, warnings: list[ParseWarning], skipped: Counter[str]
) -> ParsedSession | None:
    """The session as canonical records: empty messages dropped (counted), seq in file order, ids made unique.

    None when no message is left, so a file holding only bookkeeping lines yields no empty session.
    """
    messages: list[Message] = []
    first_line_of: dict[str, int] = {}
    for item in draft.messages:
        if item.is_empty:
            skipped["empty message"] += 1
            continue
        message_id = item.message_id
        if message_id in first_line_of:
            unique = f"{message_id}@L{item.line}"
            first = first_line_of[message_id]
            reason = f"duplicate message id {message_id!r} (first on line {first}); stored as {unique!r}"
            warnings.append(ParseWarning(source_path, item.line, reason))
            message_id = unique
        first_line_of[message_id] = item.line
        messages.append(
            Message(
                session_id=draft.session_id,
                seq=len(messages),
                message_id=message_id,
                role=item.role,
                text="\n\n".join(text for text in item.texts if text.strip()),
                timestamp=item.timestamp,
                speaker=item.speaker,
                kind=item.kind,
                thinking="\n\n".join(text for text in item.thinking if text.strip()),
                tool_calls=tuple(call.freeze() for call in item.calls),
                source_path=source_path,
                source_line=item.line,
                project=draft.project,
                cwd=item.cwd,
                git_branch=item.git_branch,
                metadata=item.metadata,
            )
        )
    if not messages:
        return None
    return ParsedSession(
        session_id=draft.session_id,
        project=draft.project,
        source_path=source_path,
        format=format_name,
        messages=messages,
        title=draft.title,
        parent_session_id=draft.parent_session_id,
        cwd=draft.cwd,
        git_branch=draft.git_branch,
        model=draft.model,
        metadata=draft.metadata,
    )


def build_result(
    source_path: str, format_name: str, drafts: list[SessionDraft], warnings: list[ParseWarning], skipped: Counter[str]
) -> ParseResult:
    """Freeze every session draft into the file's ParseResult (line counts and bytes are filled by the caller)."""
    sessions = [
        session
        for draft in drafts
        if (session := freeze_session(draft, source_path, format_name, warnings, skipped)) is not None
    ]
    warnings.sort(key=lambda warning: warning.line)
    return ParseResult(source_path, format_name, sessions, warnings, dict(sorted(skipped.items())))
