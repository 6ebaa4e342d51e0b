"""Gemini CLI sessions: `~/.gemini/tmp/<project>/chats/session-<time>-<8hex>.json` (shared/formats section 3).

One JSON document per session, rewritten whole as the session grows: `{sessionId, projectHash, startTime,
lastUpdated, messages: [...]}`. Newer CLIs write the same records as JSONL (`session-*.jsonl`): a header line with
`sessionId`, then message lines; a `{"$set": {...}}` line updates the header and a message written again with the
same `id` (once its tool calls finished) replaces the earlier copy, keeping its place.

Messages: `type` "user" is the person (a `<session_context>` block the CLI injects is kind=injected), "gemini" the
assistant, "info"/"warning"/"error" system events. `content` is a string or a list of parts (`text`, `thought: true`
parts are thinking, `functionCall`/`functionResponse` parts repeat what `toolCalls` holds and are skipped).
`thoughts: [{subject, description}]` become the thinking. `toolCalls: [{id, name, args, result, status}]` become
ToolCalls; the output is the `functionResponse` whose id is the call's (some versions copy every response of the
turn into each call), else the `resultDisplay` text; `status` "error" marks a failed call.

Identity: session_id = `sessionId` (else the path-derived id); message_id = the message `id` (else `M<n>`, its
1-based position); project = the folder above `chats` when it is a name (newer CLIs), else the first folder under
the source root (older CLIs name it by the project's SHA-256).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import PurePath
from typing import Any

from sessionmem_pipeline.core.formats.drafts import (
    DraftCall,
    DraftMessage,
    SessionDraft,
    as_dict,
    as_id,
    as_list,
    as_str,
    build_result,
    placeholder,
)
from sessionmem_pipeline.core.formats.registry import FormatError, Related
from sessionmem_pipeline.core.formats.source import FileContext, parse_timestamp, split_jsonl
from sessionmem_pipeline.core.models import KIND_EVENT, KIND_INJECTED, KIND_MESSAGE, ParseResult, ParseWarning

FORMAT = "gemini"
ROLES = {"user": "user", "gemini": "assistant", "model": "assistant"}
EVENT_TYPES = frozenset({"info", "warning", "error"})
PROJECT_HASH = re.compile(r"^[0-9a-f]{64}$")
SESSION_CONTEXT = "<session_context>"
HEADER_FIELDS = ("sessionId", "projectHash", "startTime", "lastUpdated", "summary", "kind")


def is_session_document(document: Any) -> bool:
    """A Gemini session document wherever it lies: `sessionId` plus messages typed user/gemini."""
    if not isinstance(document, dict) or "sessionId" not in document or not isinstance(document.get("messages"), list):
        return False
    return any(isinstance(item, dict) and item.get("type") in ROLES for item in document["messages"])


def parse(ctx: FileContext, data: bytes, related: Related) -> ParseResult:
    """A session document (`.json`) or its JSONL form."""
    if ctx.path.endswith(".jsonl"):
        header, messages, warnings = _records_from_lines(ctx, data)
    else:
        document = decode_json(data)
        if not isinstance(document, dict):
            raise FormatError("unknown format", f"{ctx.path}: expected a Gemini CLI session object")
        header, messages, warnings = document, as_list(document.get("messages")), []
    return parse_session(ctx, header, messages, warnings)


def decode_json(data: bytes) -> Any:
    """The JSON document, or FormatError naming what is wrong (shared by every JSON-document format)."""
    try:
        return json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise FormatError("not UTF-8", f"not UTF-8 (byte {exc.start})") from exc
    except (ValueError, RecursionError) as exc:
        raise FormatError("invalid JSON", f"invalid JSON: {exc}") from exc


def _records_from_lines(ctx: FileContext, data: bytes) -> tuple[dict[str, Any], list[Any], list[ParseWarning]]:
    lines, _, warnings = split_jsonl(data, ctx.path, final=True)
    header: dict[str, Any] = {}
    by_id: dict[str, int] = {}
    messages: list[Any] = []
    for line in lines:
        obj = line.data
        if obj is None:
            continue
        if isinstance(obj.get("$set"), dict):
            header.update(obj["$set"])
        elif "type" in obj:
            message_id = as_id(obj.get("id"))
            if message_id in by_id:
                messages[by_id[message_id]] = obj
            else:
                if message_id:
                    by_id[message_id] = len(messages)
                messages.append(obj)
        elif "sessionId" in obj:
            header.update(obj)
    return header, messages, warnings


def parse_session(
    ctx: FileContext, header: dict[str, Any], messages: list[Any], warnings: list[ParseWarning]
) -> ParseResult:
    skipped: Counter[str] = Counter()
    drafts: list[DraftMessage] = []
    for position, item in enumerate(messages, start=1):
        obj = as_dict(item)
        kind = as_str(obj.get("type"))
        if kind not in ROLES and kind not in EVENT_TYPES:
            warnings.append(ParseWarning(ctx.path, 0, f"messages[{position - 1}]: unknown type {kind!r}; skipped"))
            continue
        drafts.append(_message(obj, position, kind))
    session = SessionDraft(
        session_id=as_id(header.get("sessionId")) or ctx.file_session_id,
        project=_project(ctx),
        messages=drafts,
        title=as_str(header.get("summary")),
        model=next((m.metadata["model"] for m in reversed(drafts) if "model" in m.metadata), None),
        metadata={key: header[key] for key in HEADER_FIELDS[1:] if key in header and key != "summary"},
    )
    return build_result(ctx.path, FORMAT, [session], warnings, skipped)


def _message(obj: dict[str, Any], position: int, kind: str) -> DraftMessage:
    texts, thinking = _content(obj.get("content"))
    role = ROLES.get(kind, "system")
    message = DraftMessage(
        message_id=as_id(obj.get("id")) or f"M{position}",
        role=role,
        line=0,
        timestamp=parse_timestamp(obj.get("timestamp")),
        kind=KIND_EVENT if kind in EVENT_TYPES else KIND_MESSAGE,
        texts=texts,
    )
    if role == "user" and any(text.lstrip().startswith(SESSION_CONTEXT) for text in texts):
        message.kind = KIND_INJECTED
    for thought in map(as_dict, as_list(obj.get("thoughts"))):
        subject, description = as_str(thought.get("subject")), as_str(thought.get("description"))
        message.thinking.append(": ".join(part for part in (subject, description) if part))
    if not message.thinking:
        message.thinking = thinking
    message.calls = [_call(as_dict(call)) for call in as_list(obj.get("toolCalls"))]
    model = as_str(obj.get("model"))
    if model:
        message.metadata["model"] = model
    return message


def _content(content: Any) -> tuple[list[str], list[str]]:
    """(texts, thoughts) of a string or a list of parts."""
    if isinstance(content, str):
        return [content], []
    texts: list[str] = []
    thoughts: list[str] = []
    for part in as_list(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        part = as_dict(part)
        text = as_str(part.get("text"))
        if text:
            (thoughts if part.get("thought") is True else texts).append(text)
        elif "inlineData" in part or "fileData" in part:
            media = as_dict(part.get("inlineData") or part.get("fileData"))
            texts.append(placeholder("file", as_str(media.get("mimeType"))))
    return texts, thoughts


def _call(call: dict[str, Any]) -> DraftCall:
    call_id = as_str(call.get("id"))
    responses = [as_dict(as_dict(item).get("functionResponse")) for item in as_list(call.get("result"))]
    own = [r for r in responses if as_str(r.get("id")) == call_id] or (responses if len(responses) == 1 else [])
    output = _response_text(as_dict(own[0].get("response"))) if own else None
    if output is None:
        display = call.get("resultDisplay")
        output = display if isinstance(display, str) and display else None
    return DraftCall(
        name=as_str(call.get("name")) or "unknown",
        input=as_dict(call.get("args")),
        call_id=call_id,
        output=output,
        is_error=call.get("status") in ("error", "cancelled"),
    )


def _response_text(response: dict[str, Any]) -> str | None:
    for key in ("output", "error", "content"):
        value = response.get(key)
        if isinstance(value, str):
            return value
    return json.dumps(response, ensure_ascii=False) if response else None


def _project(ctx: FileContext) -> str:
    parent = PurePath(ctx.path).parent
    if parent.name == "chats" and parent.parent.name and not PROJECT_HASH.match(parent.parent.name):
        return parent.parent.name
    return ctx.project()
