"""The specs' generic JSONL: one message per line with `role`, `content`, `timestamp`; optional `id`, `session_id`,
`speaker` and `cwd`; every other field is kept in Message.metadata.

Identity (INTERFACES.md):
- message_id is the line's `id`, else `L<n>` (1-based line number).
- session_id is the line's `session_id`. Lines without one belong to the file's own session (the path relative to the
  source root, without suffix), split where more than 30 minutes pass between consecutive lines (spec 000). When a
  split happens the parts are `<file id>#1`, `<file id>#2`, ...; a file with no such gap keeps the plain `<file id>`,
  the name a person expects for a file that is one conversation. (Consequence: if a live file later gains a gap,
  its first part is renamed from `<file id>` to `<file id>#1`, so the ingest stage must treat it as rewritten.)
- project is the last component of the session's first `cwd`, else the folder rule of FileContext.project.

A line without `role` or `content`, or with a role outside user/assistant/system/tool, is skipped with a warning (a
bad line). A missing or unreadable `timestamp` is a warning too, but the message is kept without a time: its words
matter more than its clock, and a line without a time never starts a new session.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sessionmem_pipeline.core.formats.drafts import (
    DraftMessage,
    SessionDraft,
    as_dict,
    as_id,
    as_list,
    as_str,
    build_result,
    placeholder,
)
from sessionmem_pipeline.core.formats.source import FileContext, JsonLine, parse_timestamp
from sessionmem_pipeline.core.models import ROLES, ParseResult, ParseWarning

FORMAT = "generic"
SESSION_GAP = timedelta(minutes=30)
KNOWN_FIELDS = frozenset({"role", "content", "timestamp", "id", "session_id", "speaker", "cwd"})


def line_problem(obj: dict[str, Any]) -> str | None:
    """Why a line cannot be a generic message (the validation report's bad line), or None."""
    role = obj.get("role")
    if not isinstance(role, str):
        return "missing role"
    if role not in ROLES:
        return f"unknown role {role!r} (expected user, assistant, system or tool)"
    content = obj.get("content")
    if not isinstance(content, (str, list)):
        return "missing content (expected a string or a list of text blocks)"
    return None


def content_text(content: Any) -> tuple[str, list[str]]:
    """Text of a string or of a list of `{type: text, text}` blocks, and the block types it could not read."""
    if isinstance(content, str):
        return content, []
    parts: list[str] = []
    unknown: list[str] = []
    for block in as_list(content):
        if isinstance(block, str):
            parts.append(block)
            continue
        block = as_dict(block)
        kind = as_str(block.get("type")) or "untyped"
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind in ("image", "image_url", "document", "file"):
            parts.append(placeholder(kind.split("_")[0]))
        else:
            unknown.append(kind)
    return "\n\n".join(parts), unknown


def parse(ctx: FileContext, lines: Sequence[JsonLine]) -> ParseResult:
    """Generic JSONL lines to sessions (see the module docstring for the identity rules)."""
    warnings: list[ParseWarning] = []
    skipped: Counter[str] = Counter()
    drafts: list[SessionDraft] = []  # in order of first appearance
    own_sessions: dict[str, SessionDraft] = {}
    file_parts: list[SessionDraft] = []
    last_file_time = None
    for line in lines:
        obj = line.data
        if obj is None:
            continue
        problem = line_problem(obj)
        if problem:
            warnings.append(ParseWarning(ctx.path, line.number, f"{problem}; line skipped"))
            continue
        message = _message(ctx, line.number, obj, warnings)
        own_id = as_id(obj.get("session_id"))
        if own_id is not None:
            session = own_sessions.get(own_id)
            if session is None:
                session = own_sessions[own_id] = SessionDraft(own_id, "")
                drafts.append(session)
        else:
            moment = message.timestamp if ctx.is_plausible(message.timestamp) else None  # a broken clock splits nothing
            gap = moment is not None and last_file_time is not None and moment - last_file_time > SESSION_GAP
            if not file_parts or gap:
                file_parts.append(SessionDraft("", ""))
                drafts.append(file_parts[-1])
            session = file_parts[-1]
            last_file_time = moment or last_file_time
        session.messages.append(message)
        if session.cwd is None and message.cwd:
            session.cwd = message.cwd
    for index, part in enumerate(file_parts, start=1):
        part.session_id = ctx.file_session_id if len(file_parts) == 1 else f"{ctx.file_session_id}#{index}"
    for session in drafts:
        session.project = ctx.project(session.cwd)
    return build_result(ctx.path, FORMAT, drafts, warnings, skipped)


def _message(ctx: FileContext, number: int, obj: dict[str, Any], warnings: list[ParseWarning]) -> DraftMessage:
    text, unknown = content_text(obj["content"])
    for kind in unknown:
        warnings.append(ParseWarning(ctx.path, number, f"content block of type {kind!r} ignored"))
    raw_time = obj.get("timestamp")
    timestamp = parse_timestamp(raw_time)
    if timestamp is None:
        reason = "missing timestamp" if raw_time is None else f"unreadable timestamp {raw_time!r}"
        warnings.append(ParseWarning(ctx.path, number, f"{reason}; message kept without a time"))
    speaker = obj.get("speaker")
    return DraftMessage(
        message_id=as_id(obj.get("id")) or f"L{number}",
        role=obj["role"],
        line=number,
        timestamp=timestamp,
        speaker=speaker.strip() or None if isinstance(speaker, str) else None,
        cwd=as_str(obj.get("cwd")),
        texts=[text],
        metadata={key: value for key, value in obj.items() if key not in KNOWN_FIELDS},
    )
