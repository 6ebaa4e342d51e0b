"""Canonical records shared by every stage: what parsers yield, what collapsing and chunking produce.

Pure dataclasses, no I/O. Ids follow INTERFACES.md: a message is keyed by (session_id, message_id).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

ROLES = ("user", "assistant", "system", "tool")

# Message.kind: what a message is, beyond its role.
KIND_MESSAGE = "message"  # what a person typed or the assistant said
KIND_INJECTED = "injected"  # context the harness injected (Claude isMeta, Codex <environment_context>, AGENTS.md)
KIND_COMPACTION = "compaction_summary"  # the agent's own compaction summary (Claude isCompactSummary, Codex compacted)
KIND_EVENT = "event"  # system events: compact boundary, api error, local command, turn duration
KINDS = (KIND_MESSAGE, KIND_INJECTED, KIND_COMPACTION, KIND_EVENT)


@dataclass(frozen=True)
class ToolCall:
    """One tool invocation with its result, paired by call id."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    output: str | None = None  # the result's text; None when the result never arrived
    is_error: bool = False
    call_id: str | None = None


@dataclass(frozen=True)
class Message:
    """One canonical message, whatever transcript format it came from."""

    session_id: str
    seq: int  # 0-based order within the session (file order)
    message_id: str
    role: str  # user | assistant | system | tool
    text: str
    timestamp: datetime | None = None  # UTC, timezone-aware
    speaker: str | None = None  # display name ("Caroline"); None means the role's default name
    kind: str = KIND_MESSAGE
    thinking: str = ""  # reasoning / thinking blocks, kept apart from the text
    tool_calls: tuple[ToolCall, ...] = ()
    source_path: str = ""
    source_line: int = 0  # 1-based line of the message's first line in the source file
    project: str = ""
    cwd: str | None = None
    git_branch: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # unknown fields, kept as they were


@dataclass(frozen=True)
class ParseWarning:
    """A line that was skipped or only partly understood; never fatal."""

    path: str
    line: int  # 1-based; 0 when the warning is about the whole file
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class ParsedSession:
    """The messages of one session found in one source file."""

    session_id: str
    project: str
    source_path: str
    format: str  # generic | claude_code | codex | openai_chat
    messages: list[Message] = field(default_factory=list)
    title: str | None = None  # e.g. Claude Code `summary` lines
    parent_session_id: str | None = None  # subagent (sidechain) sessions
    cwd: str | None = None
    git_branch: str | None = None
    model: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


WARMUP_SIDECHAIN = "warmup sidechain"
"""A Claude Code subagent file that only answers the CLI's automatic "Warmup" prompt: no task, so no session."""
SESSION_SKIP_REASONS = (WARMUP_SIDECHAIN,)
"""Keys of ParseResult.skipped that count whole sessions left out on purpose (reported by `status`)."""


@dataclass
class ParseResult:
    """Everything one source file yielded: sessions, warnings, and counts of lines skipped on purpose."""

    path: str
    format: str
    sessions: list[ParsedSession] = field(default_factory=list)
    warnings: list[ParseWarning] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # line type -> count (progress, snapshots, ...)
    lines_read: int = 0
    consumed_bytes: int = 0  # bytes up to the end of the last complete line; a half-written tail is left

    def skipped_sessions(self) -> dict[str, int]:
        """Sessions left out on purpose, by reason (a warmup sidechain is not a session)."""
        return {reason: self.skipped[reason] for reason in SESSION_SKIP_REASONS if self.skipped.get(reason)}


# ---- transform stage -------------------------------------------------------------------------

CATEGORY_CONSEQUENTIAL = "consequential"
CATEGORY_OBSERVATIONAL = "observational"
CATEGORY_SHELL = "shell"
CATEGORY_META = "meta"
CATEGORY_UNKNOWN = "unknown"


@dataclass(frozen=True)
class ToolRecord:
    """What collapsing made of one tool call, kept so summaries can report tools used and files modified."""

    name: str
    category: str  # consequential | observational | shell | meta | unknown
    line: str | None  # the narrative line; None when the call was dropped (meta)
    files: tuple[str, ...] = ()  # files the call modified (consequential) or read (observational)
    is_error: bool = False
    command: str | None = None  # shell command, when the tool ran one


@dataclass(frozen=True)
class CollapsedMessage:
    """A message as narrative text: its own words plus one line per tool call, secrets redacted."""

    session_id: str
    seq: int
    message_id: str
    role: str
    speaker: str  # resolved display name
    timestamp: datetime | None
    text: str  # the message's text followed by its collapsed tool lines
    kind: str = KIND_MESSAGE
    thinking: str = ""
    tools: tuple[ToolRecord, ...] = ()


def content_hash(text: str) -> str:
    """The sha256 of a text, the key of every content-addressed cache."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Chunk:
    """One exchange (a user message and the replies that follow), or part of a long one."""

    session_id: str
    chunk_index: int
    message_ids: tuple[str, ...]
    ts_start: datetime | None
    ts_end: datetime | None
    speakers: tuple[str, ...]
    roles: tuple[str, ...]
    content: str
    token_count: int
    has_decision: bool = False
    has_action: bool = False
    continued: bool = False  # part of a message that was split because it alone exceeded the limit

    @property
    def content_hash(self) -> str:
        return content_hash(self.content)

    @property
    def chunk_id(self) -> str:
        """Stable id: session + index + content hash."""
        return f"{self.session_id}:{self.chunk_index}:{self.content_hash[:16]}"
