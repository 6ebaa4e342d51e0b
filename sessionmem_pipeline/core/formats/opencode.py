"""OpenCode sessions (before 1.2): `~/.local/share/opencode/storage/` holds one session across many files.

    session/<project id>/<session id>.json   {id, projectID, directory, parentID?, title, time: {created, updated}}
    message/<session id>/<message id>.json   {id, sessionID, role, time: {created, completed?}, modelID?, ...}
    part/<message id>/<part id>.json         {id, messageID, type, text | tool/callID/state | ...}

The unit of discovery is the session file: it is what discovery hands to the parser, which reads that session's
message and part files beside it read-only (through `Related`, never opening anything itself). Change detection
is the session file's: OpenCode rewrites it (`time.updated`, title, summary) as the session goes on, and the
session is then read again whole; a message written without the session file changing is picked up the next
time it changes (or by `index --full`).
Message and part files are never read on their own (they lie in OpenCode's territory, matching no pattern).

Messages in `time.created` order (ties by id, which OpenCode makes ascending); parts by id. Part types: `text`
(a `synthetic` text on a user message is something OpenCode added: kind=injected), `reasoning` (thinking), `tool`
(`state.input`, `state.output`, `state.error`; status "error" marks a failed call), `file` (a placeholder naming
it), `subtask`/`agent` (their prompt or name as text); step, snapshot, patch and compaction bookkeeping is skipped
(counted). An assistant message's `error` is kept as a system event when it has nothing else.

Identity: session_id = the session `id` (`ses_…`); message_id = the message `id` (`msg_…`); project = the last
component of the session's `directory`, else the project folder's name; parent_session_id = `parentID`.
OpenCode 1.2 and later keep everything in one SQLite file (`opencode.db`): recognised, not read yet.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import PurePath
from typing import Any

from sessionmem_pipeline.core.formats.drafts import (
    DraftCall,
    DraftMessage,
    SessionDraft,
    as_dict,
    as_id,
    as_int,
    as_str,
    build_result,
    placeholder,
)
from sessionmem_pipeline.core.formats.gemini import decode_json
from sessionmem_pipeline.core.formats.registry import FormatError, Related
from sessionmem_pipeline.core.formats.source import FileContext, parse_timestamp
from sessionmem_pipeline.core.models import KIND_EVENT, KIND_INJECTED, ParseResult, ParseWarning

FORMAT = "opencode"
SESSION_PATTERN = "storage/session/*/*.json"
BOOKKEEPING_PARTS = frozenset({"step-start", "step-finish", "snapshot", "patch", "compaction", "retry"})


def parse(ctx: FileContext, data: bytes, related: Related) -> ParseResult:
    session = decode_json(data)
    if not isinstance(session, dict):
        raise FormatError("unknown format", f"{ctx.path}: expected an OpenCode session object")
    storage = PurePath(ctx.path).parent.parent.parent
    session_id = as_id(session.get("id")) or PurePath(ctx.path).stem
    warnings: list[ParseWarning] = []
    skipped: Counter[str] = Counter()
    records = _records(related, storage / "message" / session_id, warnings, skipped)
    records.sort(key=lambda record: (_created(record) or 0, as_str(record.get("id")) or ""))
    messages: list[DraftMessage] = []
    for position, record in enumerate(records, start=1):
        parts = _records(related, storage / "part" / (as_str(record.get("id")) or ""), warnings, skipped)
        parts.sort(key=lambda part: as_str(part.get("id")) or "")
        messages.extend(_messages(record, parts, position, skipped))
    directory = as_str(session.get("directory"))
    draft = SessionDraft(
        session_id=session_id,
        project=ctx.project(directory) if directory else PurePath(ctx.path).parent.name,
        messages=messages,
        title=as_str(session.get("title")),
        parent_session_id=as_id(session.get("parentID")),
        cwd=directory,
        model=next((m.metadata["model"] for m in reversed(messages) if "model" in m.metadata), None),
        metadata={key: session[key] for key in ("projectID", "version") if as_str(session.get(key))},
    )
    return build_result(ctx.path, FORMAT, [draft], warnings, skipped)


def _records(related: Related, folder: PurePath, warnings: list[ParseWarning], skipped: Counter[str]) -> list[dict]:
    """The JSON objects of a folder's `.json` files; unreadable ones are warned about and left out."""
    found: list[dict[str, Any]] = []
    if not folder.name:
        return found
    for name in related.list(str(folder)):
        if not name.endswith(".json"):
            continue
        data = related.read(str(folder / name))
        try:
            record = json.loads(data) if data is not None else None
        except (ValueError, RecursionError):
            record = None
        if isinstance(record, dict):
            found.append(record)
        else:
            warnings.append(ParseWarning(str(folder / name), 0, "not an OpenCode JSON object; skipped"))
            skipped["unreadable file"] += 1
    return found


def _created(record: dict[str, Any]) -> int | None:
    return as_int(as_dict(record.get("time")).get("created"))


def _messages(record: dict[str, Any], parts: list[dict[str, Any]], position: int, skipped: Counter[str]) -> list:
    role = as_str(record.get("role"))
    if role not in ("user", "assistant"):
        skipped["unknown role"] += 1
        return []
    message_id = as_id(record.get("id")) or f"M{position}"
    timestamp = parse_timestamp(_created(record))
    message = DraftMessage(message_id, role, 0, timestamp, cwd=as_str(as_dict(record.get("path")).get("cwd")))
    injected = DraftMessage(message_id + "/context", role, 0, timestamp, KIND_INJECTED)
    for part in parts:
        _add_part(message, injected, part, skipped)
    model = as_str(record.get("modelID")) or as_str(as_dict(record.get("model")).get("modelID"))
    if model and role == "assistant":
        message.metadata["model"] = model
    error = as_dict(record.get("error"))
    if error and message.is_empty:
        text = as_str(as_dict(error.get("data")).get("message")) or as_str(error.get("name")) or "error"
        return [DraftMessage(message_id, "system", 0, timestamp, KIND_EVENT, texts=[text])]
    return [message, injected] if injected.has_text else [message]


def _add_part(message: DraftMessage, injected: DraftMessage, part: dict[str, Any], skipped: Counter[str]) -> None:
    kind = as_str(part.get("type")) or "unknown"
    if kind == "text":
        target = injected if part.get("synthetic") is True and message.role == "user" else message
        target.texts.append(as_str(part.get("text")) or "")
    elif kind == "reasoning":
        message.thinking.append(as_str(part.get("text")) or "")
    elif kind == "tool":
        message.calls.append(_call(part))
    elif kind == "file":
        message.texts.append(placeholder("file", as_str(part.get("filename")) or as_str(part.get("mime"))))
    elif kind in ("subtask", "agent"):
        message.texts.append(as_str(part.get("prompt")) or as_str(part.get("name")) or "")
    else:
        skipped[f"{kind} part" if kind in BOOKKEEPING_PARTS else "unknown part"] += 1


def _call(part: dict[str, Any]) -> DraftCall:
    state = as_dict(part.get("state"))
    output = state.get("output") if state.get("status") != "error" else state.get("error")
    if output is not None and not isinstance(output, str):
        output = json.dumps(output, ensure_ascii=False)
    return DraftCall(
        name=as_str(part.get("tool")) or "unknown",
        input=as_dict(state.get("input")),
        call_id=as_str(part.get("callID")),
        output=output,
        is_error=state.get("status") == "error",
    )
