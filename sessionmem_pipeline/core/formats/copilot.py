"""GitHub Copilot Chat sessions in VS Code: `workspaceStorage/<hash>/chatSessions/<id>.json` (and
`globalStorage/emptyWindowChatSessions/<id>.json` for chats opened without a folder).

One JSON document per session: `{version, sessionId, creationDate, lastMessageDate, customTitle?, requests: [...]}`.
Newer VS Code builds write the same state as a JSONL log (`<id>.jsonl`): a `{"kind": 0, "v": state}` line, then
`{"kind": 1, "k": path, "v": value}` lines that set a value and `{"kind": 2, "k": path, "v": items, "i"?: index}`
lines that append to (or cut and extend) the list at that path; the state after the last line is the session.

Each request is one turn: `message.text` is what the person typed (files attached through `variableData` become
placeholders naming them), `response` the reply's parts: markdown (`{value}` or `markdownContent`) is the text,
`thinking` parts are thinking, `inlineReference` parts name the file they point at; `toolInvocationSerialized`
parts are the tool calls (`toolId`, the terminal command or the invocation message as input), filled with their
arguments and results from `result.metadata.toolCallRounds`/`toolCallResults` when the request holds them.

Identity: session_id = `sessionId` (else the file name); message_id = `requestId` for the person's turn and
`responseId` (else `<requestId>/response`) for the reply; project = the last component of the folder in the
workspace's `workspace.json` (beside `chatSessions`), else the folder rule. Times: the request's `timestamp`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import PurePath
from typing import Any
from urllib.parse import unquote, urlparse

from sessionmem_pipeline.core.formats.drafts import (
    DraftCall,
    DraftMessage,
    SessionDraft,
    as_dict,
    as_id,
    as_int,
    as_list,
    as_str,
    build_result,
    json_arguments,
    placeholder,
)
from sessionmem_pipeline.core.formats.gemini import decode_json
from sessionmem_pipeline.core.formats.registry import FormatError, Related
from sessionmem_pipeline.core.formats.source import FileContext, parse_timestamp, split_jsonl
from sessionmem_pipeline.core.models import ParseResult, ParseWarning

FORMAT = "copilot_chat"
SNAPSHOT, SET, PUSH = 0, 1, 2
MARKDOWN_KINDS = frozenset({None, "markdownContent", "markdownVuln"})


def parse(ctx: FileContext, data: bytes, related: Related) -> ParseResult:
    warnings: list[ParseWarning] = []
    skipped: Counter[str] = Counter()
    state = _replay(ctx, data, warnings, skipped) if ctx.path.endswith(".jsonl") else decode_json(data)
    if not isinstance(state, dict):
        raise FormatError("unknown format", f"{ctx.path}: expected a Copilot Chat session object")
    messages: list[DraftMessage] = []
    model = None
    for position, item in enumerate(as_list(state.get("requests")), start=1):
        request = as_dict(item)
        messages.extend(_turn(request, position, skipped))
        model = as_str(request.get("modelId")) or model
    folder = workspace_folder(related.read(str(PurePath(ctx.path).parent.parent / "workspace.json")))
    draft = SessionDraft(
        session_id=as_id(state.get("sessionId")) or PurePath(ctx.path).stem,
        project=ctx.project(folder),
        messages=messages,
        title=as_str(state.get("customTitle")),
        cwd=folder,
        model=model,
        metadata={key: state[key] for key in ("initialLocation", "version") if key in state},
    )
    return build_result(ctx.path, FORMAT, [draft], warnings, skipped)


def _replay(ctx: FileContext, data: bytes, warnings: list[ParseWarning], skipped: Counter[str]) -> Any:
    """The session state after every line of the JSONL log."""
    lines, _, line_warnings = split_jsonl(data, ctx.path, final=True)
    warnings.extend(line_warnings)
    state: Any = None
    for line in lines:
        entry = line.data
        if entry is None:
            continue
        kind = entry.get("kind")
        if kind == SNAPSHOT:
            state = entry.get("v")
        elif kind in (SET, PUSH) and isinstance(entry.get("k"), list) and _apply(state, entry):
            continue
        else:
            skipped["unreadable log line"] += 1
    return state


def _apply(state: Any, entry: dict[str, Any]) -> bool:
    """Set or extend the value at the entry's path; False when the path does not lead anywhere."""
    path = entry["k"]
    if not path:
        return False
    parent = state
    for key in path[:-1]:
        parent = _child(parent, key)
    last = path[-1]
    if entry["kind"] == SET:
        if isinstance(parent, dict) and isinstance(last, str):
            parent[last] = entry.get("v")
            return True
        if isinstance(parent, list) and as_int(last) is not None and 0 <= last < len(parent):
            parent[last] = entry.get("v")
            return True
        return False
    target = _child(parent, last)
    if not isinstance(target, list) or not isinstance(entry.get("v"), list):
        return False
    start = as_int(entry.get("i"))
    if start is not None and 0 <= start <= len(target):
        del target[start:]
    target.extend(entry["v"])
    return True


