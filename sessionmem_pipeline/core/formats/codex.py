"""OpenAI Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`), versions 0.40 to 0.125,
and the pre-envelope layout of August 2025 (shared/formats/agent-transcripts.md section 2).

Every line is `{timestamp, type, payload}`; nothing carries a message id, so message_id is `L<n>`, the line number of
the message's first line, and file order is the order. session_id is `session_meta.payload.id`; project is the last
component of its `cwd` (or of the `<environment_context>` cwd in rollouts without one); git_branch is its
`git.branch`. The model comes from `turn_context`: ParsedSession.model is the last one, and each assistant message
has the model of its turn in metadata["model"]; messages of a turn with a `turn_id` carry it in metadata["turn_id"].

How lines become messages:
- The person's prompt is written twice, as a `response_item` user message and as `event_msg user_message`, in either
  order. The first copy becomes the user message; the second is dropped (counted as "duplicate user prompt") when its
  text matches, compared without image placeholders and the VS Code "# Context from my IDE setup" preamble (which is
  moved to metadata["ide_context"]).
- Injected context is kind=injected: user-role items starting with `<environment_context>`, `# AGENTS.md
  instructions`, `<user_instructions>`, `<permissions instructions>`, `<INSTRUCTIONS>` or `<turn_aborted>` (role user),
  and every developer or system item (role system).
- Assistant side: reasoning summaries (thinking), tool calls and assistant text of one turn gather into assistant
  messages. A message opens with the first of them; tool calls always join the open message; reasoning and text join
  it too unless it already has text or tool calls, in which case they start the next one. So messages keep the real
  order (thinking, text, then the calls it announced): "reason, call, call, answer" is a message with the calls and
  then the answer, and 0.104+ commentary ("I'll reproduce it", calls, reasoning, "Found it; patching", calls, final
  answer) reads as one message per step, the final answer last, after every call. Any other message
  (prompt, injected context, event, compaction) closes the open one.
- Tools: `function_call` (arguments parsed from their JSON string into ToolCall.input), `custom_tool_call` (its raw
  text, e.g. an apply_patch patch, under input["input"]), `local_shell_call` (its action as input) and their outputs,
  paired by call_id. `web_search_call` is ToolCall(name="web_search", input={"query": ...}); the transcript never
  records search results, so its output is "" once completed and None otherwise.
- Tool outputs: the JSON string `{"output": ..., "metadata": {"exit_code": ...}}` (<= 0.77) and the plain text
  "...Process exited with code N...Output:\\n..." (>= 0.104) both reduce to the command's own output. A non-zero exit
  code sets is_error and is stated as the output's first line, "Exit code N", the wording Claude Code's Bash results
  use, so later stages read exit codes of both formats with one rule. ToolCall.input stays what the model sent.
- `compacted` is the agent's compaction summary (kind=compaction_summary, role system): its message, or a description
  of the replacement history when the message is empty. `event_msg turn_aborted` and `error` are system events
  (an aborted turn has metadata[TURN_ABORTED], for `core.ending`).
  Other UI events (agent_message and agent_reasoning duplicate response items; token_count, task_started, ...) are
  skipped and counted as `event_msg:<type>`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
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
    image_placeholder,
    json_arguments,
)
from sessionmem_pipeline.core.ending import TURN_ABORTED
from sessionmem_pipeline.core.formats.source import FileContext, JsonLine, parse_timestamp
from sessionmem_pipeline.core.models import (
    KIND_COMPACTION,
    KIND_EVENT,
    KIND_INJECTED,
    KIND_MESSAGE,
    ParseResult,
    ParseWarning,
)

FORMAT = "codex"
ENVELOPE_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
ITEM_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "web_search_call",
        "ghost_snapshot",
        "compaction",
    }
)
INJECTED_PREFIXES = (
    "<environment_context>",
    "# AGENTS.md instructions",
    "<user_instructions>",
    "<permissions instructions>",
    "<INSTRUCTIONS>",
    "<turn_aborted>",
)
IDE_CONTEXT = "# Context from my IDE setup:"
IDE_REQUEST = "## My request for Codex:"
EXIT_CODE = re.compile(r"^Process exited with code (-?\d+)[ \t]*$", re.MULTILINE)
OUTPUT_HEADER = "\nOutput:\n"
CONTEXT_CWD = re.compile(r"<cwd>(.*?)</cwd>", re.DOTALL)
IMAGE_PLACEHOLDER = re.compile(r"\[image(?::[^\]]*)?\]")


def line_problem(obj: dict[str, Any]) -> str | None:
    """Why a line cannot be read as a Codex rollout line (a bad line), or None."""
    kind = obj.get("type") if isinstance(obj.get("type"), str) else None
    if "payload" in obj or kind in ENVELOPE_TYPES:
        if kind is None:
            return "missing type"
        if not isinstance(obj.get("payload"), dict):
            return f"{kind} line without a payload object"
        return None
    if "record_type" in obj or kind in ITEM_TYPES or is_pre_envelope_meta(obj):
        return None
    return "missing type" if kind is None else None


def parse(ctx: FileContext, lines: Sequence[JsonLine]) -> ParseResult:
    """Codex rollout lines to one session (see the module docstring)."""
    return _CodexFile(ctx).read(lines)


def is_pre_envelope_meta(obj: dict[str, Any]) -> bool:
    """Line 1 of the pre-envelope layout: `{id, timestamp, instructions, git}` with no type."""
    return "type" not in obj and "role" not in obj and isinstance(obj.get("id"), str) and "timestamp" in obj


def _envelope(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(line type, payload) for the envelope and the pre-envelope layouts alike."""
    if isinstance(obj.get("payload"), dict):
        return obj["type"], obj["payload"]
    if "record_type" in obj:
        return "record_type", obj
    if isinstance(obj.get("type"), str) and obj["type"] in ITEM_TYPES:
        return "response_item", obj
    if is_pre_envelope_meta(obj):
        return "session_meta", obj
    return str(obj.get("type")), {}


