"""Claude Code transcripts (`~/.claude/projects/<project>/<sessionId>.jsonl`), every version from 1.0 to 2.1.

What a line becomes (shared/formats/agent-transcripts.md section 1):
- `assistant` lines hold one content block each; lines of one API response share `message.id` and are joined back
  into ONE assistant message (wherever they sit in the file) whose message_id is the `uuid` of its first line.
  `text` blocks form its text, `thinking` blocks its thinking, `tool_use` blocks its ToolCalls (call_id = the block id).
  Replies the CLI wrote itself (model `<synthetic>`, e.g. "No response requested.", and `isApiErrorMessage`
  errors) become system events.
- `user` lines: what the person typed is a user message. A `tool_result` block fills the output and error flag of the
  ToolCall with that id, so a line holding only tool results yields no message. Images and documents become
  placeholders such as `[image: image/png]`. `isMeta` text is kind=injected (role user); an `isCompactSummary` line is
  the agent's own compaction summary (kind=compaction_summary, role system); "[Request interrupted by user...]" is a
  system event marking the turn aborted (metadata[TURN_ABORTED]); a slash command (`<command-name>/clear</command-name>...`) reads as the command the person typed.
- `system` lines: `compact_boundary`, `api_error` and `local_command` become system events with a short text;
  `turn_duration`, `stop_hook_summary` and 1.0.x informational lines carry nothing worth searching and are counted
  in ParseResult.skipped (as `system:<subtype>`).
- `summary` lines are session titles. Claude Code writes a new one as the conversation grows and a resumed session
  copies the earlier ones first, so the LAST one is the title; all of them are kept in metadata["titles"].
- `progress`, `file-history-snapshot` and `queue-operation` lines are skipped and counted; unknown line types and
  content blocks are skipped with a warning.

Identity: session_id = `sessionId` (the first one in the file; every line of a file belongs to that session), else the
path-derived id. A subagent (sidechain) file, `agent-<id>.jsonl` beside the session file (<= 2.0) or
`<sessionId>/subagents/agent-<id>.jsonl` (2.1), is its own session `<parent sessionId>/<agentId>` with
parent_session_id set. A "Warmup" sidechain (2.0.x: the CLI's automatic prompt "Warmup", no task) is no session:
it yields none and is counted in ParseResult.skipped as "warmup sidechain". File order is the order: timestamps go backwards in real files.
Message metadata holds the CLI `version` and, for assistant messages, the `model`; the session's model is the last
real (non-synthetic) model used, and metadata["versions"] lists the CLI versions that wrote the file.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from sessionmem_pipeline.core.formats.drafts import (
    CallBook,
    DraftCall,
    DraftMessage,
    SessionDraft,
    as_dict,
    as_int,
    as_list,
    as_str,
    build_result,
    placeholder,
)
from sessionmem_pipeline.core.ending import TURN_ABORTED
from sessionmem_pipeline.core.formats.source import FileContext, JsonLine, parse_timestamp
from sessionmem_pipeline.core.models import (
    KIND_COMPACTION,
    KIND_EVENT,
    KIND_INJECTED,
    KIND_MESSAGE,
    WARMUP_SIDECHAIN,
    ParseResult,
    ParseWarning,
)

FORMAT = "claude_code"
LINE_TYPES = frozenset(
    {"user", "assistant", "system", "summary", "progress", "file-history-snapshot", "queue-operation"}
)
SKIPPED_TYPES = frozenset({"progress", "file-history-snapshot", "queue-operation"})
QUIET_SYSTEM_SUBTYPES = frozenset({"turn_duration", "stop_hook_summary"})
SYNTHETIC_MODEL = "<synthetic>"
WARMUP_PROMPT = "Warmup"
AGENT_FILE = re.compile(r"^agent-(?P<agent>.+)\.jsonl$")
INTERRUPTED = re.compile(r"^\[Request interrupted by user[^\]]*\]$")
COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>", re.DOTALL)
COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
COMMAND_STDOUT = re.compile(r"<local-command-stdout>(.*?)</local-command-stdout>", re.DOTALL)


def line_problem(obj: dict[str, Any]) -> str | None:
    """Why a line cannot be read as a Claude Code line (a bad line), or None."""
    kind = obj.get("type")
    if not isinstance(kind, str):
        return "missing type"
    if kind in ("user", "assistant") and not isinstance(obj.get("message"), dict):
        return f"{kind} line without a message object"
    return None


def parse(ctx: FileContext, lines: Sequence[JsonLine]) -> ParseResult:
    """Claude Code lines to one session (see the module docstring)."""
    return _ClaudeFile(ctx).read(lines)


class _ClaudeFile:
    """State while reading one file: open tool calls, responses being joined, what the envelope said."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.warnings: list[ParseWarning] = []
        self.skipped: Counter[str] = Counter()
        self.messages: list[DraftMessage] = []
        self.responses: dict[str, DraftMessage] = {}  # message.id -> the assistant message being joined
        self.calls = CallBook()
        self.session_id: str | None = None  # the first sessionId; a subagent's lines carry its parent's
        self.agent_id: str | None = None
        self.sidechain = False
        self.cwd: str | None = None
        self.git_branch: str | None = None
        self.versions: list[str] = []
        self.model: str | None = None
        self.titles: list[str] = []
        self.slug: str | None = None

    def read(self, lines: Sequence[JsonLine]) -> ParseResult:
        for line in lines:
            if line.data is None:
                continue
            problem = line_problem(line.data)
            if problem:
                self._warn(line.number, f"{problem}; line skipped")
                continue
            self._line(line.number, line.data)
        if self._is_warmup():
            self.skipped[WARMUP_SIDECHAIN] += 1
            return build_result(self.ctx.path, FORMAT, [], self.warnings, self.skipped)
        return build_result(self.ctx.path, FORMAT, [self._session()], self.warnings, self.skipped)

    def _is_warmup(self) -> bool:
        """A subagent whose task is the CLI's automatic "Warmup" prompt (2.0.x starts one per session)."""
        is_agent = self.sidechain or AGENT_FILE.match(PurePath(self.ctx.path).name) is not None
        prompts = (m for m in self.messages if m.role == "user" and m.kind == KIND_MESSAGE)
        first = next(prompts, None)
        return is_agent and first is not None and "".join(first.texts).strip() == WARMUP_PROMPT

    def _warn(self, number: int, reason: str) -> None:
        self.warnings.append(ParseWarning(self.ctx.path, number, reason))

    def _line(self, number: int, obj: dict[str, Any]) -> None:
        kind = obj["type"]
        self._envelope(obj)
        if kind == "assistant":
            self._assistant(number, obj)
        elif kind == "user":
            self._user(number, obj)
        elif kind == "system":
            self._system(number, obj)
        elif kind == "summary":
            title = as_str(obj.get("summary"))
            if title:
                self.titles.append(title)
        elif kind in SKIPPED_TYPES:
            self.skipped[kind] += 1
        else:
            self._warn(number, f"unknown line type {kind!r}; skipped")

    def _envelope(self, obj: dict[str, Any]) -> None:
        """Collect the session-level facts every envelope repeats."""
        self.session_id = self.session_id or as_str(obj.get("sessionId"))
        self.agent_id = self.agent_id or as_str(obj.get("agentId"))
        self.sidechain = self.sidechain or obj.get("isSidechain") is True
        self.cwd = self.cwd or as_str(obj.get("cwd"))
        self.git_branch = self.git_branch or as_str(obj.get("gitBranch"))
        self.slug = self.slug or as_str(obj.get("slug"))
        version = as_str(obj.get("version"))
        if version and version not in self.versions:
            self.versions.append(version)

    def _new_message(self, number: int, obj: dict[str, Any], role: str, kind: str = KIND_MESSAGE) -> DraftMessage:
        version = as_str(obj.get("version"))
        message = DraftMessage(
            message_id=as_str(obj.get("uuid")) or f"L{number}",
            role=role,
            line=number,
            timestamp=parse_timestamp(obj.get("timestamp")),
            kind=kind,
            cwd=as_str(obj.get("cwd")),
            git_branch=as_str(obj.get("gitBranch")),
            metadata={"version": version} if version else {},
        )
        self.messages.append(message)
        return message

    # ---- assistant ------------------------------------------------------------------------------------------

    def _assistant(self, number: int, obj: dict[str, Any]) -> None:
        body = obj["message"]
        response_id = as_str(body.get("id"))
        message = self.responses.get(response_id) if response_id else None
        if message is None:
            harness = obj.get("isApiErrorMessage") is True or body.get("model") == SYNTHETIC_MODEL
            message = self._new_message(
                number, obj, "system" if harness else "assistant", KIND_EVENT if harness else KIND_MESSAGE
            )
            if response_id:
                self.responses[response_id] = message
        model = as_str(body.get("model"))
        if model:
            message.metadata.setdefault("model", model)
            if model != SYNTHETIC_MODEL:
                self.model = model
        content = body.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else as_list(content)
        for block in blocks:
            self._assistant_block(number, message, as_dict(block))

    def _assistant_block(self, number: int, message: DraftMessage, block: dict[str, Any]) -> None:
        kind = block.get("type")
        if kind == "text":
            message.texts.append(as_str(block.get("text")) or "")
        elif kind == "thinking":
            message.thinking.append(as_str(block.get("thinking")) or "")
        elif kind == "redacted_thinking":
            self.skipped["redacted_thinking"] += 1
        elif kind in ("tool_use", "server_tool_use"):
            call = DraftCall(
                name=as_str(block.get("name")) or "unknown",
                input=as_dict(block.get("input")),
                call_id=as_str(block.get("id")),
            )
            message.calls.append(call)
            self.calls.add(call)
        else:
            self._warn(number, f"unknown assistant content block {kind!r}; skipped")

    # ---- user -----------------------------------------------------------------------------------------------

    def _user(self, number: int, obj: dict[str, Any]) -> None:
        content = obj["message"].get("content")
        if obj.get("isCompactSummary") is True:
            text, _ = self._user_blocks(number, content)
            self._new_message(number, obj, "system", KIND_COMPACTION).texts.append(text)
            return
        if isinstance(content, str):
            self._user_text(number, obj, content)
            return
        text, had_results = self._user_blocks(number, content)
        if text.strip() or not had_results:
            self._user_text(number, obj, text)

    def _user_text(self, number: int, obj: dict[str, Any], text: str) -> None:
        """A person's words, or the harness speaking through a user line (meta, commands, interruptions)."""
        stripped = text.strip()
        if obj.get("isMeta") is True:
            self._new_message(number, obj, "user", KIND_INJECTED).texts.append(text)
        elif INTERRUPTED.match(stripped):
            message = self._new_message(number, obj, "system", KIND_EVENT)
            message.texts.append(stripped.strip("[]"))
            message.metadata[TURN_ABORTED] = True
        elif COMMAND_NAME.search(text):
            command = _command(text)
            message = self._new_message(number, obj, "user")
            message.texts.append(command)
            message.metadata["command"] = command.split(" ", 1)[0]
        elif COMMAND_STDOUT.search(text):
            output = _local_output(text)
            if output:
                self._new_message(number, obj, "system", KIND_EVENT).texts.append(output)
            else:
                self.skipped["empty local command output"] += 1
        else:
            self._new_message(number, obj, "user").texts.append(text)

    def _user_blocks(self, number: int, content: Any) -> tuple[str, bool]:
        """The text of a user line's blocks, filling tool results into their calls; and whether it held results."""
        if isinstance(content, str):
            return content, False
        parts: list[str] = []
        had_results = False
        for block in map(as_dict, as_list(content)):
            kind = block.get("type")
            if kind == "text":
                parts.append(as_str(block.get("text")) or "")
            elif kind in ("image", "document"):
                parts.append(_media(block))
            elif kind == "tool_result":
                had_results = True
                call_id = as_str(block.get("tool_use_id"))
                output = _result_text(block.get("content"))
                if not self.calls.resolve(call_id, output, block.get("is_error") is True):
                    self._warn(number, f"tool_result for unknown or already answered tool_use id {call_id!r}; skipped")
            else:
                self._warn(number, f"unknown user content block {kind!r}; skipped")
        return "\n\n".join(part for part in parts if part), had_results

    # ---- system ---------------------------------------------------------------------------------------------

    def _system(self, number: int, obj: dict[str, Any]) -> None:
        subtype = as_str(obj.get("subtype"))
        if subtype == "compact_boundary":
            text = _compaction_text(obj)
        elif subtype == "api_error":
            text = _api_error_text(obj)
        elif subtype == "local_command":
            content = as_str(obj.get("content")) or ""
            text = f"Local command: {_command(content)}" if COMMAND_NAME.search(content) else _local_output(content)
            if not text:
                self.skipped["empty local command output"] += 1
                return
        elif subtype is None or subtype in QUIET_SYSTEM_SUBTYPES:
            self.skipped[f"system:{subtype or 'informational'}"] += 1
            return
        else:
            self._warn(number, f"unknown system subtype {subtype!r}; skipped")
            self.skipped[f"system:{subtype}"] += 1
            return
        self._new_message(number, obj, "system", KIND_EVENT).texts.append(text)

    # ---- the session ----------------------------------------------------------------------------------------

    def _session(self) -> SessionDraft:
        parent = self.session_id
        session_id = parent or self.ctx.file_session_id
        parent_session_id = None
        agent_file = AGENT_FILE.match(PurePath(self.ctx.path).name)
        agent_id = self.agent_id or (agent_file.group("agent") if agent_file else None)
        if agent_id and (agent_file or self.sidechain):
            parent = parent or _parent_from_layout(self.ctx.path)
            if parent:
                session_id, parent_session_id = f"{parent}/{agent_id}", parent
        metadata: dict[str, Any] = {"versions": self.versions}
        if len(self.titles) > 1:
            metadata["titles"] = self.titles
        if self.slug:
            metadata["slug"] = self.slug
        if parent_session_id:
            metadata["agent_id"] = agent_id
        return SessionDraft(
            session_id=session_id,
            project=self.ctx.project(self.cwd),
            messages=self.messages,
            title=self.titles[-1] if self.titles else None,
            parent_session_id=parent_session_id,
            cwd=self.cwd,
            git_branch=self.git_branch,
            model=self.model,
            metadata=metadata,
        )