def _child(value: Any, key: Any) -> Any:
    if isinstance(value, dict) and isinstance(key, str):
        return value.get(key)
    if isinstance(value, list) and as_int(key) is not None and 0 <= key < len(value):
        return value[key]
    return None


def _turn(request: dict[str, Any], position: int, skipped: Counter[str]) -> list[DraftMessage]:
    request_id = as_id(request.get("requestId")) or f"R{position}"
    timestamp = parse_timestamp(request.get("timestamp"))
    message = as_dict(request.get("message"))
    asked = DraftMessage(request_id, "user", 0, timestamp, texts=[as_str(message.get("text")) or ""])
    for variable in map(as_dict, as_list(as_dict(request.get("variableData")).get("variables"))):
        if variable.get("kind") == "file" or as_dict(variable.get("value")).get("scheme") == "file":
            asked.texts.append(placeholder("file", as_str(variable.get("name"))))
    reply_id = as_id(request.get("responseId")) or f"{request_id}/response"
    reply = DraftMessage(reply_id, "assistant", 0, timestamp)
    metadata = as_dict(as_dict(request.get("result")).get("metadata"))
    rounds = {  # call id -> (name, arguments) the model sent
        as_str(call.get("id")) or "": call
        for turn in map(as_dict, as_list(metadata.get("toolCallRounds")))
        for call in map(as_dict, as_list(turn.get("toolCalls")))
    }
    results = as_dict(metadata.get("toolCallResults"))
    pieces: list[str] = []  # markdown arrives in fragments around inline references
    for part in map(as_dict, as_list(request.get("response"))):
        kind = as_str(part.get("kind"))
        if kind in MARKDOWN_KINDS and ("value" in part or "content" in part):
            pieces.append(as_str(part.get("value")) or as_str(as_dict(part.get("content")).get("value")) or "")
        elif kind == "inlineReference":
            pieces.append(f"`{_reference_name(part.get('inlineReference'))}`")
        elif kind == "thinking":
            reply.thinking.append(_text(part.get("value")))
        elif kind == "toolInvocationSerialized":
            reply.calls.append(_call(part, rounds, results))
        else:
            skipped[f"{kind or 'unknown'} response part"] += 1
    reply.texts.append("".join(pieces))
    model = as_str(request.get("modelId"))
    if model:
        reply.metadata["model"] = model
    return [asked, reply]


def _call(part: dict[str, Any], rounds: dict[str, dict[str, Any]], results: dict[str, Any]) -> DraftCall:
    call_id = as_str(part.get("toolCallId"))
    sent = rounds.get(call_id or "")
    data = as_dict(part.get("toolSpecificData"))
    command = as_str(as_dict(data.get("commandLine")).get("original"))
    if sent is not None:
        arguments = json_arguments(sent.get("arguments"))
    elif command:
        arguments = {"command": command}
    else:
        arguments = {"message": _text(part.get("invocationMessage"))}
    result = as_dict(results.get(call_id or ""))
    output = "\n".join(_text(as_dict(item).get("value")) for item in as_list(result.get("content"))) or None
    return DraftCall(
        name=as_str(part.get("toolId")) or as_str(as_dict(sent).get("name")) or "unknown",
        input=arguments,
        call_id=call_id,
        output=output,
    )


def _text(value: Any) -> str:
    """A plain or localized string (`{value: ...}`), or a structured value as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("value"), str):
        return value["value"]
    return json.dumps(value, ensure_ascii=False) if value else ""


def _reference_name(reference: Any) -> str:
    reference = as_dict(reference)
    location = as_dict(reference.get("location")) or reference
    uri = as_dict(location.get("uri")) or location
    return as_str(reference.get("name")) or PurePath(as_str(uri.get("path")) or "file").name


def workspace_folder(data: bytes | None) -> str | None:
    """The folder a workspace.json names (`file:///home/dev/project`), as a path."""
    try:
        folder = as_str(as_dict(json.loads(data)).get("folder")) if data else None
    except (ValueError, RecursionError):
        return None
    return unquote(urlparse(folder).path) if folder else None
