"""The contextual prefix (spec 001 "Context Prepending"): where a chunk sits, said before the chunk is embedded.

Only what does not change as a session grows goes in (the session's start, the chunk's own speakers and topics,
the project, the session's first request), so appending messages never changes, and never re-embeds, an earlier
chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sessionmem_pipeline.core.models import KIND_MESSAGE, CollapsedMessage
from sessionmem_pipeline.core.tokens import truncate_to_tokens

FIRST_REQUEST_TOKENS = 30
PREFIX_TOKEN_BUDGET = 90
"""Tokens reserved for the prefix when sizing chunks: four short lines and a 30-token first request."""

ASSISTANT_NAMES = frozenset({"assistant", "ai"})


@dataclass(frozen=True)
class SessionContext:
    """What every chunk of a session shares."""

    project: str
    started_at: datetime | None
    first_request: str
    timezone: str


def zone(name: str) -> ZoneInfo:
    """The named zone, or UTC when the machine's zone has no IANA name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def first_request(messages: Sequence[CollapsedMessage]) -> str:
    """The first thing the person asked, in at most FIRST_REQUEST_TOKENS tokens, on one line."""
    for message in messages:
        if message.role == "user" and message.kind == KIND_MESSAGE and message.text.strip():
            line = " ".join(message.text.split())
            short = truncate_to_tokens(line, FIRST_REQUEST_TOKENS)
            return short if short == line else short.rstrip() + "…"
    return ""


def format_when(moment: datetime | None, timezone: str) -> str:
    """"February 5, 2026 at 10:30 AM Europe/Berlin time", in the configured zone."""
    if moment is None:
        return "an unknown date"
    local = moment.astimezone(zone(timezone))
    hour = local.strftime("%I:%M %p").lstrip("0")
    return f"{local.strftime('%B')} {local.day}, {local.year} at {hour} {timezone} time"


def participants(speakers: Sequence[str]) -> str:
    """"Jason and Max (AI assistant)": the assistant's name marked as such."""
    names = []
    for speaker in dict.fromkeys(speakers):
        names.append(f"{speaker} (AI assistant)" if speaker.lower() in ASSISTANT_NAMES else speaker)
    if len(names) <= 1:
        return "".join(names) or "unknown"
    return ", ".join(names[:-1]) + " and " + names[-1]


def context_line(context: SessionContext, chunk_start: datetime | None) -> str:
    """One line placing a chunk in its session, shown with search results."""
    where = f"{context.project} session" if context.project else "Session"
    line = f"{where} of {format_when(chunk_start or context.started_at, context.timezone)}"
    if context.first_request:
        line += f"; it began with: {context.first_request}"
    return line


def contextual_prefix(
    context: SessionContext, speakers: Sequence[str], topics: Sequence[str], chunk_start: datetime | None
) -> str:
    """The lines prepended to a chunk before embedding."""
    lines = [f"[Session from {format_when(context.started_at, context.timezone)}]"]
    if chunk_start and context.started_at and chunk_start.date() != context.started_at.date():
        lines.append(f"[This part on {format_when(chunk_start, context.timezone)}]")
    lines.append(f"[Participants: {participants(speakers)}]")
    if context.project:
        lines.append(f"[Project: {context.project}]")
    if topics:
        lines.append(f"[Topics: {', '.join(t.replace('-', ' ') for t in topics)}]")
    if context.first_request:
        lines.append(f"[Context: a session that began with: {context.first_request}]")
    return "\n".join(lines)