class _CodexFile:
    """State while reading one rollout: the open assistant message, open tool calls, prompts awaiting their copy."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.warnings: list[ParseWarning] = []
        self.skipped: Counter[str] = Counter()
        self.messages: list[DraftMessage] = []
        self.calls = CallBook()
        self.open_reply: DraftMessage | None = None
        self.prompts: list[tuple[str, str]] = []  # (comparison key, "item" | "event") not yet matched by the other copy
        self.meta: dict[str, Any] | None = None
        self.model: str | None = None
        self.turn: dict[str, Any] = {}
        self.context_cwd: str | None = None  # from <environment_context>, for rollouts without session_meta.cwd

    def read(self, lines: Sequence[JsonLine]) -> ParseResult:
        for line in lines:
            if line.data is None:
                continue
            problem = line_problem(line.data)
            if problem:
                self._warn(line.number, f"{problem}; line skipped")
                continue
            kind, payload = _envelope(line.data)
            timestamp = parse_timestamp(line.data.get("timestamp"))
            self._line(line.number, timestamp, kind, payload)
        return build_result(self.ctx.path, FORMAT, [self._session()], self.warnings, self.skipped)

    def _warn(self, number: int, reason: str) -> None:
        self.warnings.append(ParseWarning(self.ctx.path, number, reason))

    def _line(self, number: int, timestamp: datetime | None, kind: str, payload: dict[str, Any]) -> None:
        if kind == "session_meta":
            if self.meta is None:
                self.meta = payload
            else:
                self.skipped["session_meta (repeated)"] += 1
        elif kind == "turn_context":
            self.turn = payload
            self.model = as_str(payload.get("model")) or self.model
        elif kind == "response_item":
            self._item(number, timestamp, payload)
        elif kind == "event_msg":
            self._event(number, timestamp, payload)
        elif kind == "compacted":
            self.prompts.clear()
            self._emit(number, timestamp, "system", KIND_COMPACTION, _compaction_text(payload))
        elif kind == "record_type":
            self.skipped[f"record_type:{payload.get('record_type')}"] += 1
        else:
            self._warn(number, f"unknown line type {kind!r}; skipped")

    # ---- messages -------------------------------------------------------------------------------------------

    def _new(self, number: int, timestamp: datetime | None, role: str, kind: str) -> DraftMessage:
        meta = self.meta or {}
        message = DraftMessage(
            message_id=f"L{number}",
            role=role,
            line=number,
            timestamp=timestamp,
            kind=kind,
            cwd=as_str(self.turn.get("cwd")) or as_str(meta.get("cwd")) or self.context_cwd,
            git_branch=as_str(as_dict(meta.get("git")).get("branch")),
        )
        turn_id = as_str(self.turn.get("turn_id"))
        if turn_id:
            message.metadata["turn_id"] = turn_id
        self.messages.append(message)
        return message

    def _emit(self, number: int, timestamp: datetime | None, role: str, kind: str, text: str) -> DraftMessage:
        """A message that is not the assistant's reply: it closes the open reply."""
        self.open_reply = None
        message = self._new(number, timestamp, role, kind)
        message.texts.append(text)
        return message

    def _reply(self, number: int, timestamp: datetime | None, *, next_step: bool = False) -> DraftMessage:
        """The open assistant message, or a new one for a next step (reasoning or text) once the open one has text or
        tool calls: a message reads thinking, text, calls, so what comes after its calls is the next message."""
        self.prompts.clear()
        if self.open_reply is None or (next_step and (self.open_reply.has_text or self.open_reply.calls)):
            self.open_reply = self._new(number, timestamp, "assistant", KIND_MESSAGE)
            if self.model:
                self.open_reply.metadata["model"] = self.model
        return self.open_reply

    def _prompt(self, number: int, timestamp: datetime | None, text: str, copy: str) -> None:
        """The person's prompt, unless it is the second copy of one already emitted."""
        text, ide_context = _split_ide_context(text)
        key = _prompt_key(text)
        for index, (seen, seen_copy) in enumerate(self.prompts):
            if seen_copy != copy and (seen == key or (seen and key and (seen in key or key in seen))):
                del self.prompts[index]
                self.skipped["duplicate user prompt"] += 1
                return
        if not text.strip():
            self.skipped["empty message"] += 1
            return
        message = self._emit(number, timestamp, "user", KIND_MESSAGE, text)
        if ide_context:
            message.metadata["ide_context"] = ide_context
        self.prompts.append((key, copy))

    # ---- response items -------------------------------------------------------------------------------------

    def _item(self, number: int, timestamp: datetime | None, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "message":
            self._item_message(number, timestamp, item)
        elif kind == "reasoning":
            self._reply(number, timestamp, next_step=True).thinking.append(_reasoning_text(item))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            call = DraftCall(
                name=as_str(item.get("name")) or ("local_shell" if kind == "local_shell_call" else "unknown"),
                input=_call_input(kind, item),
                call_id=as_str(item.get("call_id")) or as_str(item.get("id")),
            )
            self._reply(number, timestamp).calls.append(call)
            self.calls.add(call)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = as_str(item.get("call_id"))
            output, is_error = _tool_output(item.get("output"))
            if not self.calls.resolve(call_id, output, is_error):
                self._warn(number, f"{kind} for unknown or already answered call_id {call_id!r}; skipped")
        elif kind == "web_search_call":
            action = as_dict(item.get("action"))
            query = as_str(action.get("query")) or " | ".join(q for q in as_list(action.get("queries")) if as_str(q))
            status = as_str(item.get("status"))
            output = "" if status == "completed" else None  # results are never recorded, only that it ran
            call = DraftCall("web_search", {"query": query}, as_str(item.get("id")), output)
            self._reply(number, timestamp).calls.append(call)
        elif kind in ("ghost_snapshot", "compaction"):
            self.skipped[f"response_item:{kind}"] += 1
        else:
            self._warn(number, f"unknown response item {kind!r}; skipped")

    def _item_message(self, number: int, timestamp: datetime | None, item: dict[str, Any]) -> None:
        role = item.get("role")
        text = _item_text(item.get("content"))
        if role == "assistant":
            self._reply(number, timestamp, next_step=True).texts.append(text)
        elif role == "user" and text.lstrip().startswith(INJECTED_PREFIXES):
            self._emit(number, timestamp, "user", KIND_INJECTED, text)
            context_cwd = CONTEXT_CWD.search(text)
            self.context_cwd = self.context_cwd or (context_cwd.group(1).strip() if context_cwd else None)
        elif role == "user":
            self._prompt(number, timestamp, text, "item")
        elif role in ("developer", "system"):
            self._emit(number, timestamp, "system", KIND_INJECTED, text)
        else:
            self._warn(number, f"message with unknown role {role!r}; skipped")

    # ---- events ---------------------------------------------------------------------------------------------

    def _event(self, number: int, timestamp: datetime | None, event: dict[str, Any]) -> None:
        kind = as_str(event.get("type")) or "untyped"
        if kind == "user_message":
            message = event.get("message") if isinstance(event.get("message"), str) else ""
            images = [image_placeholder(url) for url in as_list(event.get("images"))]
            self._prompt(number, timestamp, "\n\n".join([message, *images]) if images else message, "event")
        elif kind == "turn_aborted":
            self.prompts.clear()
            reason = as_str(event.get("reason"))
            text = "Turn aborted" + (f" ({reason})" if reason else "")
            self._emit(number, timestamp, "system", KIND_EVENT, text).metadata[TURN_ABORTED] = True
        elif kind == "error":
            detail = as_str(event.get("message"))
            self._emit(number, timestamp, "system", KIND_EVENT, "Error" + (f": {detail}" if detail else ""))
        else:
            self.skipped[f"event_msg:{kind}"] += 1

    # ---- the session ----------------------------------------------------------------------------------------

    def _session(self) -> SessionDraft:
        meta = self.meta or {}
        git = as_dict(meta.get("git"))
        cwd = as_str(meta.get("cwd")) or as_str(self.turn.get("cwd")) or self.context_cwd
        details = {
            "cli_version": meta.get("cli_version"),
            "originator": meta.get("originator"),
            "model_provider": meta.get("model_provider"),
            "source": meta.get("source"),
            "git_commit": git.get("commit_hash"),
            "repository_url": git.get("repository_url"),
        }
        return SessionDraft(
            session_id=as_str(meta.get("id")) or self.ctx.file_session_id,
            project=self.ctx.project(cwd),
            messages=self.messages,
            cwd=cwd,
            git_branch=as_str(git.get("branch")),
            model=self.model,
            metadata={key: value for key, value in details.items() if isinstance(value, str) and value},
        )


def _item_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in map(as_dict, as_list(content)):
        if block.get("type") in ("input_text", "output_text", "text") and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") in ("input_image", "image"):
            parts.append(image_placeholder(block.get("image_url")))
    return "\n\n".join(parts)


def _split_ide_context(text: str) -> tuple[str, str | None]:
    """The VS Code extension prefixes the request with the open files; keep the request as the text."""
    if text.lstrip().startswith(IDE_CONTEXT) and IDE_REQUEST in text:
        context, request = text.split(IDE_REQUEST, 1)
        return request.strip(), context.strip()
    return text, None


def _prompt_key(text: str) -> str:
    return " ".join(IMAGE_PLACEHOLDER.sub(" ", text).split())


def _reasoning_text(item: dict[str, Any]) -> str:
    summary = [as_str(as_dict(part).get("text")) for part in as_list(item.get("summary"))]
    parts = [text for text in summary if text]
    if not parts:  # open models write their reasoning as content instead of a summary
        parts = [text for part in as_list(item.get("content")) if (text := as_str(as_dict(part).get("text")))]
    return "\n\n".join(parts)


def _call_input(kind: str, item: dict[str, Any]) -> dict[str, Any]:
    if kind == "custom_tool_call":
        raw = item.get("input")
        return {"input": raw if isinstance(raw, str) else json.dumps(raw)}
    if kind == "local_shell_call":
        return as_dict(item.get("action"))
    return json_arguments(item.get("arguments"))


def _tool_output(raw: Any) -> tuple[str, bool]:
    """A tool output as (text, is_error), from any version's shape (see the module docstring)."""
    if isinstance(raw, list):
        return _item_text(raw), False
    if isinstance(raw, str):
        decoded = _json_object(raw)
        if decoded is None or not {"output", "content"} & decoded.keys():  # plain text, or a tool's own JSON
            return _plain_output(raw)
        raw = decoded
    if not isinstance(raw, dict):
        return "", False
    text = raw.get("output", raw.get("content"))
    text = text if isinstance(text, str) else _item_text(text) if isinstance(text, list) else json.dumps(raw)
    exit_code = as_int(as_dict(raw.get("metadata")).get("exit_code"))
    if exit_code is not None:
        return _with_exit_code(text, exit_code)
    return text, raw.get("success") is False


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        decoded = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return decoded if isinstance(decoded, dict) else None


def _plain_output(text: str) -> tuple[str, bool]:
    """`Chunk ID: ..\\nWall time: ..\\nProcess exited with code 1\\n...Output:\\n<output>` (>= 0.104)."""
    match = EXIT_CODE.search(text)
    if match is None:
        return text, False
    header_end = text.find(OUTPUT_HEADER, match.end())
    body = text[header_end + len(OUTPUT_HEADER) :] if header_end != -1 else text
    return _with_exit_code(body, int(match.group(1)))


def _with_exit_code(text: str, exit_code: int) -> tuple[str, bool]:
    if exit_code == 0:
        return text, False
    return f"Exit code {exit_code}\n{text}", True


def _compaction_text(payload: dict[str, Any]) -> str:
    message = as_str(payload.get("message"))
    if message and message.strip():
        return message
    counts: Counter[str] = Counter()
    for item in map(as_dict, as_list(payload.get("replacement_history"))):
        counts[as_str(item.get("role")) or as_str(item.get("type")) or "item"] += 1
    if not counts:
        return "Context compacted"
    listed = ", ".join(f"{count} {name}" for name, count in counts.items())
    return f"Context compacted; the earlier conversation was replaced by {sum(counts.values())} items ({listed})"