def _parent_from_layout(path: str) -> str | None:
    """`<sessionId>/subagents/agent-<id>.jsonl` names its parent by folder."""
    parts = PurePath(path).parts
    return parts[-3] if len(parts) >= 3 and parts[-2] == "subagents" else None


def _media(block: dict[str, Any]) -> str:
    source = as_dict(block.get("source"))
    return placeholder(str(block.get("type")), as_str(source.get("media_type")))


def _result_text(content: Any) -> str:
    """A tool_result's content (a string, or text and image blocks) as text."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in map(as_dict, as_list(content)):
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") in ("image", "document"):
            parts.append(_media(block))
    return "\n".join(parts)


def _command(text: str) -> str:
    """`<command-name>/compact</command-name>...<command-args>keep tests</command-args>` as `/compact keep tests`."""
    name_match = COMMAND_NAME.search(text)
    name = name_match.group(1).strip() if name_match else ""
    name = name if name.startswith("/") else f"/{name}"
    args_match = COMMAND_ARGS.search(text)
    args = args_match.group(1).strip() if args_match else ""
    return f"{name} {args}".strip()


def _local_output(text: str) -> str:
    """`<local-command-stdout>...</local-command-stdout>` as `Local command output: ...`; "" when it said nothing."""
    match = COMMAND_STDOUT.search(text)
    output = (match.group(1) if match else text).strip()
    return f"Local command output: {output}" if output else ""


def _compaction_text(obj: dict[str, Any]) -> str:
    meta = as_dict(obj.get("compactMetadata"))
    trigger, tokens = as_str(meta.get("trigger")), as_int(meta.get("preTokens"))
    details = [detail for detail in (trigger, f"{tokens} tokens" if tokens is not None else None) if detail]
    return "Conversation compacted" + (f" ({', '.join(details)})" if details else "")


def _api_error_text(obj: dict[str, Any]) -> str:
    error = as_dict(obj.get("error"))
    inner = as_dict(error.get("error"))
    detail = as_str(inner.get("message")) or as_str(error.get("message")) or as_str(obj.get("content"))
    status = as_int(error.get("status"))
    text = "API error" + (f" {status}" if status is not None else "") + (f": {detail}" if detail else "")
    attempt, limit, wait = as_int(obj.get("retryAttempt")), as_int(obj.get("maxRetries")), obj.get("retryInMs")
    if attempt is not None and limit is not None:
        retry = f"retry {attempt} of {limit}"
        if isinstance(wait, (int, float)) and not isinstance(wait, bool):
            retry += f" in {wait / 1000:.1f} s"
        text += f" ({retry})"
    return text
